"""The search-backend protocol: BM25 top-k with each hit's precomputed data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from es_rerank.stats import CorpusStats, DocTerms

MAX_K = 10_000  # hits one search may page through (from + size): Elasticsearch's index.max_result_window
MAX_WINDOW = 1000  # hits one search may rerank (ESRR_GATEWAY_WINDOW); those past it keep their BM25 order


class BackendError(Exception):
    """A search backend cannot answer; the message says how to fix it."""


class QueryRefused(ValueError):
    """A search body this backend will not answer as asked (a clause it cannot serve, a malformed one);
    the message names what and which backend serves it. The gateway answers it with a 400."""


@dataclass(frozen=True)
class Hit:
    """One BM25 hit: document id, BM25 score, title and its precomputed data."""

    doc_id: str
    score: float
    title: str  # "" where the backend reads stored fields for the page only (``SearchBackend.page``)
    terms: DocTerms
    address: Any = field(default=None, compare=False, repr=False)  # where the backend finds the document again


def unread_hits(
    doc_ids: Sequence[str], scores: Sequence[float], terms: Sequence[DocTerms], addresses: Sequence[Any]
) -> list[Hit]:
    """``Hit(doc_id, score, "", terms, address)`` of each (a window's hits, their titles left to the page), the
    fields set in each hit's ``__dict__`` as ``__init__`` sets them: a frozen dataclass's ``__init__`` sets
    each through ``object.__setattr__``, twice the CPU of this, for each of a search's 500 hits."""
    hits = []
    for doc_id, score, data, address in zip(doc_ids, scores, terms, addresses, strict=True):
        hit = object.__new__(Hit)
        attributes = hit.__dict__
        attributes["doc_id"] = doc_id
        attributes["score"] = score
        attributes["title"] = ""
        attributes["terms"] = data
        attributes["address"] = address
        hits.append(hit)
    return hits


@dataclass(frozen=True)
class FirstStage:
    """A first stage's answer to a search body: its hits, and what Elasticsearch's response carries beside them."""

    hits: Sequence[Hit]
    total: Mapping[str, Any] | None  # {"value": n, "relation": "eq" | "gte"}; None where not tracked
    aggregations: Mapping[str, Any] | None = None
    shards: Mapping[str, Any] | None = None
    timed_out: bool = False


class SearchBackend(Protocol):
    """BM25 over title+abstract, returning hits with their precomputed data."""

    @property
    def engine(self) -> str:
        """What answers the first stage ("elasticsearch", "embedded"), as info() names it (a class attribute)."""
        ...

    @property
    def index(self) -> str:
        """The name of the index being searched (Elasticsearch: the concrete index behind the alias)."""
        ...

    @property
    def version(self) -> str:
        """The served index version (its statistics' version): what a scroll or a cached answer is tied to."""
        ...

    @property
    def stats(self) -> CorpusStats:
        """The term statistics of the index version being served."""
        ...

    def current(self) -> SearchBackend:
        """This backend, or one serving the version now current if a reindex swapped it in."""
        ...

    def prepare(self, body: Mapping[str, Any]) -> Any:
        """What a search body's first-stage parts (query, post_filter, aggs, track_total_hits, _source,
        highlight) ask of this backend, checked; ``QueryRefused`` names what it cannot serve."""
        ...

    def first_stage(self, prepared: Any, k: int) -> FirstStage:
        """The top-``k`` hits of a prepared body by its query's scores, best first, ties by ascending doc id."""
        ...

    def reading(self) -> AbstractContextManager:
        """A context in which the backend's reads of its own files are checked before and after (the embedded
        index's leases and fingerprints: a ``BackendError`` when a file changed); a ranking reads its hits'
        statistics in every stage, so it reads inside one. A backend that reads no file of its own checks nothing."""
        ...

    def check_answer(self, prepared: Any, hits: int, limits: Any) -> None:  # limits: answer_budget.AnswerLimits
        """``answer_budget.AnswerTooLarge`` before the search when ``hits`` hits of ``prepared`` would weigh over
        ``limits``; a backend whose engine renders the answer weighs it in ``page`` only."""
        ...

    def page(self, prepared: Any, hits: Sequence[Hit], max_bytes: int | None = None) -> list[dict[str, Any]]:
        """Each hit's ``_source`` (filtered as the body asks) and ``highlight``, read for the page shown only;
        ``answer_budget.AnswerTooLarge`` once they weigh over ``max_bytes``."""
        ...

    def count(self, prepared: Any) -> int:
        """How many documents a prepared body's query matches (``_count``)."""
        ...

    def sources(self, doc_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Each document's whole ``_source`` in the order asked, None for an id the index lacks (``_doc``,
        ``_mget``)."""
        ...

    def description(self) -> dict[str, Any]:
        """The served index's ``mappings`` and ``settings`` as ``GET /<index>`` shows them, without esrr's own
        fields."""
        ...


@runtime_checkable
class SearchContexts(Protocol):
    """A backend whose engine answers a search in its own order and keeps search contexts (scrolls, points in
    time): Elasticsearch's. The embedded index ranks a sorted search itself and carries a scroll in its id."""

    def passthrough(self, body: Mapping[str, Any], params: Mapping[str, str]) -> dict[str, Any]:
        """The engine's own answer to a search that is not reranked (a sort, a scroll, a point in time)."""
        ...

    def search_context(self, action: str, body: Mapping[str, Any], keep_alive: str | None = None) -> tuple[int, dict]:
        """The engine's status and answer to a scroll's or a point in time's call."""
        ...


TEXT_FIELD = "text"  # title and abstract, as one field: what a query's words are searched in


def text_body(text: str) -> dict[str, Any]:
    """The search body a client sends for the words ``text`` (``q=`` with plain words, the site page's query): a
    ``match`` on ``text`` that any of the words satisfies."""
    return {"query": {"match": {TEXT_FIELD: {"query": text}}}}


def text_hits(backend: SearchBackend, text: str, k: int) -> Sequence[Hit]:
    """The top-``k`` first-stage hits of ``text_body(text)``: BM25 best first, ties by ascending doc id (for code
    that needs only the hits: training candidates, the health check, benchmarks of the first stage)."""
    return backend.first_stage(backend.prepare(text_body(text)), k).hits


def check_k(k: int) -> int:
    """Validate a requested result depth."""
    if not 1 <= k <= MAX_K:
        raise BackendError(f"k={k} is out of range; ask for between 1 and {MAX_K} hits")
    return k
