"""Pure merge of first-stage hits and reranker scores into the final ranking.

How the model's score and the first stage's combine inside the window follows
Elasticsearch's ``rescore``: ``replace`` (the model's score alone, the default),
``total`` (query_weight x first-stage + rerank_weight x model) and ``multiply``
(their product), each side weighted as the request's ``ext.esrr`` says.

Each hit's ``score`` is the ``_score`` a client sees: a function of the query and the
document alone (the same on every page), never negative, descending down the ranking.
Below the window it is the hit's BM25 score; the window's combined scores keep their
differences but are lifted so that the lowest sits one point above the window's lowest
BM25 score, which no hit of the tail exceeds (the tail is BM25's order after the window).
The lift is computed over the whole window, which every page of a query scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from es_rerank.backends.base import Hit


@dataclass(frozen=True)
class RankedHit:
    """A hit in its final position, with both the model's and BM25's score."""

    hit: Hit
    score: float  # the hit's _score: BM25 below the window, the combined score lifted above the tail inside it
    reranked: bool
    model_score: float | None = None  # the ranker's own score, inside the window
    combined: float | None = None  # the window's combined score (the model's, in replace mode), before the lift


ScoreMode = Literal["replace", "total", "multiply"]
SCORE_MODES: tuple[str, ...] = ("replace", "total", "multiply")


@dataclass(frozen=True)
class Combination:
    """How the window's scores combine: Elasticsearch rescore's score_mode and weights."""

    mode: ScoreMode = "replace"
    query_weight: float = 1.0
    rerank_weight: float = 1.0

    def __call__(self, first_stage: float, model: float) -> float:
        """The final score of a hit in the window."""
        if self.mode == "replace":
            return model * self.rerank_weight if self.rerank_weight != 1.0 else model
        if self.mode == "total":
            return self.query_weight * first_stage + self.rerank_weight * model
        return (self.query_weight * first_stage) * (self.rerank_weight * model)

    def over(self, first_stage: np.ndarray, model: np.ndarray) -> np.ndarray:
        """The final scores of a window's hits: ``__call__`` element by element, the same arithmetic (float64)."""
        if self.mode == "replace":
            return model * self.rerank_weight if self.rerank_weight != 1.0 else model
        if self.mode == "total":
            return self.query_weight * first_stage + self.rerank_weight * model
        return (self.query_weight * first_stage) * (self.rerank_weight * model)


REPLACE = Combination()


def merge(
    hits: Sequence[Hit],
    scores: np.ndarray | None,
    window: int,
    combination: Combination = REPLACE,
    k: int | None = None,
) -> list[RankedHit]:
    """The first ``k`` (all when None) of the reranked window (by combined score, ties by doc id) above the
    untouched BM25 tail, each with its ``_score`` (see the module's docstring).

    ``hits`` are in the first stage's order (BM25, descending); ``scores`` holds one model
    score per hit of the first ``window`` hits; ``None`` (no model, or the scorer failed)
    keeps the BM25 order.
    """
    k = len(hits) if k is None else k
    if scores is None:
        return [RankedHit(h, _bm25(h), False) for h in hits[:k]]
    window = min(window, len(hits))
    if len(scores) != window:
        raise ValueError(f"{len(scores)} scores for a window of {window} hits")
    if window == 0:
        return [RankedHit(h, _bm25(h), False) for h in hits[:k]]
    scored = hits[:window]
    first_stage = np.fromiter((h.score for h in scored), dtype=np.float64, count=window)
    model = np.asarray(scores, dtype=np.float64)
    combined = combination.over(first_stage, model).tolist()
    lift = float(np.maximum(first_stage, 0.0).min()) + 1.0 - min(combined)
    # A page of 10 from a window of 500: only the hits at or above the k-th best score can be among the k best, so
    # only those are sorted (by score, then doc id), the same as the whole sort's first k.
    shown = min(k, window)
    candidates: Sequence[int] = range(window)
    if 0 < shown < window:
        kth = float(np.partition(np.asarray(combined), window - shown)[window - shown])
        candidates = [i for i, c in enumerate(combined) if c >= kth]
    head = sorted(candidates, key=lambda i: (-combined[i], scored[i].doc_id))[:shown]
    return [RankedHit(scored[i], combined[i] + lift, True, float(model[i]), combined[i]) for i in head] + [
        RankedHit(h, _bm25(h), False) for h in hits[window:k]
    ]


def _bm25(hit: Hit) -> float:
    """A first-stage score as a ``_score``: never negative (a backend's own scores are not, in Lucene or tantivy)."""
    return max(float(hit.score), 0.0)
