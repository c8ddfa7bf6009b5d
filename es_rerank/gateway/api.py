"""The gateway's routes: Elasticsearch's info and ``_search`` served by the reranking pipeline, plus admin routes
(the other calls an Elasticsearch client makes are ``client_api``'s).

Thin on purpose: a search is answered by ``searching.run_search`` (parse, rank, shape). Errors are raised as
``errors.GatewayError`` (or the backend's and worker's own errors) and rendered by the app's one handler.

Each search has a query id, the client's ``X-Opaque-Id`` header (as Elasticsearch takes
it) or one made here, sent back in that header; a search answered without the model
logs one JSON line with it and the reason (``model_fallback``).
"""

from __future__ import annotations

import logging
from importlib import metadata

from flask import Blueprint, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from es_rerank.backends.base import BackendError
from es_rerank.gateway.errors import ServiceUnavailable, public_reason
from es_rerank.gateway.health import ModelProbe, health_body, model_answers, red_body, serving_state
from es_rerank.gateway.request_parts import QUERY_ID_HEADER, json_body, query_id
from es_rerank.gateway.search_request import url_parameters
from es_rerank.gateway.searching import run_search
from es_rerank.gateway.state import gateway_state
from es_rerank.ranking.served import ServedSearch

api = Blueprint("api", __name__)
log = logging.getLogger(__name__)
# The Elasticsearch API the gateway answers in: the lowest 8.x, so that a client switching features on by the
# server's version assumes none that came later.
API_VERSION = "8.0.0"
ENGINE_NAMES = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch", "embedded": "the embedded tantivy index"}


def _served() -> ServedSearch:
    return gateway_state().served


def _probe() -> ModelProbe:
    return gateway_state().probe


@api.get("/")
def info() -> Response:
    """Elasticsearch's cluster info, its version block saying that this is es-rerank in front of which backend."""
    pipeline = _served().pipeline()
    serving = serving_state(pipeline, model_answers(pipeline, _probe()))  # what health says, from the same probe
    engine = pipeline.backend.engine
    ranked = "BM25, reranked by Delta-32-Lex3" if serving["reranks"] else "BM25"
    # Every field Elasticsearch's own has (typed clients require them), and ours: the distribution (as OpenSearch
    # names itself there) and the backend behind it. No Lucene: "none" rather than a version it does not run.
    version = {
        "number": API_VERSION,
        "build_flavor": "default",
        "build_type": "es-rerank",
        "build_hash": "unknown",
        "build_date": "unknown",
        "build_snapshot": False,
        "lucene_version": "none",
        "minimum_wire_compatibility_version": "7.17.0",
        "minimum_index_compatibility_version": "7.0.0",
        "distribution": "es-rerank",
        "distribution_version": _package_version(),
        "backend": engine,
    }
    return jsonify(
        {
            "name": "es-rerank",
            "cluster_name": "es-rerank",
            "cluster_uuid": "_na_",
            "version": version,
            "tagline": f"es-rerank in front of {ENGINE_NAMES.get(engine, engine)}: {ranked}",
            "esrr": {**serving, "backend": engine, "window": pipeline.window},
        }
    )


@api.route("/_search", methods=["GET", "POST"])
@api.route("/<index>/_search", methods=["GET", "POST"])
def search(index: str | None = None) -> Response:
    """Elasticsearch's ``_search``: BM25 top-window reranked, a page of it as an ES response."""
    asked_id = query_id()
    response = jsonify(run_search(index, url_parameters(request.query_string), json_body(), asked_id))
    response.headers[QUERY_ID_HEADER] = asked_id
    return response


@api.get("/_esrr/health")
def health() -> Response | tuple[Response, int]:
    """Green when the index and the model answer; yellow when searches keep BM25's order, or the version
    current on disk cannot be served (the reasons say why); a 503 naming the problem when searches cannot be
    answered: status red and the reason (files of the index changed on disk after they were verified among
    them)."""
    served = _served()
    try:
        return jsonify(health_body(served, _probe()))
    except BackendError as error:
        log.error("health: the search backend cannot answer: %s", error)
        body = red_body(
            served.pipeline().backend.index, f"the search backend cannot answer: {public_reason(str(error))}"
        )
        return jsonify(body), 503


@api.post("/_esrr/reload")
def reload() -> Response:
    """Serve the index version that is current now, without waiting for the periodic look."""
    served = _served()
    try:
        changed = served.follow()
    except BackendError as error:
        log.error("still serving index %s: cannot follow the served index: %s", served.pipeline().backend.index, error)
        raise ServiceUnavailable(
            f"still serving index [{served.pipeline().backend.index}]: cannot follow the "
            f"served index: {public_reason(str(error))} (the gateway's log names the "
            "paths)"
        ) from None
    return jsonify({"index": served.pipeline().backend.index, "changed": changed})


@api.get("/metrics")
def metrics() -> Response:
    """Prometheus metrics in the text exposition format."""
    return Response(generate_latest(gateway_state().metrics.registry), mimetype=CONTENT_TYPE_LATEST)


def _package_version() -> str:
    try:
        return metadata.version("es-rerank")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
