"""What one search asks for, once read: the first-stage body, the words the model reads, the page, the reranking.

The gateway reads it from a ``_search`` request (``es_rerank.gateway.search_request.parse_search``);
a shell command's query text is the request a client sends for those words (``text_request``), so
that ``esrr search``, ``batch-search``, ``eval`` and the benchmarks rank exactly what ``_search``
ranks (``es_rerank.ranking.answer``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from es_rerank.backends.base import text_body
from es_rerank.ranking.merge import REPLACE, Combination
from es_rerank.text import tokenize

DEFAULT_SIZE = 10


class SkipReason(Enum):
    """Why a search is not reranked, on purpose."""

    NO_WORDS = "no words"  # nothing for the model to read: the first stage's order, ranked here
    SORT = "sort"  # ordered by something other than _score: the engine's order
    SCROLL = "scroll"
    POINT_IN_TIME = "point in time"
    SEARCH_AFTER = "search_after"

    @property
    def sorted_elsewhere(self) -> bool:
        """Whether the order is not by score: the engine's own (a sort, a scroll, a point in time, search_after)."""
        return self is not SkipReason.NO_WORDS


@dataclass(frozen=True)
class Skipped:
    """Reranking skipped on purpose: the ``reason``, and the ``message`` a response shows in ``esrr.skipped``."""

    reason: SkipReason
    message: str


NO_WORDS_SKIPPED = Skipped(
    SkipReason.NO_WORDS,
    "the query has no words for the model to score (only filters, or no text clause); send ext.esrr.query_text to "
    "rerank by its words",
)


@dataclass(frozen=True)
class SearchRequest:
    """A search: the first-stage body, the words the model reads, which hits to return and how to rerank."""

    text: str  # what the model scores ("" when the request has no words for it)
    size: int = DEFAULT_SIZE
    offset: int = 0  # Elasticsearch's `from`
    body: Mapping[str, Any] = field(default_factory=dict)  # query, post_filter, aggs, highlight, _source, ...
    window: int | None = None  # ext.esrr.window_size; None: the gateway's
    combination: Combination = REPLACE
    explain: bool = False
    skipped: Skipped | None = None  # why reranking is skipped on purpose
    passthrough: Mapping[str, str] = field(default_factory=dict)  # URL parameters for Elasticsearch (scroll)

    @property
    def depth(self) -> int:
        """Hits to rank for this page (at least one, so that a size-0 request still counts)."""
        return max(self.offset + self.size, 1)

    @property
    def sorts_by_field(self) -> bool:
        """Whether the request's ``sort`` is not descending ``_score`` alone (hits show no ``max_score`` then)."""
        return "sort" in self.body and not by_score(self.body["sort"])

    @property
    def sorted_elsewhere(self) -> bool:
        """Whether the request's order is not by score (a sort, a scroll, a point in time): Elasticsearch's own."""
        return self.skipped is not None and self.skipped.reason.sorted_elsewhere


def text_request(text: str, size: int = DEFAULT_SIZE, window: int | None = None) -> SearchRequest:
    """The search a client asks for with the words ``text`` and ``size`` hits (``text_body``: ``q=`` with plain
    words, the site page's query), as ``parse_search`` reads it; ``window`` as ``ext.esrr.window_size``."""
    return SearchRequest(
        text, size, body=text_body(text), window=window, skipped=None if tokenize(text) else NO_WORDS_SKIPPED
    )


def by_score(sort: Any) -> bool:
    """Whether a ``sort`` orders by descending ``_score`` alone."""
    items = sort if isinstance(sort, list) else [sort]
    if isinstance(sort, str):
        items = [part.strip() for part in sort.split(",")]
    if len(items) != 1:
        return False
    item = items[0]
    if isinstance(item, str):
        return item in ("_score", "_score:desc")
    if isinstance(item, dict) and list(item) == ["_score"]:
        order = item["_score"]
        return order == "desc" or (isinstance(order, dict) and order.get("order", "desc") == "desc")
    return False
