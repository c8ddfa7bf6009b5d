"""The calls an Elasticsearch client makes besides ``_search``: the index, ``_count``, documents, ``_mget``,
``_msearch``, scrolls and points in time (Elasticsearch backend) and ``_cluster/health``, answered as
Elasticsearch 8 answers them; writes refused.

An application pointed at the gateway checks that its index exists (``HEAD /<index>``),
reads its mapping, counts, fetches the documents a page links to (``_doc``, ``_mget``),
batches searches (``_msearch``, each one a ``_search`` through ``searching.run_search``,
so reranked the same way) and waits for ``_cluster/health``. Index names are checked as
``_search`` checks them: the served index, its alias, ``_all`` or a wildcard of them.

The gateway is read-only: a write or an administration of the index (``PUT``/``DELETE``
an index or a document, ``_bulk``, ``_update``, ``_delete_by_query``, mappings,
settings) is a 403 ``cluster_block_exception`` saying where admins reindex: no route here
takes a write, and the app's error handler answers the requests ``writes.is_write`` tells
with that refusal. The views are thin: the requests are
read by ``client_requests``, the documents by the backend.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import NotFound

from es_rerank.backends.base import BackendError, SearchBackend, SearchContexts
from es_rerank.backends.query_tree import ON_ELASTICSEARCH
from es_rerank.gateway.client_requests import (
    MSEARCH_PARAMETERS,
    check_id,
    document,
    document_source,
    read_mget,
    read_msearch,
)
from es_rerank.gateway.errors import (
    AliasNotFound,
    BadSearchRequest,
    DocumentNotFound,
    GatewayError,
    clipped,
    error_body,
    public_reason,
)
from es_rerank.gateway.health import health_body
from es_rerank.gateway.index_names import ANY_INDEX, unserved_name
from es_rerank.gateway.request_parts import QUERY_ID_HEADER, json_body, query_id
from es_rerank.gateway.search_request import body_object, check_parameters, parse_count, url_parameters
from es_rerank.gateway.searching import (
    check_index,
    cleared_scrolls,
    continue_scroll,
    in_elasticsearchs_order,
    run_search,
)
from es_rerank.gateway.state import gateway_state
from es_rerank.gateway.url_options import (
    FORMAT_PARAMETERS,
    SHAPING_PARAMETERS,
    check_url_options,
    flag,
    total_as_number,
)
from es_rerank.payload import PayloadError, WorkerSetupError

client_api = Blueprint("client_api", __name__)
log = logging.getLogger(__name__)
SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}
HEALTH_ORDER = ("red", "yellow", "green")
SCROLL_PARAMETERS = ("scroll", "scroll_id", "rest_total_hits_as_int") + FORMAT_PARAMETERS
PIT_PARAMETERS = ("keep_alive",) + FORMAT_PARAMETERS
HEALTH_PARAMETERS = (
    "wait_for_status",
    "timeout",
    "master_timeout",
    "level",
    "local",
    "wait_for_active_shards",
    "wait_for_nodes",
    "wait_for_events",
    "wait_for_no_relocating_shards",
    "wait_for_no_initializing_shards",
) + FORMAT_PARAMETERS


def _backend() -> SearchBackend:
    return gateway_state().served.pipeline().backend


def _alias() -> str:
    return current_app.config["ESRR_ALIAS"]


def _served_backend(index: str) -> SearchBackend:
    """The backend, once ``index`` is checked to name it; a path's first segment that starts with ``_`` is an
    API this gateway does not serve (index names cannot start with one), Elasticsearch's no-handler 404."""
    if index.startswith("_") and index not in ANY_INDEX:
        raise NotFound()
    backend = _backend()
    check_index(index, backend.index)
    return backend


@client_api.get("/<index>")
def index_description(index: str) -> Response:
    """``GET /<index>``: the served index with its alias, mappings and settings (``HEAD``: whether it exists)."""
    backend = _served_backend(index)
    if request.method == "HEAD":  # indices.exists: the answer's status is all a client reads
        return Response(status=200)
    return jsonify({backend.index: {"aliases": {_alias(): {}}, **backend.description()}})


@client_api.get("/_alias/<name>")
@client_api.get("/<index>/_alias/<name>")
def alias(name: str, index: str | None = None) -> Response:
    """``GET /_alias/<name>`` (``indices.exists_alias``, ``get_alias``): the served index under its alias."""
    backend = _backend() if index is None else _served_backend(index)
    if unserved_name(name, (_alias(),)) is not None:
        raise AliasNotFound(f"alias [{clipped(name)}] missing; this gateway serves the alias [{_alias()}]")
    return jsonify({backend.index: {"aliases": {_alias(): {}}}})


@client_api.get("/<index>/_mapping")
def mapping(index: str) -> Response:
    """``GET /<index>/_mapping``: the served index's mappings."""
    backend = _served_backend(index)
    return jsonify({backend.index: {"mappings": backend.description()["mappings"]}})


@client_api.route("/_count", methods=["GET", "POST"])
@client_api.route("/<index>/_count", methods=["GET", "POST"])
def count(index: str | None = None) -> Response:
    """``_count``: how many documents the query (the body's or ``q=``) matches, as the first stage reads it."""
    backend = _backend() if index is None else _served_backend(index)
    body = parse_count(url_parameters(request.query_string), json_body(), current_app.config["ESRR_MAX_QUERY_WORDS"])
    return jsonify({"count": backend.count(backend.prepare(body)), "_shards": SHARDS})  # a QueryRefused is a 400


@client_api.get("/<index>/_doc/<path:doc_id>")
def get_document(index: str, doc_id: str) -> tuple[Response, int]:
    """``GET /<index>/_doc/<id>``: the document and its ``_source``, or ``found: false`` with a 404."""
    backend = _served_backend(index)
    wanted = document_source(url_parameters(request.query_string))
    source = backend.sources([check_id(doc_id)])[0]
    return jsonify(document(backend.index, doc_id, source, wanted)), 200 if source is not None else 404


@client_api.get("/<index>/_source/<path:doc_id>")
def get_source(index: str, doc_id: str) -> Response:
    """``GET /<index>/_source/<id>``: the document's ``_source`` alone."""
    backend = _served_backend(index)
    wanted = document_source(url_parameters(request.query_string))
    if wanted is None:
        raise BadSearchRequest(
            "_source=false asks the _source endpoint for nothing; drop it, or read the document "
            "without its source at /<index>/_doc/<id>?_source=false"
        )
    source = backend.sources([check_id(doc_id)])[0]
    if source is None:
        raise DocumentNotFound(f"Document not found [{backend.index}]/[{clipped(doc_id)}]")
    return jsonify(document(backend.index, doc_id, source, wanted)["_source"])


@client_api.route("/_mget", methods=["GET", "POST"])
@client_api.route("/<index>/_mget", methods=["GET", "POST"])
def mget(index: str | None = None) -> Response:
    """``_mget``: many documents in one request, each found, not found, or in an index the gateway does not serve."""
    backend = _backend() if index is None else _served_backend(index)
    reads = read_mget(
        json_body(), url_parameters(request.query_string), index, current_app.config["ESRR_MAX_MGET_DOCS"]
    )
    served = (backend.index, _alias())
    elsewhere = [read.index is not None and unserved_name(read.index, served) is not None for read in reads]
    readable = [read.doc_id for read, other in zip(reads, elsewhere) if not other]
    sources = dict(zip(readable, backend.sources(readable)))
    docs = []
    for read, other in zip(reads, elsewhere):
        if other:
            problem = error_body("index_not_found_exception", f"no such index [{clipped(str(read.index))}]", 404)[
                "error"
            ]
            docs.append({"_index": read.index, "_id": read.doc_id, "error": problem})
        else:
            docs.append(document(backend.index, read.doc_id, sources[read.doc_id], read.source))
    return jsonify({"docs": docs})


@client_api.route("/_msearch", methods=["GET", "POST"])
@client_api.route("/<index>/_msearch", methods=["GET", "POST"])
def msearch(index: str | None = None) -> Response:
    """``_msearch``: several searches in one request, each answered (reranked) or failed as ``_search`` would be."""
    if index is not None:
        _served_backend(index)
    params = url_parameters(request.query_string)
    check_parameters("/_msearch", params, MSEARCH_PARAMETERS)
    check_url_options(params)
    shaping = {name: params[name] for name in SHAPING_PARAMETERS if name in params}  # each search's answer
    searches = read_msearch(request.get_data(cache=False), index, current_app.config["ESRR_MAX_MSEARCH_SEARCHES"])
    started, asked_id = time.perf_counter(), query_id()
    responses = [
        _one_search(search.index, search.body, shaping, f"{asked_id}-{n}")
        if search.error is None
        else error_body(search.error.error_type, search.error.reason, search.error.status)
        for n, search in enumerate(searches)
    ]
    response = jsonify({"took": round((time.perf_counter() - started) * 1000), "responses": responses})
    response.headers[QUERY_ID_HEADER] = asked_id
    return response


def _one_search(index: str | None, body: Any, params: dict[str, str], search_id: str) -> dict[str, Any]:
    """One search of an ``_msearch``: its response with ``status`` 200, or its error as Elasticsearch nests one."""
    try:
        return {**run_search(index, params, body, search_id), "status": 200}
    except GatewayError as error:
        return error_body(error.error_type, error.reason, error.status)
    except BackendError as error:
        log.error("search backend failed in an _msearch: %s", error)
        return error_body(
            "search_phase_execution_exception", f"the search backend cannot answer: {public_reason(str(error))}", 503
        )
    except (WorkerSetupError, PayloadError) as error:  # this search's window refused; one without a window is not
        log.error("the scoring worker refused a search of an _msearch: %s", error)
        return error_body(
            "search_phase_execution_exception",
            f"the scoring worker refused the request: {public_reason(str(error))} (the gateway's log names the paths)",
            503,
        )


@client_api.route("/_search/scroll", methods=["GET", "POST", "DELETE"])
@client_api.route("/_search/scroll/<scroll_id>", methods=["GET", "POST", "DELETE"])
def scroll(scroll_id: str | None = None) -> tuple[Response, int]:
    """``_search/scroll``: the next page of a scroll that a search started (not reranked), or with ``DELETE`` its
    clearing: on Elasticsearch, its answer as it is; on the embedded backend, the page the scroll id carries on to
    (``searching.continue_scroll``)."""
    params = url_parameters(request.query_string)
    check_parameters("/_search/scroll", params, SCROLL_PARAMETERS)
    body = _context_body(
        {
            **({"scroll_id": scroll_id} if scroll_id else {}),
            **{name: params[name] for name in ("scroll", "scroll_id") if name in params},
        }
    )
    if not isinstance(_backend(), SearchContexts):  # the embedded backend: the id carries the scroll
        return _embedded_scroll(body, params)
    if request.method == "DELETE":
        status, answer = _search_contexts()("clear_scroll", body)
        return jsonify(answer), status
    status, answer = _search_contexts()("scroll", body)
    if status == 200:
        answer = in_elasticsearchs_order(answer, "a scroll's pages are Elasticsearch's order, not reranked")
        if flag(params, "rest_total_hits_as_int"):
            answer = total_as_number(answer)
    return jsonify(answer), status


def _embedded_scroll(body: dict[str, Any], params: dict[str, str]) -> tuple[Response, int]:
    """A scroll's next page on the embedded backend, or with ``DELETE`` its clearing (nothing is held for it)."""
    if request.method == "DELETE":
        ids = body.get("scroll_id", [])
        ids = [ids] if isinstance(ids, str) else ids
        if not isinstance(ids, list):
            raise BadSearchRequest(f"[scroll_id] must be an id or a list of ids, got {clipped(str(ids))}")
        if not ids:
            raise BadSearchRequest('no scroll ids specified; send {"scroll_id": ["..."]} or {"scroll_id": "_all"}')
        # 200 even when none was live (Elasticsearch: a 404 with this body): nothing is held, nothing fails.
        return jsonify({"succeeded": True, "num_freed": cleared_scrolls([name for name in ids if name != "_all"])}), 200
    if "scroll_id" not in body:
        raise BadSearchRequest(
            '[scroll_id] is missing; send the _scroll_id of the last page, as in {"scroll_id": "...", "scroll": "1m"}'
        )
    scroll = body.get("scroll")
    if scroll is not None and not isinstance(scroll, str):
        raise BadSearchRequest(f"[scroll] must be a keep-alive such as 1m, got {clipped(str(scroll))}")
    answer = continue_scroll(body["scroll_id"], scroll, query_id())
    if flag(params, "rest_total_hits_as_int"):
        answer = total_as_number(answer)
    return jsonify(answer), 200


@client_api.post("/<index>/_pit")
def open_point_in_time(index: str) -> tuple[Response, int]:
    """``POST /<index>/_pit``: a point in time on the served index of the Elasticsearch backend, for searches
    that page it with ``pit`` (in Elasticsearch's order, not reranked)."""
    _served_backend(index)
    params = url_parameters(request.query_string)
    check_parameters(f"/{clipped(index)}/_pit", params, PIT_PARAMETERS)
    if not params.get("keep_alive"):
        raise BadSearchRequest("[keep_alive] is required to open a point in time, as in /esrr-docs/_pit?keep_alive=1m")
    status, answer = _search_contexts()("open_point_in_time", {}, params["keep_alive"])
    return jsonify(answer), status


@client_api.delete("/_pit")
def close_point_in_time() -> tuple[Response, int]:
    """``DELETE /_pit``: close a point in time opened here; Elasticsearch's answer as it is."""
    check_parameters("/_pit", url_parameters(request.query_string), FORMAT_PARAMETERS)
    status, answer = _search_contexts()("close_point_in_time", _context_body({}))
    return jsonify(answer), status


def _search_contexts() -> Any:
    """The backend's calls on scrolls and points in time; a 400 naming the backend that serves them elsewhere."""
    backend = _backend()
    if not isinstance(backend, SearchContexts):  # only Elasticsearch keeps search contexts
        raise BadSearchRequest(
            f"points in time are {ON_ELASTICSEARCH}; the embedded backend pages with from and "
            "size (the first 10,000 hits), a sort with search_after (the last hit's sort values), "
            "or a scroll (?scroll=1m)"
        )
    return backend.search_context


def _context_body(from_url: dict[str, str]) -> dict[str, Any]:
    """A scroll's or a point in time's JSON body (an object), with what the URL gave added."""
    body = body_object(json_body(), '{"scroll_id": "...", "scroll": "1m"} or {"id": "..."}')
    return {**body, **from_url}


@client_api.get("/_cluster/health")
@client_api.get("/_cluster/health/<index>")
def cluster_health(index: str | None = None) -> tuple[Response, int]:
    """``_cluster/health``: green, yellow (searches keep BM25's order) or red (searches cannot be answered), with
    the reasons under ``esrr``. ``wait_for_status`` is answered at once (408 when not reached): nothing here
    changes by waiting that a client's retry would not see."""
    if index is not None:
        _served_backend(index)
    params = url_parameters(request.query_string)
    check_parameters("/_cluster/health", params, HEALTH_PARAMETERS)
    wanted = params.get("wait_for_status")
    if wanted is not None and wanted not in HEALTH_ORDER:
        raise BadSearchRequest(f"[wait_for_status] must be green, yellow or red, got {clipped(wanted)}")
    try:
        state = health_body(gateway_state().served, gateway_state().probe)
    except (BackendError, WorkerSetupError, PayloadError) as error:
        log.error("cluster health is red: %s", error)
        state = {"status": "red", "problem": f"searches cannot be answered: {public_reason(str(error))}"}
    status = state["status"]
    timed_out = wanted is not None and HEALTH_ORDER.index(status) < HEALTH_ORDER.index(wanted)
    shards = 0 if status == "red" else 1
    body = {
        "cluster_name": "es-rerank",
        "status": status,
        "timed_out": timed_out,
        "number_of_nodes": 1,
        "number_of_data_nodes": 1,
        "active_primary_shards": shards,
        "active_shards": shards,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": 1 - shards,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0 * shards,
        "esrr": state,
    }
    return jsonify(body), 408 if timed_out else 200
