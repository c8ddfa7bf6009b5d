"""Candidate feedback: each hit's nearest neighbours among the other hits vote with their scores.

Pseudo-relevance feedback under the cluster hypothesis: relevant documents of one
topic resemble each other more than they resemble the rest of the result list, so a
hit whose closest fellow hits score high is likelier relevant than its own score says.
It reads only the hits' texts and the ranker's scores (no judgments, no training), the
whole title and abstract where the Delta stage reads the first 50 tokens, and costs one
pass over the pairs of hits sharing a term per query (``similar_hits.nearest_hits``, compiled).

    vote(d)  = sum over the k hits most like d of cos(d, e) * z(score)(e) / sum of those cos
    final(d) = z(score)(d) + weight * z(vote)(d)        z: standardised within the query

cos is the cosine of (1 + log tf) * idf vectors of title + abstract (``document_vectors``,
built from the data every hit carries and the index-time idf). Written by hand because it is a
few lines of sparse arithmetic over statistics we already hold; a retrieval toolkit's
RM3 would need its own index of the corpus.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from es_rerank.ranking.heaviest_terms import fill_rows, heaviest_terms
from es_rerank.ranking.neighbours import standardised
from es_rerank.ranking.ranker_name import Refinement
from es_rerank.ranking.similar_hits import nearest_hits  # re-exported: the hits' k nearest
from es_rerank.settings import MAX_VOTE_WEIGHT, CommonSettings
from es_rerank.stats import CorpusStats, DocTerms

FEEDBACK_ROW_SUFFIX = Refinement.FEEDBACK.suffix  # how search output and eval rows name a ranker with feedback
TERMS_PER_DOCUMENT = 50  # why 50: document_vectors


@dataclass(frozen=True)
class FeedbackParams:
    """Neighbours per hit (k) and the vote's weight beside the ranker; weight 0 turns feedback off.

    The served values are settings (``ESRR_FEEDBACK_K``, ``ESRR_FEEDBACK_WEIGHT``), chosen on NFCorpus dev.
    """

    k: int
    weight: float

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> FeedbackParams:
        """The served parameters, ``ESRR_FEEDBACK_K`` and ``ESRR_FEEDBACK_WEIGHT``."""
        return cls(settings.feedback_k, settings.feedback_weight)

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a whole number of at least 1, got {self.k!r}")
        if (
            isinstance(self.weight, bool)
            or not isinstance(self.weight, (int, float))
            or not (np.isfinite(self.weight) and 0 <= self.weight <= MAX_VOTE_WEIGHT)
        ):
            raise ValueError(f"weight must be a number from 0 to {MAX_VOTE_WEIGHT:g}, got {self.weight!r}")


def document_vectors(
    docs: Sequence[DocTerms], stats: CorpusStats, terms_per_document: int = TERMS_PER_DOCUMENT
) -> sparse.csr_matrix:
    """[len(docs), vocab] unit-length (1 + log tf) * idf vectors of the documents' title + abstract.

    Built from the hits' own precomputed data, as the Lex features are, so it needs no
    statistics row per hit. Each vector keeps the document's ``terms_per_document``
    heaviest terms: on NFCorpus dev the served model's feedback is the same with 50 as
    with all of them, and the [n, n] product is three times faster.
    """
    indptr, terms, weights = heaviest_terms(docs, stats, terms_per_document)  # compiled: the 1M windows' cost
    return sparse.csr_matrix((weights, terms, indptr), shape=(len(docs), len(stats.vocab)))


class DocumentVectorCache:
    """``document_vectors`` rows kept between queries: a window's matrix from the rows of its documents.

    A document's vector depends only on its own terms and the corpus idf, so the rows
    built for one window serve every later window that holds the document: the matrix is
    the same as ``document_vectors(window)`` (tested), built at a fraction of the cost
    once the hot documents are in (``esrr bench search``). The rows describe one
    statistics build: statistics of another build (a reload after a reindex, or a version
    name built again) empty the cache. ``max_documents`` bounds it, the least recently used leave first.
    Thread-safe: a gateway's request threads may share it.

    The rows live in two tables of ``terms_per_document`` columns (terms, weights) and a length per row, so a
    window's rows are gathered by one fancy index each instead of one small array per document.
    """

    def __init__(self, max_documents: int, terms_per_document: int = TERMS_PER_DOCUMENT) -> None:
        if isinstance(max_documents, bool) or not isinstance(max_documents, int) or max_documents < 1:
            raise ValueError(f"max_documents must be a whole number of at least 1, got {max_documents!r}")
        self.max_documents, self.terms_per_document = max_documents, terms_per_document
        self._slots: OrderedDict[str, int] = OrderedDict()  # doc id -> its row in the tables, least recent first
        self._free: list[int] = []  # rows of the tables that documents have left
        self._terms = np.zeros((min(max_documents, 16), terms_per_document), np.int32)  # doubles up to the bound
        self._weights = np.zeros(self._terms.shape)
        self._lengths = np.zeros(len(self._terms), np.intp)
        self._build: str | None = None  # the statistics build the rows describe
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    def vectors(self, doc_ids: Sequence[str], docs: Sequence[DocTerms], stats: CorpusStats) -> sparse.csr_matrix:
        """[len(docs), vocab] ``document_vectors(docs, stats)``; ``doc_ids`` name the documents."""
        if len(doc_ids) != len(docs):
            raise ValueError(f"one id per document expected, got {len(doc_ids)} ids for {len(docs)} documents")
        with self._lock:
            if stats.build_id != self._build:
                self._forget(stats.build_id)
            slots = self._touch(doc_ids)
            at = np.maximum(slots, 0)  # the window's own copy: rows may leave the tables once the lock is let go
            terms, weights, lengths = self._terms[at], self._weights[at], np.where(slots >= 0, self._lengths[at], 0)
        missing = np.flatnonzero(slots < 0)
        if len(missing):  # built outside the lock, so concurrent windows do not wait on each other's new documents
            built = heaviest_terms([docs[i] for i in missing.tolist()], stats, self.terms_per_document)
            fill_rows(built, missing, (terms, weights, lengths))
            with self._lock:
                if stats.build_id == self._build:  # not emptied for a newer build meanwhile
                    self._keep(
                        [doc_ids[i] for i in missing.tolist()], terms[missing], weights[missing], lengths[missing]
                    )
        filled = np.arange(self.terms_per_document) < lengths[:, None]
        indptr = np.zeros(len(docs) + 1, np.int32)
        np.cumsum(lengths, out=indptr[1:])
        return sparse.csr_matrix((weights[filled], terms[filled], indptr), shape=(len(docs), len(stats.vocab)))

    def _forget(self, build_id: str) -> None:
        """Empty the cache for statistics of another build."""
        self._slots.clear()
        self._free.clear()
        self._build = build_id

    def _touch(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The documents' rows in the tables (-1 where one has none), those found now the most recently used."""
        find = self._slots.get
        slots = np.array([find(doc_id, -1) for doc_id in doc_ids], dtype=np.intp)
        found = doc_ids if (slots >= 0).all() else [doc_ids[i] for i in np.flatnonzero(slots >= 0).tolist()]
        deque(map(self._slots.move_to_end, found), maxlen=0)  # in window order, without a Python loop
        return slots

    def _keep(self, doc_ids: list[str], terms: np.ndarray, weights: np.ndarray, lengths: np.ndarray) -> None:
        """Store the documents' rows (but those another window stored meanwhile), the least recently used leaving."""
        written: dict[int, int] = {}  # table row -> the document written there last (a small bound reuses rows)
        for i, doc_id in enumerate(doc_ids):
            if doc_id in self._slots:
                continue
            if len(self._slots) >= self.max_documents:
                self._free.append(self._slots.popitem(last=False)[1])
            slot = self._free.pop() if self._free else len(self._slots)
            self._slots[doc_id], written[slot] = slot, i
        if not written:
            return
        while max(written) >= len(self._terms):  # full: twice the rows, up to the bound
            grown = min(2 * len(self._terms), self.max_documents)
            self._terms = np.resize(self._terms, (grown, self.terms_per_document))
            self._weights = np.resize(self._weights, (grown, self.terms_per_document))
            self._lengths = np.resize(self._lengths, grown)
        slots, rows = np.fromiter(written, np.intp, len(written)), np.fromiter(written.values(), np.intp, len(written))
        self._terms[slots], self._weights[slots], self._lengths[slots] = terms[rows], weights[rows], lengths[rows]


def neighbour_votes(vectors: sparse.csr_matrix, scores: np.ndarray, k: int) -> np.ndarray:
    """Cosine-weighted mean z(score) of each hit's k most similar other hits (0 with no similar hit)."""
    return _votes(vectors, standardised(scores), k)


def _votes(vectors: sparse.csr_matrix, z: np.ndarray, k: int) -> np.ndarray:
    """``neighbour_votes`` of the standardised scores ``z``."""
    nearest, cosines = nearest_hits(vectors, k)
    return (cosines * z[nearest]).sum(axis=1) / np.maximum(cosines.sum(axis=1), 1e-12)


def with_feedback(scores: np.ndarray, vectors: sparse.csr_matrix, params: FeedbackParams) -> np.ndarray:
    """float32 z(scores) + weight * z(neighbour votes) for one query's hits and their ``document_vectors``."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (vectors.shape[0],):
        raise ValueError(f"one score per hit expected, got {scores.shape} scores for {vectors.shape[0]} hits")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite numbers to take candidate feedback")
    z = standardised(scores)  # once: the votes read it too
    return (z + params.weight * standardised(_votes(vectors, z, params.k))).astype(np.float32)
