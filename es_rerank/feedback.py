"""Candidate feedback: each hit's nearest neighbours among the other hits vote with their scores.

Pseudo-relevance feedback under the cluster hypothesis: relevant documents of one
topic resemble each other more than they resemble the rest of the result list, so a
hit whose closest fellow hits score high is likelier relevant than its own score says.
It reads only the hits' texts and the ranker's scores (no judgments, no training), the
whole title and abstract where the Delta stage reads the first 50 tokens, and costs one
sparse [n, n] product per query.

    vote(d)  = sum over the k hits most like d of cos(d, e) * z(score)(e) / sum of those cos
    final(d) = z(score)(d) + weight * z(vote)(d)        z: standardised within the query

cos is the cosine of (1 + log tf) * idf vectors of title + abstract. Written by hand
because it is a few lines over the statistics every hit already carries; a retrieval
toolkit's RM3 would need its own index of the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import sparse

from es_rerank.neighbours import standardised
from es_rerank.stats import CorpusStats, DocTerms

FEEDBACK_ROW_SUFFIX = " + candidate feedback"  # how search output and eval rows name a ranker with feedback


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


def tfidf_vectors(hits_terms: Sequence[DocTerms], stats: CorpusStats) -> sparse.csr_matrix:
    """[n, vocab] unit-length (1 + log tf) * idf vectors of the hits' title + abstract."""
    indptr, indices, data = [0], [], []
    for terms in hits_terms:
        ids, tf = np.unique(np.concatenate([terms.title_ids, terms.abstract_ids]), return_counts=True)
        weights = (1.0 + np.log(tf)) * stats.idf(ids)
        norm = np.linalg.norm(weights)
        indices.append(ids)
        data.append(weights / norm if norm > 0 else weights)
        indptr.append(indptr[-1] + len(ids))
    return sparse.csr_matrix((np.concatenate([np.zeros(0), *data]), np.concatenate([np.zeros(0, np.int32), *indices]),
                              indptr), shape=(len(hits_terms), len(stats.vocab)))


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


def with_feedback(scores: np.ndarray, hits_terms: Sequence[DocTerms], stats: CorpusStats,
                  params: FeedbackParams) -> np.ndarray:
    """float32 z(scores) + weight * z(neighbour votes) for one query's hits."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(hits_terms),):
        raise ValueError(f"one score per hit expected, got {scores.shape} scores for {len(hits_terms)} hits")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite numbers to take candidate feedback")
    votes = neighbour_votes(tfidf_vectors(hits_terms, stats), scores, params.k)
    return (standardised(scores) + params.weight * standardised(votes)).astype(np.float32)
