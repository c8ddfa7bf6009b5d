"""Scrolls on the embedded backend without state in the gateway: the scroll id carries the search (pure).

A scroll here is a search sorted by the request's sort with index order as the last key,
paged with ``search_after``: the id holds the search body, the page size, the sort
values of the last hit answered, the index version it began on and when it expires. Any
gateway process can continue it (nothing is kept between calls), an id is checked as a
new search is (the limits of ``search_request``), and a scroll outlives neither its
keep-alive nor the index version it began on (a reindex: a 404 that says to start
again), as an Elasticsearch scroll holds one point in time.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import asdict, dataclass
from typing import Any

from es_rerank.gateway.errors import BadSearchRequest, GatewayError, excerpt

MAX_KEEP_ALIVE_S = 24 * 3600  # Elasticsearch's default search.max_keep_alive
MAX_ID_CHARS = 64 * 1024  # an id holds one bounded search body, compressed
_UNITS_S = {"nanos": 1e-9, "micros": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_KEEP_ALIVE = re.compile(r"([0-9]{1,12})(nanos|micros|ms|s|m|h|d)")


class ScrollMissing(GatewayError):
    """A scroll that expired or whose index version is no longer served: Elasticsearch's missing context."""

    status = 404
    error_type = "search_context_missing_exception"


@dataclass(frozen=True)
class ScrollState:
    """Where a scroll stands: its search, page size, last sort values, index version, keep-alive and expiry."""

    version: str
    body: dict[str, Any]
    size: int
    after: list[Any] | None
    keep_alive: str
    expires_s: float  # the epoch second after which it is missing


def keep_alive_seconds(text: str) -> float:
    """A scroll's keep-alive (``1m``, ``30s``) in seconds; a 400 when it is no time value or over 24 hours."""
    match = _KEEP_ALIVE.fullmatch(text)
    if match is None:
        raise BadSearchRequest(f"[scroll] must be a keep-alive such as 1m or 30s, got {excerpt(text)}")
    seconds = int(match.group(1)) * _UNITS_S[match.group(2)]
    if seconds > MAX_KEEP_ALIVE_S:
        raise BadSearchRequest(
            f"Keep alive for request ({text}) is too large. It must be less than (1d), the "
            "gateway's fixed limit (Elasticsearch's default search.max_keep_alive); scroll with "
            "a shorter keep-alive, renewed by each page's ?scroll="
        )
    return seconds


def encode(state: ScrollState) -> str:
    """A scroll id for ``state``: its JSON, compressed, in URL-safe base64."""
    packed = zlib.compress(json.dumps(asdict(state), separators=(",", ":")).encode("utf-8"))
    return base64.urlsafe_b64encode(packed).decode("ascii")


def decode(scroll_id: Any) -> ScrollState:
    """The state a scroll id carries; a 400 when it is not one this gateway wrote."""
    problem = BadSearchRequest(
        f"Cannot parse scroll id {excerpt(scroll_id)}; send the _scroll_id of the last "
        "page, as a search with ?scroll= or the scroll before answered it"
    )
    if not isinstance(scroll_id, str) or not scroll_id or len(scroll_id) > MAX_ID_CHARS:
        raise problem
    try:
        packed = base64.urlsafe_b64decode(scroll_id.encode("ascii"))
        decompressor = zlib.decompressobj()
        data = json.loads(decompressor.decompress(packed, 4 * MAX_ID_CHARS))
        state = ScrollState(**data)
    except (ValueError, TypeError, UnicodeError, binascii.Error, zlib.error):
        raise problem from None
    if not (
        isinstance(state.body, dict)
        and isinstance(state.size, int)
        and isinstance(state.version, str)
        and isinstance(state.keep_alive, str)
        and isinstance(state.expires_s, (int, float))
        and (state.after is None or isinstance(state.after, list))
    ):
        raise problem
    return state
