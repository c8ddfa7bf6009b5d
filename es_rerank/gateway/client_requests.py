"""The client calls beside ``_search``, read and bounded before any work (pure): which documents ``_doc`` and
``_mget`` read with which ``_source``, the searches of an ``_msearch``, and a document as Elasticsearch shows it.

Every list is counted against its limit (``ESRR_GATEWAY_MAX_MGET_DOCS``,
``ESRR_GATEWAY_MAX_MSEARCH_SEARCHES``) before one of its items is read, so a request's
cost is known before the backend is asked; an error names the limit or what to send. In
an ``_msearch``, a body or header that is not JSON fails the request, as in Elasticsearch;
a search refused for what it holds (invalid Unicode text here, a query the backend
refuses in ``client_api``) fails in its own slot and the others are answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from es_rerank.backends.base import QueryRefused
from es_rerank.backends.highlight import filter_source, read_source_filter
from es_rerank.gateway.errors import BadSearchRequest, clipped, excerpt
from es_rerank.gateway.request_parts import InvalidText, read_json
from es_rerank.gateway.search_request import check_parameters, url_source
from es_rerank.gateway.url_options import FORMAT_PARAMETERS, SHAPING_PARAMETERS

SourceFilter = tuple[tuple[str, ...], tuple[str, ...]] | None  # (includes, excludes); None: no _source
# preference, routing, realtime and refresh choose a shard or a freshness; the gateway's index is one shard of
# documents written once per build, so each reads the same documents.
DOCUMENT_PARAMETERS = (
    "_source",
    "_source_includes",
    "_source_excludes",
    "preference",
    "routing",
    "realtime",
    "refresh",
) + FORMAT_PARAMETERS
MGET_DOC_KEYS = ("_index", "_id", "_source", "routing")
# Searches run one by one; typed_keys and rest_total_hits_as_int shape each search's answer, the others change none.
MSEARCH_PARAMETERS = (
    (
        "max_concurrent_searches",
        "search_type",
        "ccs_minimize_roundtrips",
        "max_concurrent_shard_requests",
        "pre_filter_shard_size",
    )
    + SHAPING_PARAMETERS
    + FORMAT_PARAMETERS
)
# Header keys that choose shards, caches or how a missing index is taken; none changes an answer here.
MSEARCH_HEADER_KEYS = (
    "index",
    "preference",
    "routing",
    "request_cache",
    "search_type",
    "ignore_unavailable",
    "allow_no_indices",
    "expand_wildcards",
    "allow_partial_search_results",
)
MAX_ID_BYTES = 512  # Elasticsearch's limit on a document id
MGET_EXAMPLE = '{"docs": [{"_id": "1"}, {"_id": "2", "_source": ["title"]}]} or {"ids": ["1", "2"]}'


@dataclass(frozen=True)
class DocumentRead:
    """One document a ``_doc`` or ``_mget`` reads: the index named for it (None: the path's), its id, its source."""

    index: str | None
    doc_id: str
    source: SourceFilter


@dataclass(frozen=True)
class OneSearch:
    """One search of an ``_msearch``: the index its header names (None: the path's) and its body, or why its
    lines' text is refused (that search alone fails, as a search refused by the backend does)."""

    index: str | None
    body: Mapping[str, Any]
    error: InvalidText | None = None


def document_source(params: Mapping[str, str]) -> SourceFilter:
    """The ``_source`` a ``_doc``/``_source``/``_mget`` URL asks for; unknown parameters are a 400 naming those read."""
    check_parameters("a document read", params, DOCUMENT_PARAMETERS)
    return _source_filter(url_source(params))


def check_id(doc_id: str) -> str:
    """``doc_id`` when Elasticsearch would take it as a document id, else a 400 saying why."""
    if not doc_id or len(doc_id.encode("utf-8")) > MAX_ID_BYTES:
        raise BadSearchRequest(
            f"id [{clipped(doc_id)}] is {'empty' if not doc_id else 'too long'}; a document id "
            f"is 1 to {MAX_ID_BYTES} bytes"
        )
    return doc_id


def read_mget(body: Any, params: Mapping[str, str], path_index: str | None, max_docs: int) -> list[DocumentRead]:
    """The documents an ``_mget`` body asks for (``docs`` or ``ids``), at most ``max_docs`` of them."""
    default = document_source(params)
    if not isinstance(body, dict) or len(body) != 1 or not ({"docs", "ids"} & set(body)):
        raise BadSearchRequest(f"an _mget body holds docs or ids, as in {MGET_EXAMPLE}")
    items = body.get("docs", body.get("ids"))
    if not isinstance(items, list) or not items:
        raise BadSearchRequest(f"[{next(iter(body))}] must be a non-empty list, as in {MGET_EXAMPLE}")
    if len(items) > max_docs:
        raise BadSearchRequest(
            f"the _mget asks for {len(items)} documents; this gateway reads at most {max_docs} "
            "per request (ESRR_GATEWAY_MAX_MGET_DOCS): split it"
        )
    if "ids" in body:
        if path_index is None:
            raise BadSearchRequest("an _mget of ids names its index in the path: send it to /<index>/_mget")
        return [DocumentRead(None, check_id(_id_text(item, n)), default) for n, item in enumerate(items)]
    return [_mget_doc(item, n, path_index, default) for n, item in enumerate(items)]


def _mget_doc(item: Any, n: int, path_index: str | None, default: SourceFilter) -> DocumentRead:
    if not isinstance(item, dict):
        raise BadSearchRequest(f'docs[{n}] must be an object such as {{"_id": "1"}}, got {excerpt(item)}')
    _check_keys(f"docs[{n}]", item, MGET_DOC_KEYS)
    index = item.get("_index")
    if index is not None and not isinstance(index, str):
        raise BadSearchRequest(f"docs[{n}]._index must be an index name, got {excerpt(index)}")
    if index is None and path_index is None:
        raise BadSearchRequest(
            f"index is missing for doc {n}: name it in docs[{n}]._index or send the request to /<index>/_mget"
        )
    source = _source_filter(item["_source"]) if "_source" in item else default
    return DocumentRead(index, check_id(_id_text(item.get("_id"), n)), source)


def _id_text(value: Any, n: int) -> str:
    """A document id as Elasticsearch takes it: a string, or a number written as one."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadSearchRequest(f"the id of doc {n} must be a string, got {excerpt(value)}")


def read_msearch(data: bytes, path_index: str | None, max_searches: int) -> list[OneSearch]:
    """The searches of an ``_msearch`` body (newline-delimited JSON: a header line, then a body line, per search)."""
    lines = data.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()  # the body ends with a newline
    if not lines:
        raise BadSearchRequest(
            "the _msearch body is empty; send one header line and one body line per search, as "
            'in {"index": "esrr-docs"}\\n{"query": {"match": {"text": "green tea"}}}\\n'
        )
    if len(lines) > 2 * max_searches:
        raise BadSearchRequest(
            f"the _msearch holds {(len(lines) + 1) // 2} searches; this gateway runs at most "
            f"{max_searches} per request (ESRR_GATEWAY_MAX_MSEARCH_SEARCHES): split it"
        )
    if len(lines) % 2:
        raise BadSearchRequest(
            f"the _msearch body's last search (line {len(lines)}) has a header and no body; "
            "each search is a header line then a body line"
        )
    searches = []
    for n in range(0, len(lines), 2):
        try:
            header = read_json(lines[n], f"line {n + 1} of the _msearch body (a header)")
            body = read_json(lines[n + 1], f"line {n + 2} of the _msearch body (a search)")
            searches.append(
                OneSearch(
                    _header_index({} if header is None else header, n + 1, path_index), {} if body is None else body
                )
            )
        except InvalidText as error:  # lines that are not JSON fail the whole request, as in Elasticsearch
            searches.append(OneSearch(None, {}, error))
    return searches


def _header_index(header: Any, line: int, path_index: str | None) -> str | None:
    """The index an ``_msearch`` header names (a list as Elasticsearch's comma-separated names), else the path's."""
    if not isinstance(header, dict):
        raise BadSearchRequest(
            f"line {line} of the _msearch body must be a header object such as "
            f'{{"index": "esrr-docs"}} or {{}}, got {excerpt(header)}'
        )
    _check_keys(f"the header on line {line}", header, MSEARCH_HEADER_KEYS)
    index = header.get("index", path_index)
    if isinstance(index, list) and index and all(isinstance(name, str) for name in index):
        return ",".join(index)
    if index is None or isinstance(index, str):
        return index
    raise BadSearchRequest(f"the header on line {line} names its index as {excerpt(index)}; name it as a string")


def document(index: str, doc_id: str, source: Mapping[str, Any] | None, wanted: SourceFilter) -> dict[str, Any]:
    """A document as Elasticsearch's ``_doc`` and ``_mget`` show it, found or not.

    Each document is written once per index version (a reindex writes a new index), so its version is 1.
    """
    if source is None:
        return {"_index": index, "_id": doc_id, "found": False}
    shown: dict[str, Any] = {
        "_index": index,
        "_id": doc_id,
        "_version": 1,
        "_seq_no": 0,
        "_primary_term": 1,
        "found": True,
    }
    if wanted is not None:
        shown["_source"] = filter_source(source, wanted)
    return shown


def _check_keys(where: str, item: Mapping[str, Any], read: tuple[str, ...]) -> None:
    """A 400 naming the first key of ``item`` that is none of ``read``, and those that are."""
    unknown = next((key for key in item if key not in read), None)
    if unknown is not None:
        raise BadSearchRequest(f"{where} has unknown key [{clipped(str(unknown))}]; it reads {', '.join(read)}")


def _source_filter(spec: Any) -> SourceFilter:
    try:
        return read_source_filter(spec)
    except QueryRefused as error:
        raise BadSearchRequest(str(error)) from None
