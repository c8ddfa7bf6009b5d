"""The search-backend protocol: BM25 top-k with each hit's precomputed data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from es_rerank.stats import CorpusStats, DocTerms

MAX_K = 1000


class BackendError(Exception):
    """A search backend cannot answer; the message says how to fix it."""


@dataclass(frozen=True)
class Hit:
    """One BM25 hit: document id, BM25 score, title and its precomputed data."""

    doc_id: str
    score: float
    title: str
    terms: DocTerms


class SearchBackend(Protocol):
    """BM25 over title+abstract, returning hits with their precomputed data."""

    @property
    def index(self) -> str:
        """The name of the index being searched (Elasticsearch: the concrete index behind the alias)."""
        ...

    @property
    def stats(self) -> CorpusStats:
        """The term statistics of the index version being served."""
        ...

    def search(self, query: str, k: int) -> Sequence[Hit]:
        """Top-``k`` hits by BM25, best first; ties broken by ascending doc id."""
        ...

    def current(self) -> "SearchBackend":
        """This backend, or one serving the version now current if a reindex swapped it in."""
        ...


def check_k(k: int) -> int:
    """Validate a requested result depth."""
    if not 1 <= k <= MAX_K:
        raise BackendError(f"k={k} is out of range; ask for between 1 and {MAX_K} hits")
    return k
