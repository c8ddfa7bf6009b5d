"""Candidate feedback: each hit's nearest neighbours among the other hits vote with their scores.

Pseudo-relevance feedback under the cluster hypothesis: relevant documents of one
topic resemble each other more than they resemble the rest of the result list, so a
hit whose closest fellow hits score high is likelier relevant than its own score says.
It reads only the hits' texts and the ranker's scores (no judgments, no training), the
whole title and abstract where the Delta stage reads the first 50 tokens, and costs one
sparse [n, n] product per query.

    vote(d)  = sum over the k hits most like d of cos(d, e) * z(score)(e) / sum of those cos
    final(d) = z(score)(d) + weight * z(vote)(d)        z: standardised within the query

cos is the cosine of (1 + log tf) * idf vectors of title + abstract (``document_vectors``,
built from the index-time statistics). Written by hand because it is a
few lines of sparse arithmetic over statistics we already hold; a retrieval toolkit's
RM3 would need its own index of the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import sparse

from es_rerank.neighbours import standardised
from es_rerank.stats import CorpusStats

FEEDBACK_ROW_SUFFIX = " + candidate feedback"  # how search output and eval rows name a ranker with feedback
TERMS_PER_DOCUMENT = 50  # see document_vectors


@dataclass(frozen=True)
class FeedbackParams:
    """Neighbours per hit (k) and the vote's weight beside the ranker; weight 0 turns feedback off."""

    # Chosen on NFCorpus dev (reports/experiments/candidate-feedback/).
    k: int = 5
    weight: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a whole number of at least 1, got {self.k!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not (
                np.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"weight must be a number of at least 0, got {self.weight!r}")


def document_vectors(stats: CorpusStats, rows: Sequence[int] | np.ndarray | None = None,
                     terms_per_document: int = TERMS_PER_DOCUMENT) -> sparse.csr_matrix:
    """[len(rows), vocab] unit-length (1 + log tf) * idf vectors of title + abstract of these statistics rows.

    ``rows`` None means every document: build once and slice it when many windows are
    scored (``esrr eval``); one window (``esrr search``) builds only its own rows, whose
    cost does not grow with the corpus. Each vector keeps the document's
    ``terms_per_document`` heaviest terms: on NFCorpus dev the served model's feedback is
    the same with 50 as with all of them, and the [n, n] product is three times faster.
    """
    rows = np.arange(stats.n_docs) if rows is None else np.asarray(rows, dtype=np.int64)
    n, vocab = len(rows), len(stats.vocab)
    title_doc, title_terms = _field_terms(stats.title_ptr, stats.title_values, rows)
    abstract_doc, abstract_terms = _field_terms(stats.abstract_ptr, stats.abstract_values, rows)
    keys, tf = np.unique(np.concatenate([title_doc, abstract_doc]) * vocab
                         + np.concatenate([title_terms, abstract_terms]), return_counts=True)
    doc, term = np.divmod(keys, vocab)
    weights = (1.0 + np.log(tf)) * stats.idf(term)
    heaviest_first = np.lexsort((-weights, doc))
    doc, term, weights = doc[heaviest_first], term[heaviest_first], weights[heaviest_first]
    rank = np.arange(len(doc)) - np.searchsorted(doc, doc)  # position within the document
    keep = rank < terms_per_document
    doc, term, weights = doc[keep], term[keep], weights[keep]
    norms = np.sqrt(np.bincount(doc, weights * weights, minlength=n))
    weights /= np.where(norms > 0, norms, 1.0)[doc]
    return sparse.csr_matrix((weights, (doc, term)), shape=(n, vocab))


def _field_terms(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in ``rows``, term id) of every token of one CSR field of the given rows."""
    ptr = np.asarray(ptr, dtype=np.int64)
    starts, lengths = ptr[rows], ptr[rows + 1] - ptr[rows]
    # Token j of row i sits at starts[i] + j: repeat each start, add the offset within the row.
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(np.arange(len(rows), dtype=np.int64), lengths), \
        np.asarray(values)[np.repeat(starts, lengths) + offsets].astype(np.int64)


def neighbour_votes(vectors: sparse.csr_matrix, scores: np.ndarray, k: int) -> np.ndarray:
    """Cosine-weighted mean z(score) of each hit's k most similar other hits (0 with no similar hit)."""
    n = vectors.shape[0]
    if n < 2:
        return np.zeros(n)
    similarity = (vectors @ vectors.T).toarray()  # [n, n]
    np.fill_diagonal(similarity, -np.inf)
    k = min(k, n - 1)
    nearest = np.argpartition(-similarity, k - 1, axis=1)[:, :k]  # [n, k] unordered
    weights = np.maximum(np.take_along_axis(similarity, nearest, axis=1), 0.0)  # [n, k]
    z = standardised(scores)
    return (weights * z[nearest]).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-12)


def with_feedback(scores: np.ndarray, vectors: sparse.csr_matrix, params: FeedbackParams) -> np.ndarray:
    """float32 z(scores) + weight * z(neighbour votes) for one query's hits and their ``document_vectors``."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (vectors.shape[0],):
        raise ValueError(f"one score per hit expected, got {scores.shape} scores for {vectors.shape[0]} hits")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite numbers to take candidate feedback")
    votes = neighbour_votes(vectors, scores, params.k)
    return (standardised(scores) + params.weight * standardised(votes)).astype(np.float32)
