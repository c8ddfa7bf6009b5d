"""One ``_search`` answered in-process: the index named, the request parsed, ranked and shaped.

Shared by the ``_search`` route and every other caller inside the gateway (the site
page, ``_msearch``), so that each asks the same pipeline the same way. Runs inside a
Flask app context: it reads the served pipeline, the metrics and the limits from the app.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from flask import current_app

from es_rerank.backends.answer_budget import AnswerLimits
from es_rerank.backends.base import QueryRefused, SearchContexts
from es_rerank.backends.embedded_search import EmbeddedSearch
from es_rerank.backends.highlight import source_patterns
from es_rerank.backends.query_tree import QueryCost
from es_rerank.gateway.errors import BadSearchRequest, IndexNotFound, clipped
from es_rerank.gateway.experiment import interleaved_page, takes_part
from es_rerank.gateway.exploration import exploring_page
from es_rerank.gateway.heavy_lane import is_heavy
from es_rerank.gateway.index_names import unserved_name
from es_rerank.gateway.metrics import ranking_outcome
from es_rerank.gateway.scroll_ids import ScrollMissing, ScrollState, decode, encode, keep_alive_seconds
from es_rerank.gateway.search_request import SearchRequest, parse_search
from es_rerank.gateway.state import GatewayState, gateway_state
from es_rerank.gateway.url_options import field_types, flag, total_as_number, typed_aggregations
from es_rerank.ranking.answer import Answer, answer
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.response import ResponseContent, search_response

log = logging.getLogger(__name__)


def run_search(index: str | None, params: Mapping[str, str], body: Any, query_id: str) -> dict[str, Any]:
    """The Elasticsearch ``_search`` response body for URL ``params`` and a decoded JSON ``body`` on ``index``.

    Raises the gateway's errors (a bad request, an unknown index) and the backend's, which the app renders.
    """
    pipeline = gateway_state().served.pipeline()
    backend = pipeline.backend
    config = current_app.config
    check_index(index, backend.index)
    check_source_patterns(params, body, config["ESRR_MAX_SOURCE_PATTERNS"])
    asked = parse_search(params, body, config["ESRR_MAX_QUERY_WORDS"], pipeline.window)
    started = time.perf_counter()
    if asked.sorted_elsewhere and isinstance(backend, SearchContexts):  # the engine answers in its own order
        return shaped(_in_backend_order(backend.passthrough, asked, started), params, asked.body, backend)
    if "scroll" in asked.passthrough:  # the embedded backend: a scroll that the id carries (scroll_ids)
        return shaped(scroll_page(pipeline, asked, None, query_id), params, asked.body, backend)
    return shaped(_ranked(pipeline, asked, query_id), params, asked.body, backend)


def _ranked(pipeline: SearchPipeline, asked: SearchRequest, query_id: str) -> dict[str, Any]:
    """The answer to a search the pipeline ranks (reranked, or in the first stage's or the sort's order)."""
    state = gateway_state()
    metrics, lane = state.metrics, state.heavy_lane
    backend = pipeline.backend
    config = current_app.config
    limits = AnswerLimits(config["ESRR_MAX_ANSWER_BYTES"], config["ESRR_MAX_HIGHLIGHT_CHARS"])
    started = time.perf_counter()
    try:
        prepared = backend.prepare(asked.body)  # read and weighed; the embedded index translates it when searched
        heavy = _heavy(asked, prepared)
        if heavy and lane.apart is not None:  # the heavy searches' own process runs this function (heavy_process)
            apart = lane.run_apart(_ranked, asked, query_id)
            metrics.searches_by(ranking_outcome(apart["esrr"])).inc()  # counted here: that process's are unread
            return apart
        with lane.taken(heavy):
            answered = answer(pipeline, asked, limits, clock=metrics.stage, prepared=prepared)
    except QueryRefused as error:
        raise BadSearchRequest(str(error)) from None
    ranking = answered.ranking
    page, shown, drawn = _drawn_page(answered, asked, backend, prepared, limits.max_bytes, state)
    took = time.perf_counter() - started
    metrics.search_seconds.observe(took)
    if ranking.fallback:
        metrics.fallbacks.inc()
        log.warning(
            json.dumps(
                {
                    "event": "model_fallback",
                    "query_id": query_id,
                    "index": pipeline.backend.index,
                    "took_ms": round(took * 1000, 1),
                    "reason": ranking.fallback,
                }
            )
        )
    response = search_response(
        ResponseContent(
            page,
            backend.index,
            ranking.ranker,
            ranking.retrieved,
            ranking.depth,
            took_ms=round(took * 1000),
            fallback=ranking.fallback,
            skipped=asked.skipped,
            shown=shown,
            first_stage=ranking.first_stage,
            explain=asked.explain,
            max_score=_max_score(ranking.ranked, asked.size),
        )
    )
    if asked.sorts_by_field:  # as in Elasticsearch: hits sorted by a field have no max_score
        response["hits"]["max_score"] = None
    response["esrr"].update(drawn)
    metrics.searches_by(ranking_outcome(response["esrr"])).inc()
    return response


def _drawn_page(
    answered: Answer, asked: SearchRequest, backend: Any, prepared: object, max_bytes: int | None, state: GatewayState
) -> tuple[list[RankedHit], list[dict[str, Any]], dict[str, Any]]:
    """The first page shown for ``answered``: the served one, or one interleaved with ``ESRR_EXPERIMENT``'s
    candidate, or one exploring below the page (``ESRR_EXPLORE``); its hits, their rendered ``_source`` and
    highlight, and what the answer's ``esrr`` says of it (the experiment's teams, the explored places)."""
    experiment = state.experiment
    if experiment is not None and takes_part(asked) and experiment.applies(backend.stats):  # ESRR_EXPERIMENT
        page, shown, teams = interleaved_page(experiment, answered, asked, backend, prepared, max_bytes)
        return page, shown, {"experiment": {"name": experiment.name, "teams": teams}}
    exploration = state.exploration
    explored = None
    if exploration is not None and takes_part(asked):  # ESRR_EXPLORE
        explored = exploring_page(exploration, answered, asked, backend, prepared, max_bytes)
    if explored is None:
        return answered.page, answered.shown, {}
    page, shown, places = explored
    return page, shown, {"explored": places}


def scroll_page(
    pipeline: SearchPipeline, asked: SearchRequest, after: list[Any] | None, query_id: str
) -> dict[str, Any]:
    """One page of a scroll on the embedded backend, after the sort values ``after`` (None: the first page), with
    the ``_scroll_id`` that continues it: the request's sort with index order as the last key, ``search_after``."""
    keep_alive = asked.passthrough["scroll"]
    seconds = keep_alive_seconds(keep_alive)
    if asked.offset:
        raise BadSearchRequest(
            "using [from] is not allowed in a scroll context; page with the _scroll_id each page returns"
        )
    if "search_after" in asked.body:
        raise BadSearchRequest(
            "[search_after] cannot be used in a scroll context; page with the _scroll_id each page returns"
        )
    if not asked.size:
        raise BadSearchRequest(
            "[size] cannot be [0] in a scroll context; ask for the hits of each page (helpers.scan asks for 1,000)"
        )
    asked_sort = asked.body.get("sort")
    body = {**asked.body, "sort": _then_index_order(asked_sort)}
    if after is not None:
        body["search_after"] = after
    response = _ranked(pipeline, replace(asked, body=body), query_id)
    hits = response["hits"]["hits"]
    last = hits[-1]["sort"] if hits else after
    for hit in hits:  # the index order key is the scroll's own, not the request's
        if asked_sort is None:
            del hit["sort"]
        else:
            hit["sort"] = hit["sort"][:-1]
    # Aggregations are the first page's alone, as in Elasticsearch: the next pages do not count them again.
    kept = {key: value for key, value in asked.body.items() if key not in ("aggs", "aggregations")}
    state = ScrollState(pipeline.backend.version, kept, asked.size, last, keep_alive, time.time() + seconds)
    return {"_scroll_id": encode(state), **response}


def continue_scroll(scroll_id: Any, keep_alive: str | None, query_id: str) -> dict[str, Any]:
    """The next page of a scroll this gateway began on the embedded backend (``_search/scroll``)."""
    state = decode(scroll_id)
    if time.time() > state.expires_s:
        raise ScrollMissing(
            f"No search context found for id [{clipped(str(scroll_id))}]: the scroll's keep-alive "
            f"({state.keep_alive}) passed; start it again, with a longer ?scroll="
        )
    pipeline = gateway_state().served.pipeline()
    if pipeline.backend.version != state.version:
        raise ScrollMissing(
            f"No search context found for id [{clipped(str(scroll_id))}]: the scroll began on index "
            f"version [{clipped(state.version)}], and [{pipeline.backend.version}] is served now (a "
            "reindex); start the scroll again"
        )
    check_source_patterns({}, state.body, current_app.config["ESRR_MAX_SOURCE_PATTERNS"])
    asked = parse_search(
        {"scroll": keep_alive or state.keep_alive},
        {**state.body, "size": state.size},
        current_app.config["ESRR_MAX_QUERY_WORDS"],
        pipeline.window,
    )
    return scroll_page(pipeline, asked, state.after, query_id)


def cleared_scrolls(scroll_ids: list[Any]) -> int:
    """How many of ``scroll_ids`` were live scrolls of this gateway (nothing is held for them: clearing frees none)."""
    live = 0
    for scroll_id in scroll_ids:
        try:
            live += time.time() <= decode(scroll_id).expires_s
        except BadSearchRequest:
            continue
    return live


def _then_index_order(sort: Any) -> list[Any]:
    """A request's sort (by score when none) with index order as the last key: a scroll's cursor is then unique."""
    keys = ["_score"] if sort is None else (list(sort) if isinstance(sort, list) else [sort])
    return [*keys, "_doc"]


def _max_score(ranked: Any, size: int) -> float | None:
    """The whole result's highest ``_score`` (its first hit's, whatever the page); none for ``size`` 0, as in
    Elasticsearch, which does not score a search that shows no hit."""
    return float(ranked[0].score) if ranked and size else None


def shaped(
    response: dict[str, Any], params: Mapping[str, str], body: Mapping[str, Any], backend: Any
) -> dict[str, Any]:
    """A search's answer as ``rest_total_hits_as_int`` and ``typed_keys`` in the URL ``params`` ask for it."""
    if flag(params, "rest_total_hits_as_int"):
        total_as_number(response)
    if flag(params, "typed_keys") and isinstance(response.get("aggregations"), dict):
        types = field_types(backend.description()["mappings"].get("properties", {}))
        response["aggregations"] = typed_aggregations(
            response["aggregations"], body.get("aggs", body.get("aggregations")), types
        )
    return response


def _heavy(asked: SearchRequest, prepared: Any) -> bool:
    """Whether the search takes the heavy lane: the hits it renders and, on the embedded index, which searches and
    highlights here, its highlight, its query's cost and a sort by a field (which reads every match)."""
    if not isinstance(prepared, EmbeddedSearch):  # Elasticsearch searches and highlights; the gateway renders
        return is_heavy(asked.size, (), QueryCost())
    return asked.sorts_by_field or is_heavy(asked.size, prepared.highlight, prepared.cost)


def _in_backend_order(passthrough: Any, asked: SearchRequest, started: float) -> dict[str, Any]:
    """Elasticsearch's own answer to a request it orders itself (a sort, a scroll), with why it is not reranked."""
    try:
        response = passthrough({**asked.body, "from": asked.offset, "size": asked.size}, asked.passthrough)
    except QueryRefused as error:
        raise BadSearchRequest(str(error)) from None
    response["took"] = round((time.perf_counter() - started) * 1000)
    gateway_state().metrics.searches_by("skipped").inc()
    return in_elasticsearchs_order(response, asked.skipped.message if asked.skipped else "")


def check_source_patterns(params: Mapping[str, str], body: Any, limit: int) -> None:
    """``BadSearchRequest`` when the ``_source`` of the URL and the body list more than ``limit`` patterns (before
    the request is parsed)."""
    listed = sum(
        len([name for name in params.get(key, "").split(",") if name])
        for key in ("_source", "_source_includes", "_source_excludes")
    )
    if isinstance(body, dict):
        listed += source_patterns(body.get("_source"))
    if listed > limit:
        raise BadSearchRequest(
            f"_source lists {listed} patterns, over the gateway's limit of {limit} "
            f"(ESRR_GATEWAY_MAX_SOURCE_PATTERNS={limit}); name the fields wanted, or use a "
            'wildcard such as "meta*" for many'
        )


def in_elasticsearchs_order(response: dict[str, Any], why: str) -> dict[str, Any]:
    """Elasticsearch's answer with each hit marked as not reranked and ``esrr`` saying why (a sort, a scroll)."""
    for hit in response.get("hits", {}).get("hits", []):
        score = hit.get("_score")
        hit["fields"] = {
            **hit.get("fields", {}),
            "bm25_score": [score] if score is not None else [],
            "reranked": [False],
        }
    response["esrr"] = {"ranker": "Elasticsearch", "skipped": why}
    return response


def check_index(named: str | None, served: str) -> None:
    """``IndexNotFound`` unless every index ``named`` (comma-separated, ``*`` wildcards allowed) is the served one,
    its alias, or all."""
    if named is None:
        return
    alias = current_app.config["ESRR_ALIAS"]
    unserved = unserved_name(named, (served, alias))
    if unserved is not None:
        raise IndexNotFound(
            f"no such index [{clipped(unserved)}]; "
            f"this gateway serves [{alias}] (index [{served}]): search /{alias}/_search or /_search"
        )
