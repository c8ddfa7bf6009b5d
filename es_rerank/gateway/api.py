"""The gateway's routes: Elasticsearch's ``_search`` served by the reranking pipeline, plus admin routes.

Thin on purpose: a search is answered by ``searching.run_search`` (parse, rank, shape). Errors are raised as ``errors.GatewayError`` (or the backend's and
worker's own errors) and rendered by the app's one handler.

Each search has a query id, the client's ``X-Opaque-Id`` header (as Elasticsearch takes
it) or one made here, sent back in that header; a search answered without the model
logs one JSON line with it and the reason (``model_fallback``).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from es_rerank.backends.base import BackendError
from es_rerank.gateway.errors import BadSearchRequest, ServiceUnavailable, public_reason
from es_rerank.gateway.health import ModelProbe
from es_rerank.gateway.metrics import GatewayMetrics
from es_rerank.ranking.dispatch import WorkerReranker
from es_rerank.ranking.pipeline import PROBE_QUERY
from es_rerank.gateway.search_request import url_parameters
from es_rerank.gateway.searching import run_search
from es_rerank.ranking.served import ServedSearch

api = Blueprint("api", __name__)
log = logging.getLogger(__name__)
QUERY_ID_HEADER = "X-Opaque-Id"
_QUERY_ID = re.compile(r"[\x21-\x7e]{1,64}")  # printable ASCII, no spaces: safe in a log line and a header


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
    serving = _serving(pipeline, _reranks_now(pipeline))
    tagline = "BM25, reranked by Delta-32-Lex3" if serving["reranks"] else "BM25"
    return jsonify({"name": "es-rerank", "cluster_name": "es-rerank", "tagline": tagline,
                    "esrr": {**serving, "window": pipeline.window}})


@api.route("/_search", methods=["GET", "POST"])
@api.route("/<index>/_search", methods=["GET", "POST"])
def search(index: str | None = None) -> Response:
    """Elasticsearch's ``_search``: BM25 top-window reranked, a page of it as an ES response."""
    query_id = _query_id()
    response = jsonify(run_search(index, url_parameters(request.query_string), _json_body(), query_id))
    response.headers[QUERY_ID_HEADER] = query_id
    return response


@api.get("/_esrr/health")
def health() -> Response:
    """Green when the index and the model answer; yellow when searches keep BM25's order, or the version
    current on disk cannot be served (the reasons say why); a 503 naming the problem when searches cannot be
    answered (statistics changed on disk after they were checked among them)."""
    served = _served()
    pipeline = served.pipeline()
    pipeline.backend.search(PROBE_QUERY, 1)  # a BackendError is the app's 503
    fallback = _probe().fallback(pipeline)  # a worker that refuses every request is the app's 503 too
    body = {"status": "green", **_serving(pipeline, fallback is None and _reranks_now(pipeline))}
    if fallback is not None:
        body.update(status="yellow", fallback=fallback)
    if served.problem is not None:  # logged with its paths by ServedSearch
        body.update(status="yellow", problem=f"the index version current on disk cannot be served, so "
                                             f"[{pipeline.backend.index}] still is: {public_reason(served.problem)}")
    return jsonify(body)


@api.post("/_esrr/reload")
def reload() -> Response:
    """Serve the index version that is current now, without waiting for the periodic look."""
    served = _served()
    try:
        changed = served.follow()
    except BackendError as error:
        log.error("still serving index %s: cannot follow the served index: %s", served.pipeline().backend.index, error)
        raise ServiceUnavailable(f"still serving index [{served.pipeline().backend.index}]: cannot follow the "
                                 f"served index: {public_reason(str(error))} (the gateway's log names the "
                                 "paths)") from None
    return jsonify({"index": served.pipeline().backend.index, "changed": changed})


@api.get("/metrics")
def metrics() -> Response:
    """Prometheus metrics in the text exposition format."""
    return Response(generate_latest(_metrics().registry), mimetype=CONTENT_TYPE_LATEST)


def _query_id() -> str:
    """The client's ``X-Opaque-Id`` when it is a short printable token, else a new id."""
    given = request.headers.get(QUERY_ID_HEADER, "")
    return given if _QUERY_ID.fullmatch(given) else uuid.uuid4().hex[:16]


def _reranks_now(pipeline: Any) -> bool:
    """Whether searches are sent to a model now: one is set, and no breaker skips the workers."""
    reranker = pipeline.reranker
    return not isinstance(reranker, WorkerReranker) or reranker.available


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


def _serving(pipeline: Any, model_answers: bool) -> dict[str, Any]:
    """The served index, its documents, whether a model scores the window now (which one a worker
    names per search, in ``esrr.ranker``), and whether the judged-neighbour votes apply to this index."""
    serving = {"index": pipeline.backend.index, "documents": pipeline.backend.stats.n_docs,
               "reranks": pipeline.reranker is not None and pipeline.window > 0 and model_answers}
    if pipeline.neighbours is not None:
        problem = pipeline.neighbours_problem()
        serving["judged_neighbours"] = "applied" if problem is None else f"not applied: {problem}"
    return serving
