"""Pure merge of first-stage hits and reranker scores into the final ranking."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from es_rerank.backends.base import Hit


@dataclass(frozen=True)
class RankedHit:
    """A hit in its final position, with both the model's and BM25's score."""

    hit: Hit
    score: float  # the model's score inside the reranked window; BM25 below it
    reranked: bool


def merge(hits: Sequence[Hit], scores: np.ndarray | None, window: int, k: int | None = None) -> list[RankedHit]:
    """The first ``k`` hits (None: all): the reranked window by model score (ties by doc id) above the BM25 tail.

    ``scores`` holds one model score per hit of the first ``window`` hits; ``None``
    (no model, or the scorer failed) keeps the BM25 order. A search shows 10 of a window
    of 500: only the ``k`` best are picked out of the window (the same order as sorting
    all of it, doc ids being unique) and made ``RankedHit``s.
    """
    k = len(hits) if k is None else k
    if scores is None:
        return [RankedHit(h, h.score, False) for h in hits[:k]]
    window = min(window, len(hits))
    if len(scores) != window:
        raise ValueError(f"{len(scores)} scores for a window of {window} hits")
    pairs = zip(hits[:window], map(float, scores))
    order = (lambda pair: (-pair[1], pair[0].doc_id))
    head = heapq.nsmallest(k, pairs, key=order) if k < window else sorted(pairs, key=order)
    return [RankedHit(h, s, True) for h, s in head] + [RankedHit(h, h.score, False) for h in hits[window:k]]
