"""The gateway's errors, each rendered as an Elasticsearch error body by one handler.

An ES client reads ``{"error": {"root_cause": [...], "type": ..., "reason": ...},
"status": N}`` from any failed request, so ours have that shape too. ``reason`` says
what was wrong and how to fix it; ``type`` is the ES type a client may branch on.

A body never carries more of the request than ``excerpt`` shows (a request may hold a
megabyte), nor a file path of this machine or a worker's (``public_reason``): those go
to the gateway's log, which the operator reads, not to whoever sent the request.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

EXCERPT_CHARS = 40
# reprlib bounds the work, not only the text: a 1 MB list is not rendered whole and then cut.
_EXCERPT = reprlib.Repr()  # keyword arguments only from Python 3.12
_EXCERPT.maxlevel, _EXCERPT.maxdict, _EXCERPT.maxlist, _EXCERPT.maxtuple = 2, 3, 3, 3
_EXCERPT.maxstring = _EXCERPT.maxlong = _EXCERPT.maxother = EXCERPT_CHARS
# A URL (kept: scheme://host, no password) or a run of path parts with a slash in it (replaced).
_URL_OR_PATH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]*|(?:~|\.{1,2})?(?:[\w.@+-]*/)+[\w.@+-]*")
HIDDEN_PATH = "<path>"
# On every answer, errors included: the header by which Elasticsearch's 8.x clients recognise a server.
PRODUCT_HEADER = ("X-Elastic-Product", "Elasticsearch")
SERVED_APIS = (
    "GET / (info), _search, _msearch, _count, GET /<index>, <index>/_mapping, _alias/<name>, "
    "<index>/_doc/<id>, <index>/_source/<id>, _mget, _search/scroll, <index>/_pit and _cluster/health "
    "(docs/elasticsearch-api.md)"
)


class GatewayError(Exception):
    """A request the gateway cannot answer; ``status`` and ``error_type`` as Elasticsearch would give them."""

    status = 500
    error_type = "exception"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BadSearchRequest(GatewayError):
    """The request body or parameters cannot be read as a search this gateway serves."""

    status = 400
    error_type = "parsing_exception"


class IndexNotFound(GatewayError):
    """The request names an index this gateway does not serve."""

    status = 404
    error_type = "index_not_found_exception"


class DocumentNotFound(GatewayError):
    """``_source`` of a document the served index lacks."""

    status = 404
    error_type = "resource_not_found_exception"


class AliasNotFound(GatewayError):
    """``_alias/<name>`` of an alias the gateway does not serve."""

    status = 404
    error_type = "aliases_not_found_exception"


class WriteRefused(GatewayError):
    """A write or an administration of the index sent to the gateway, which serves reads only
    (``writes.is_write`` tells them)."""

    status = 403
    error_type = "cluster_block_exception"

    def __init__(self, method: str, path: str) -> None:
        super().__init__(
            f"[{method} {clipped(path)}] writes to or administers the index, and the gateway is "
            f"read-only: it serves {SERVED_APIS}. Admins load and reindex the corpus with `esrr index build` "
            "(docs/operations.md)"
        )


class RequestTooLong(GatewayError):
    """The request's URL is longer than the gateway reads (``ESRR_GATEWAY_MAX_URL_BYTES``)."""

    status = 414
    error_type = "too_long_http_line_exception"


class TooManyHeavySearches(GatewayError):
    """A heavy search that found no free slot of the heavy lane in time (``es_rerank.gateway.heavy_lane``)."""

    status = 429
    error_type = "es_rejected_execution_exception"


class ServiceUnavailable(GatewayError):
    """The search backend or the scoring workers cannot answer; the reason names the fix."""

    status = 503
    error_type = "search_phase_execution_exception"


def error_body(error_type: str, reason: str, status: int) -> dict[str, Any]:
    """An Elasticsearch error response body."""
    cause = {"type": error_type, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def excerpt(value: Any) -> str:
    """A short ``repr`` of ``value`` for an error message, at most about ``EXCERPT_CHARS`` characters."""
    if isinstance(value, str) and len(value) > EXCERPT_CHARS:
        return repr(value[:EXCERPT_CHARS]) + f"... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return "a number of over 30 digits"  # str() of a huge int is quadratic and capped by Python
    text = _EXCERPT.repr(value)
    return text if len(text) <= 2 * EXCERPT_CHARS else text[: 2 * EXCERPT_CHARS] + "..."


def clipped(text: str) -> str:
    """``text`` as it is when short, else its first ``EXCERPT_CHARS`` characters and how long it was."""
    return text if len(text) <= EXCERPT_CHARS else f"{text[:EXCERPT_CHARS]}... ({len(text)} characters)"


def public_reason(message: str) -> str:
    """``message`` with every file path cut to its last name (``/srv/esrr/indexes/CURRENT`` -> ``CURRENT``):
    the client learns which file, not this machine's layout; the full path belongs in the log."""

    def last_name(found: re.Match[str]) -> str:
        text = found.group()
        if "://" in text:
            return text
        return text.rstrip("/").rsplit("/", 1)[-1] or HIDDEN_PATH

    return _URL_OR_PATH.sub(last_name, message)
