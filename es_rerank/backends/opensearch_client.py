"""``OpenSearchClient``: opensearch-py in the shape of the Elasticsearch 8 client, for ``ESRR_BACKEND=opensearch``.

OpenSearch 2.x answers the REST calls esrr makes (search bodies, aliases, mappings with
``_meta``, bulk, scroll, count, mget, cluster health) as Elasticsearch 7.10 did, and the
backend suite passes on both with the same code. The official Elasticsearch client refuses
OpenSearch (no ``X-Elastic-Product`` header; OpenSearch refuses its ``compatible-with=8`` media
types), so ``OpenSearchClient`` puts ``opensearch-py`` behind the call shapes of the
Elasticsearch 8 client that ``es_rerank/backends/elasticsearch.py`` and
``index_setup/es_index.py`` are written against: body fields as keywords, answers with ``.body``
and ``.meta.status``, ``options(ignore_status=..., request_timeout=..., retry_on_status=...)``, and
that client's error classes, so ``translate_errors`` names the same fixes (with "OpenSearch" in
its messages). What differs between the engines is translated here:

- point in time: Elasticsearch's ``POST <index>/_pit`` and ``DELETE _pit`` are OpenSearch's
  ``POST <index>/_search/point_in_time`` and ``DELETE _search/point_in_time`` (OpenSearch 2.4+);
  their answers are given Elasticsearch's shape (``id``; ``succeeded``, ``num_freed``). A
  search names the point in time the same way on both (``"pit": {"id": ..., "keep_alive": ...}``).
- bulk: ``opensearch-py``'s own ``streaming_bulk`` (the same retries of 429s with backoff).
- the product check: the first request reads ``GET /`` and refuses a server whose
  ``version.distribution`` is not ``opensearch``, naming what it is and the setting to change.
- API keys: OpenSearch has none (its security plugin takes a user and password), so
  ``ESRR_ES_API_KEY`` is refused by the settings for this backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import elasticsearch
import elasticsearch.helpers
import opensearchpy
from elastic_transport import (
    ApiResponseMeta,
    HeadApiResponse,
    HttpHeaders,
    ListApiResponse,
    NodeConfig,
    ObjectApiResponse,
    TextApiResponse,
)
from elasticsearch.exceptions import HTTP_EXCEPTIONS
from opensearchpy import helpers as os_helpers

from es_rerank.backends.es_server import ServerTooOld, server_version

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

PRODUCT = "OpenSearch"

# Keyword arguments the Elasticsearch 8 client sends in the body, per API; the others are URL parameters.
_BODY_FIELDS: dict[str, frozenset[str]] = {
    "search": frozenset(
        {
            "query",
            "size",
            "from_",
            "sort",
            "aggs",
            "aggregations",
            "post_filter",
            "highlight",
            "track_total_hits",
            "track_scores",
            "search_after",
            "pit",
            "fields",
            "docvalue_fields",
            "stored_fields",
            "script_fields",
            "explain",
            "min_score",
            "collapse",
            "suggest",
            "version",
            "seq_no_primary_term",
            "rescore",
            "indices_boost",
            "profile",
            "source",
            "terminate_after",
        }
    ),
    "count": frozenset({"query"}),
    "mget": frozenset({"ids", "docs"}),
    "indices.create": frozenset({"settings", "mappings", "aliases"}),
    "indices.put_settings": frozenset({"settings"}),
    "indices.update_aliases": frozenset({"actions"}),
    "indices.analyze": frozenset(
        {"analyzer", "text", "tokenizer", "filter", "char_filter", "field", "normalizer", "explain"}
    ),
    "scroll": frozenset({"scroll_id", "scroll"}),
    "clear_scroll": frozenset({"scroll_id"}),
}
# APIs whose body is one keyword's value.
_WHOLE_BODY = {"index": "document", "create": "document", "bulk": "operations", "msearch": "searches"}
_SOURCE_PARAMS = {"source": "_source", "source_excludes": "_source_excludes", "source_includes": "_source_includes"}
_OPTIONS = ("ignore_status", "request_timeout", "retry_on_timeout", "retry_on_status", "max_retries")


class NotOpenSearch(ServerTooOld):
    """The server at ``ESRR_ES_URL`` is not OpenSearch (Elasticsearch, or something else)."""


def _body_and_params(api: str, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Split an Elasticsearch 8 client call's keywords into opensearch-py's ``body`` and URL parameters."""
    kwargs = dict(kwargs)
    body = kwargs.pop("body", None)
    if api in _WHOLE_BODY and _WHOLE_BODY[api] in kwargs:
        body = kwargs.pop(_WHOLE_BODY[api])
    fields = _BODY_FIELDS.get(api, frozenset())
    moved = {name: kwargs.pop(name) for name in list(kwargs) if name in fields}
    if moved:
        body = dict(body or {})
        for name, value in moved.items():
            body[{"from_": "from", "source": "_source"}.get(name, name)] = value
    params = {_SOURCE_PARAMS.get(name, name): value for name, value in kwargs.items()}
    if api == "indices.update_aliases" and isinstance(body, list):
        body = {"actions": body}
    return body, params


def _answer(value: Any, meta: Callable[[int], ApiResponseMeta]) -> Any:
    """An opensearch-py answer as the Elasticsearch 8 client returns it (``.body``, ``.meta``, dict access)."""
    if isinstance(value, bool):  # a HEAD request (exists, exists_alias)
        return HeadApiResponse(meta(200 if value else 404))
    ok = meta(200)
    if isinstance(value, list):
        return ListApiResponse(body=value, meta=ok)
    if isinstance(value, str):
        return TextApiResponse(body=value, meta=ok)
    return ObjectApiResponse(body=value if value is not None else {}, meta=ok)


class _Namespace:
    """One of the client's API groups (``indices``, ``cluster``, ``cat``, ``nodes``) in the Elasticsearch 8 shape."""

    def __init__(self, client: OpenSearchClient, name: str) -> None:
        self._client = client
        self._name = name

    def __getattr__(self, api: str) -> Callable[..., Any]:
        if api.startswith("_") or not hasattr(getattr(self._client.raw, self._name), api):
            raise AttributeError(f"opensearch-py has no {self._name}.{api}")
        return partial(self._client._call, f"{self._name}.{api}")


class OpenSearchClient:
    """opensearch-py behind the Elasticsearch 8 client's call shapes that esrr uses (see the module docstring)."""

    product = PRODUCT

    def __init__(
        self,
        url: str,
        *,
        request_timeout: float = 30.0,
        ca_certs: str | None = None,
        retry_on_timeout: bool = False,
        retry_on_status: tuple[int, ...] = (),
        max_retries: int = 3,
        _shared: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self._config = {
            "request_timeout": request_timeout,
            "ca_certs": ca_certs,
            "retry_on_timeout": retry_on_timeout,
            "retry_on_status": tuple(retry_on_status),
            "max_retries": max_retries,
        }
        parts = urlsplit(url)
        self._node = NodeConfig(
            parts.scheme or "http",
            parts.hostname or "127.0.0.1",
            parts.port or (443 if parts.scheme == "https" else 9200),
        )
        self._ignore: tuple[int, ...] = ()
        self._timeout: float | None = None
        # The product check and the server version are read once for all the views options() makes.
        self._shared = _shared if _shared is not None else {"lock": threading.Lock(), "version": None, "views": {}}
        extra: dict[str, Any] = {"ca_certs": ca_certs} if ca_certs else {}
        self.raw = opensearchpy.OpenSearch(
            [url],
            timeout=request_timeout,
            retry_on_timeout=retry_on_timeout,
            retry_on_status=tuple(retry_on_status),
            max_retries=max_retries,
            **extra,
        )

    @property
    def cluster_url(self) -> str:
        """The node URL, for error messages (without a password)."""
        return f"{self._node.scheme}://{self._node.host}:{self._node.port}"

    @property
    def server_version(self) -> tuple[int, int] | None:
        """The OpenSearch version (major, minor), once a request has read it."""
        return self._shared["version"]

    def options(self, **options: Any) -> OpenSearchClient:
        """A view with other per-request options, as the Elasticsearch 8 client's ``options()``."""
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise TypeError(f"options {sorted(unknown)} are not supported by the OpenSearch client")
        transport: dict[str, Any] = {
            key: options[key] for key in ("retry_on_timeout", "retry_on_status", "max_retries") if key in options
        }
        if transport:  # another opensearch-py client (its transport retries), one per set of options
            config = {**self._config, **transport}
            key = repr(sorted(config.items()))
            with self._shared["lock"]:
                if key not in self._shared["views"]:
                    self._shared["views"][key] = OpenSearchClient(self.url, _shared=self._shared, **config)
            view = object.__new__(OpenSearchClient)
            view.__dict__.update(self._shared["views"][key].__dict__)
        else:
            view = object.__new__(OpenSearchClient)
            view.__dict__.update(self.__dict__)
        ignore = options.get("ignore_status", self._ignore)
        view._ignore = (ignore,) if isinstance(ignore, int) else tuple(ignore)
        view._timeout = options.get("request_timeout", self._timeout)
        return view

    def __getattr__(self, api: str) -> Any:
        if api.startswith("_") or api == "raw":
            raise AttributeError(api)
        if api in ("indices", "cluster", "cat", "nodes", "snapshot", "tasks", "ingest"):
            return _Namespace(self, api)
        if api not in ("open_point_in_time", "close_point_in_time") and not callable(getattr(self.raw, api, None)):
            raise AttributeError(f"opensearch-py has no {api}")
        return partial(self._call, api)

    def close(self) -> None:
        """Close the connections (also those of the views ``options()`` made)."""
        self.raw.close()
        for view in self._shared["views"].values():
            view.raw.close()

    def __enter__(self) -> OpenSearchClient:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    # --- the calls ---

    def _meta(self, status: int) -> ApiResponseMeta:
        return ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(), duration=0.0, node=self._node)

    def _check_server(self) -> None:
        """Read ``GET /`` once: refuse a server that is not OpenSearch; a refused read (401, 403) is tried again."""
        if self._shared["version"] is not None:
            return
        with self._shared["lock"]:
            if self._shared["version"] is not None:
                return
            try:
                info = self.raw.info(request_timeout=self._timeout or self._config["request_timeout"])
            except opensearchpy.TransportError as error:
                if error.status_code in (401, 403):
                    return  # the request itself names the credentials' problem
                raise
            version = info.get("version") if isinstance(info, dict) else None
            if not isinstance(version, dict) or version.get("distribution") != "opensearch":
                number = version.get("number") if isinstance(version, dict) else None
                what = f"Elasticsearch {number}" if number else "not OpenSearch (its GET / names no version)"
                raise NotOpenSearch(
                    f"the server is {what}, not OpenSearch; set ESRR_BACKEND=elasticsearch for an "
                    "Elasticsearch cluster, or ESRR_ES_URL to an OpenSearch one"
                )
            self._shared["version"] = server_version(info)

    def _call(self, api: str, **kwargs: Any) -> Any:
        """One Elasticsearch 8 client call (``api`` as ``name`` or ``group.name``) made with opensearch-py."""
        if api == "open_point_in_time":
            return self._open_point_in_time(**kwargs)
        if api == "close_point_in_time":
            return self._close_point_in_time(**kwargs)
        body, params = _body_and_params(api, kwargs)
        target: Any = self.raw
        for part in api.split("."):
            target = getattr(target, part)  # AttributeError: an API opensearch-py does not have
        if body is not None:
            params["body"] = body
        # Always given: without it opensearch-py takes a `timeout` URL parameter (cluster.health's) for its
        # socket timeout.
        params.setdefault("request_timeout", self._timeout or self._config["request_timeout"])
        return self._send(lambda: target(**params))

    def _send(self, request: Callable[[], Any], shape: Callable[[Any], Any] = lambda body: body) -> Any:
        with elasticsearch_errors(self):
            self._check_server()
            try:
                return _answer(shape(request()), self._meta)
            except opensearchpy.TransportError as error:
                if isinstance(error.status_code, int) and error.status_code in self._ignore:
                    info = error.info if isinstance(error.info, dict) else {"error": str(error.info)[:300]}
                    return ObjectApiResponse(body=info, meta=self._meta(error.status_code))
                raise

    def _open_point_in_time(self, *, index: str, keep_alive: str, **params: Any) -> Any:
        params = {_SOURCE_PARAMS.get(k, k): v for k, v in params.items()}
        if self._timeout is not None:
            params.setdefault("request_timeout", self._timeout)

        def as_elasticsearch(body: dict) -> dict:
            return {"id": body["pit_id"], **({"_shards": body["_shards"]} if "_shards" in body else {})}

        return self._send(lambda: self.raw.create_pit(index=index, keep_alive=keep_alive, **params), as_elasticsearch)

    def _close_point_in_time(self, *, body: dict | None = None, id: str | None = None) -> Any:
        pit_id = id if id is not None else (body or {}).get("id")

        def as_elasticsearch(answer: dict) -> dict:
            freed = [pit for pit in answer.get("pits", []) if pit.get("successful")]
            return {"succeeded": bool(freed), "num_freed": len(freed)}

        request = {"request_timeout": self._timeout} if self._timeout is not None else {}
        return self._send(lambda: self.raw.delete_pit(body={"pit_id": [pit_id]}, **request), as_elasticsearch)

    def streaming_bulk(self, actions: Iterable[dict], **kwargs: Any) -> Iterator[tuple[bool, dict]]:
        """``opensearchpy.helpers.streaming_bulk`` on this client (the 429 retries of elasticsearch-py's helper)."""
        with elasticsearch_errors(self):
            self._check_server()
            yield from os_helpers.streaming_bulk(self.raw, actions, **kwargs)


@contextmanager
def elasticsearch_errors(client: OpenSearchClient) -> Iterator[None]:
    """Raise opensearch-py's errors as the Elasticsearch client's, which ``translate_errors`` knows."""
    try:
        yield
    except opensearchpy.exceptions.OpenSearchException as error:
        raise as_elasticsearch_error(error, client) from error


def as_elasticsearch_error(error: BaseException, client: OpenSearchClient) -> Exception:
    """The Elasticsearch client's error for one of opensearch-py's (same kind, status, body and message)."""
    if isinstance(error, os_helpers.BulkIndexError):  # documents refused (raise_on_error): the same item list
        return elasticsearch.helpers.BulkIndexError(str(error.args[0]), list(error.errors))
    if isinstance(error, opensearchpy.ConnectionTimeout):
        return elasticsearch.ConnectionTimeout(str(error))
    if isinstance(error, opensearchpy.SSLError):
        return elasticsearch.SSLError(str(error.info if isinstance(error.info, Exception) else error))
    if isinstance(error, opensearchpy.ConnectionError):
        return elasticsearch.ConnectionError(str(error.info if isinstance(error.info, Exception) else error))
    if isinstance(error, opensearchpy.TransportError) and isinstance(error.status_code, int):
        kind = HTTP_EXCEPTIONS.get(error.status_code, elasticsearch.ApiError)
        return kind(message=str(error.error), meta=client._meta(error.status_code), body=error.info)
    if isinstance(error, opensearchpy.SerializationError):
        return elasticsearch.SerializationError(str(error))
    return elasticsearch.TransportError(str(error))


def connect_opensearch(settings: CommonSettings) -> OpenSearchClient:
    """A client for the OpenSearch cluster at ``ESRR_ES_URL`` with the configured timeout and CA certificates."""
    # As for Elasticsearch: a request that timed out is not retried (one hung cluster would cost 4 timeouts).
    return OpenSearchClient(
        settings.es_url,
        request_timeout=settings.es_timeout_s,
        ca_certs=str(settings.es_ca_certs) if settings.es_ca_certs is not None else None,
    )


__all__ = ["NotOpenSearch", "OpenSearchClient", "PRODUCT", "connect_opensearch"]
