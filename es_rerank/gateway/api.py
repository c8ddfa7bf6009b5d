"""The gateway's routes: Elasticsearch's ``_search`` served by the reranking pipeline, plus admin routes.

Thin on purpose: parse (``search_request``), rank (``pipeline``), shape
(``response``). Errors are raised as ``errors.GatewayError`` (or the backend's and
worker's own errors) and rendered by the app's one handler.
"""

from __future__ import annotations

import json
import time
from fnmatch import fnmatchcase
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from es_rerank.backends.base import BackendError
from es_rerank.gateway.errors import BadSearchRequest, IndexNotFound, ServiceUnavailable
from es_rerank.gateway.health import ModelProbe
from es_rerank.gateway.metrics import GatewayMetrics
from es_rerank.ranking.pipeline import PROBE_QUERY
from es_rerank.ranking.response import search_response
from es_rerank.gateway.search_request import parse_search
from es_rerank.ranking.served import ServedSearch

api = Blueprint("api", __name__)
ANY_INDEX = ("_all", "*")


def _served() -> ServedSearch:
    return current_app.extensions["esrr.served"]


def _probe() -> ModelProbe:
    return current_app.extensions["esrr.probe"]


def _metrics() -> GatewayMetrics:
    return current_app.extensions["esrr.metrics"]


@api.get("/")
def info() -> Response:
    """What this gateway serves, in the place of Elasticsearch's cluster info."""
    pipeline = _served().pipeline()
    serving = _serving(pipeline)
    tagline = "BM25, reranked by Delta-32-Lex3" if serving["reranks"] else "BM25"
    return jsonify({"name": "es-rerank", "cluster_name": "es-rerank", "tagline": tagline,
                    "esrr": {**serving, "window": pipeline.window}})


@api.route("/_search", methods=["GET", "POST"])
@api.route("/<index>/_search", methods=["GET", "POST"])
def search(index: str | None = None) -> Response:
    """Elasticsearch's ``_search``: BM25 top-window reranked, a page of it as an ES response."""
    pipeline = _served().pipeline()
    _check_index(index, pipeline.backend.index)
    asked = parse_search(request.args, _json_body())
    metrics = _metrics()
    started = time.perf_counter()
    ranking = pipeline.rank(asked.text, asked.depth, clock=metrics.stage)
    took = time.perf_counter() - started
    metrics.search_seconds.observe(took)
    if ranking.fallback:
        metrics.fallbacks.inc()
    page = ranking.ranked[asked.offset:asked.offset + asked.size]
    return jsonify(search_response(page, pipeline.backend.index, round(took * 1000), ranking.retrieved,
                                   ranking.depth, ranking.ranker, ranking.fallback))


@api.get("/_esrr/health")
def health() -> Response:
    """Green when the index and the model answer; yellow when searches keep BM25's order (the reason says
    why); a 503 naming the problem when searches cannot be answered."""
    pipeline = _served().pipeline()
    pipeline.backend.search(PROBE_QUERY, 1)  # a BackendError is the app's 503
    fallback = _probe().fallback(pipeline)  # a worker that refuses every request is the app's 503 too
    if fallback is None:
        return jsonify({"status": "green", **_serving(pipeline)})
    return jsonify({"status": "yellow", **_serving(pipeline), "fallback": fallback})


@api.post("/_esrr/reload")
def reload() -> Response:
    """Serve the index version that is current now, without waiting for the periodic look."""
    served = _served()
    try:
        changed = served.follow()
    except BackendError as error:
        raise ServiceUnavailable(f"still serving index [{served.pipeline().backend.index}]: cannot follow the "
                                 f"served index: {error}") from None
    return jsonify({"index": served.pipeline().backend.index, "changed": changed})


@api.get("/metrics")
def metrics() -> Response:
    """Prometheus metrics in the text exposition format."""
    return Response(generate_latest(_metrics().registry), mimetype=CONTENT_TYPE_LATEST)


def _check_index(named: str | None, served: str) -> None:
    """``IndexNotFound`` unless every index ``named`` (comma-separated, wildcards allowed) is the served one,
    its alias, or all."""
    if named is None:
        return
    accepted = (served, current_app.config["ESRR_ALIAS"])
    for name in named.split(","):
        if name not in ANY_INDEX and not (name and any(fnmatchcase(index, name) for index in accepted)):
            raise IndexNotFound(f"no such index [{name}]; this gateway serves [{current_app.config['ESRR_ALIAS']}] "
                                f"(index [{served}]): search /{current_app.config['ESRR_ALIAS']}/_search or /_search")


def _json_body() -> Any:
    """The request's JSON body, None when it has none."""
    data = request.get_data(cache=False)
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadSearchRequest(f"the request body is not JSON ({error}); send a JSON object such as "
                               '{"query": {"match": {"text": "green tea"}}}') from None
    except RecursionError:
        raise BadSearchRequest("the request body nests too deeply to read; send a search body such as "
                               '{"query": {"match": {"text": "green tea"}}}') from None


def _serving(pipeline: Any) -> dict[str, Any]:
    """The served index, its documents, whether a model scores the window (which one a worker
    names per search, in ``esrr.ranker``), and whether the judged-neighbour votes apply to this index."""
    serving = {"index": pipeline.backend.index, "documents": pipeline.backend.stats.n_docs,
               "reranks": pipeline.reranker is not None and pipeline.window > 0}
    if pipeline.neighbours is not None:
        problem = pipeline.neighbours_problem()
        serving["judged_neighbours"] = "applied" if problem is None else f"not applied: {problem}"
    return serving
