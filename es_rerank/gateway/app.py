"""The gateway's Flask app: ``create_app`` wires the served pipeline, the routes and one error handler.

Torch-free: the model is reached through the workers (``dispatch.WorkerReranker``),
or not at all. ``esrr serve`` builds the pipeline from the settings and serves the
app with waitress; tests build it around pipelines of their own.

Every response carries ``X-Elastic-Product: Elasticsearch``, the header by which the
official Elasticsearch clients (8.x) recognise a server they may talk to, so that an
application's existing ES client can point at the gateway unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

from flask import Flask, Response, g, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from es_rerank.backends.base import BackendError, QueryRefused
from es_rerank.backends.query_tree import bind_limits, unbind_limits
from es_rerank.gateway.api import api
from es_rerank.gateway.client_api import client_api
from es_rerank.gateway.client_layouts import install_client_layouts
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.errors import (
    PRODUCT_HEADER,
    SERVED_APIS,
    GatewayError,
    WriteRefused,
    clipped,
    error_body,
    public_reason,
)
from es_rerank.gateway.events import install_events
from es_rerank.gateway.experiment import load_experiment
from es_rerank.gateway.exploration import load_exploration
from es_rerank.gateway.health import ModelProbe
from es_rerank.gateway.heavy_lane import HeavyLane
from es_rerank.gateway.heavy_process import HeavyProcesses
from es_rerank.gateway.heavy_refusal import RefuseKnownHeavy
from es_rerank.gateway.metrics import GatewayMetrics
from es_rerank.gateway.response_filter import FilterPath, filtered, read_filter_path
from es_rerank.gateway.search_request import url_parameters
from es_rerank.gateway.site import site
from es_rerank.gateway.state import GatewayState, attach_state
from es_rerank.gateway.url_limit import UrlLengthLimit
from es_rerank.gateway.writes import is_write
from es_rerank.payload import PayloadError, WorkerSetupError
from es_rerank.ranking.served import ServedSearch

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1 << 20


def create_app(
    served: ServedSearch, settings: GatewaySettings | None = None, heavy_app: Callable[[], Flask] | None = None
) -> Flask:
    """A gateway serving ``served``'s pipeline; ``settings`` default to the ``ESRR_*`` environment. With
    ``heavy_app`` (picklable; it builds this app, without ``heavy_app``, around the same pipeline in another
    process) and ``ESRR_GATEWAY_HEAVY_PROCESS``, heavy searches run in processes of their own (``heavy_process``);
    without, in this one."""
    settings = settings or GatewaySettings()
    app = Flask(__name__)
    # A search body is a few hundred bytes; a larger one is a 413 before it is read.
    app.config.update(
        ESRR_ALIAS=settings.es_alias,
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        ESRR_MAX_QUERY_WORDS=settings.gateway_max_query_words,
        ESRR_MAX_MGET_DOCS=settings.gateway_max_mget_docs,
        ESRR_MAX_MSEARCH_SEARCHES=settings.gateway_max_msearch_searches,
        ESRR_MAX_ANSWER_BYTES=settings.gateway_max_answer_bytes,
        ESRR_MAX_HIGHLIGHT_CHARS=settings.gateway_max_highlight_chars,
        ESRR_MAX_SOURCE_PATTERNS=settings.gateway_max_source_patterns,
        ESRR_QUERY_LIMITS=settings.query_limits,
    )
    cast(DefaultJSONProvider, app.json).sort_keys = False  # keep Elasticsearch's key order
    metrics = GatewayMetrics()
    experiment = load_experiment(settings, served.pipeline())  # ESRR_EXPERIMENT, or None
    lane = _heavy_lane(settings, heavy_app)
    app.register_blueprint(api)
    app.register_blueprint(client_api)
    events = install_events(app, settings, metrics)  # POST /_esrr/events, and the site page's report of what it showed
    exploration = load_exploration(settings)  # ESRR_EXPLORE, or None
    attach_state(app, GatewayState(served, metrics, ModelProbe(), lane, experiment, events, exploration))
    _register_error_handlers(app)
    if settings.gateway_site:  # the search page for browsers at / (site.py)
        app.register_blueprint(site)
    # A heavy search repeated against a full lane: its 429 before it is read (heavy_refusal.py).
    # Flask's documented way to add WSGI middleware is to replace wsgi_app, which mypy sees as a method.
    app.wsgi_app = RefuseKnownHeavy(  # type: ignore[method-assign]
        app.wsgi_app, lane, on_refused=metrics.requests.labels("/_search", "429").inc
    )
    app.wsgi_app = UrlLengthLimit(  # type: ignore[method-assign]
        app.wsgi_app, settings.gateway_max_url_bytes, on_refused=metrics.requests.labels("unrouted", "414").inc
    )
    _install_hooks(app, settings, metrics)
    return app


def _install_hooks(app: Flask, settings: GatewaySettings, metrics: GatewayMetrics) -> None:
    """Around every request: the query limits bound, ``filter_path`` read first and applied last, the answer's
    size capped, Elasticsearch's product header, the request counted. One hook before and one after (Flask looks
    each up and calls it through ``ensure_sync``), with what they read from the settings taken once here."""
    max_answer_bytes = settings.gateway_max_answer_bytes
    product_header, product = PRODUCT_HEADER
    count = metrics.requests_by

    @app.before_request
    def _bound_and_filter() -> None:
        # Every search this request prepares, in this thread, has these limits; a bad filter_path is a 400 before
        # any work (the limits are unbound by the teardown either way).
        g.esrr_limits_token = bind_limits(app.config["ESRR_QUERY_LIMITS"])
        query = request.query_string
        if b"filter_path" in query:
            wanted = url_parameters(query).get("filter_path")
            g.esrr_filter_path = read_filter_path(wanted) if wanted is not None else None

    @app.teardown_request
    def _unbind(_error: BaseException | None) -> None:
        token = g.pop("esrr_limits_token", None)
        if token is not None:
            unbind_limits(token)

    @app.after_request
    def _as_elasticsearch(response: Response) -> Response:
        spec = g.pop("esrr_filter_path", None)
        if spec is not None:
            response = _filtered(app, response, spec)
        response = _capped(response, max_answer_bytes)
        response.headers[product_header] = product
        rule = request.url_rule
        count(rule.rule if rule is not None else "unrouted", str(response.status_code)).inc()
        return response

    install_client_layouts(app)  # after _as_elasticsearch, so that it runs before: filter_path and the cap see its hits


def _heavy_lane(settings: GatewaySettings, heavy_app: Callable[[], Flask] | None) -> HeavyLane:
    """The lane of heavy searches; with ``heavy_app`` and ``ESRR_GATEWAY_HEAVY_PROCESS``, run in processes apart."""
    apart = None
    if heavy_app is not None and settings.gateway_heavy_process:
        apart = HeavyProcesses(
            heavy_app,
            settings.gateway_heavy_slots,
            settings.gateway_heavy_timeout_s,
            settings.gateway_heavy_nice,
            settings.gateway_heavy_wait_s,
        )
    return HeavyLane(settings.gateway_heavy_slots, settings.gateway_heavy_queue, settings.gateway_heavy_wait_s, apart)


def _filtered(app: Flask, response: Response, spec: FilterPath) -> Response:
    """``response`` with only what ``filter_path`` names; an error's body is kept whole, as in Elasticsearch."""
    if response.is_streamed or not response.is_json:
        return response
    body = response.get_json(silent=True)
    if body is None or (response.status_code >= 400 and isinstance(body, dict) and "error" in body):
        return response
    response.set_data(app.json.dumps(filtered(body, spec)))
    return response


def _capped(response: Response, limit: int) -> Response:
    """``response``, or a 400 in its place when it weighs over ``limit`` bytes: the safety net behind the estimates
    of ``answer_budget`` (an ``_msearch`` of many searches, an ``_mget`` of large documents)."""
    weight = response.content_length
    if response.is_streamed or weight is None or weight <= limit:
        return response
    log.warning(
        "answer of %d bytes to %s %s refused (ESRR_GATEWAY_MAX_ANSWER_BYTES=%d)",
        weight,
        request.method,
        clipped(request.path),
        limit,
    )
    refused = jsonify(
        error_body(
            "illegal_argument_exception",
            f"the answer to this request weighs {weight:,} bytes, "
            f"over the gateway's limit of {limit:,} bytes (ESRR_GATEWAY_MAX_ANSWER_BYTES={limit});"
            " ask for fewer hits, documents or searches at once, or less _source",
            400,
        )
    )
    refused.status_code = 400
    return refused


def _register_error_handlers(app: Flask) -> None:
    """Render every error as an Elasticsearch error body."""

    def render(error_type: str, reason: str, status: int) -> tuple[Response, int]:
        return jsonify(error_body(error_type, reason, status)), status

    @app.errorhandler(GatewayError)
    def _gateway_error(error: GatewayError) -> tuple[Response, int]:
        return render(error.error_type, error.reason, error.status)

    @app.errorhandler(QueryRefused)
    def _refused(error: QueryRefused) -> tuple[Response, int]:
        return render("parsing_exception", str(error), 400)

    # The log has the whole message; the body, the same without the paths of this machine or a worker's.
    @app.errorhandler(BackendError)
    def _backend_down(error: BackendError) -> tuple[Response, int]:
        log.error("search backend failed: %s", error)
        return render(
            "search_phase_execution_exception", f"the search backend cannot answer: {public_reason(str(error))}", 503
        )

    @app.errorhandler(WorkerSetupError)
    @app.errorhandler(PayloadError)
    def _worker_refused(error: Exception) -> tuple[Response, int]:
        # Every query would meet it: a worker set up for another index or model.
        log.error("the scoring worker refused the request: %s", error)
        return render(
            "search_phase_execution_exception",
            f"the scoring worker refused the request: {public_reason(str(error))} (the gateway's log names the paths)",
            503,
        )

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> tuple[Response, int]:
        status = error.code or 500
        if status in (404, 405) and is_write(request.method, request.path, routed=status == 405):
            refusal = WriteRefused(request.method, request.path)
            return render(refusal.error_type, refusal.reason, refusal.status)
        kind = {404: "no_handler_found_exception", 405: "method_not_allowed_exception"}.get(status, "exception")
        reason = f"{error.name}: {error.description}"
        if status == 404:  # Elasticsearch's words, then what is served here
            reason = (
                f"no handler found for uri [{clipped(request.path)}] and method [{request.method}]; "
                f"the gateway serves {SERVED_APIS}"
            )
        response, status = render(kind, reason, status)
        allowed = getattr(error, "valid_methods", None)
        if allowed:  # a 405 must name the methods the route takes (RFC 9110)
            response.headers["Allow"] = ", ".join(allowed)
        return response, status

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> tuple[Response, int]:
        log.exception("unexpected error in a request")
        return render(
            "exception",
            f"internal error ({type(error).__name__}); the gateway's log has the traceback, please report it",
            500,
        )
