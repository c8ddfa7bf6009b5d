"""Pure merge of first-stage hits and reranker scores into the final ranking."""

from __future__ import annotations

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


def merge(hits: Sequence[Hit], scores: np.ndarray | None, window: int) -> list[RankedHit]:
    """Reranked window (by model score, ties by doc id) above the untouched BM25 tail.

    ``scores`` holds one model score per hit of the first ``window`` hits; ``None``
    (no model, or the scorer failed) keeps the BM25 order.
    """
    if scores is None:
        return [RankedHit(h, h.score, False) for h in hits]
    window = min(window, len(hits))
    if len(scores) != window:
        raise ValueError(f"{len(scores)} scores for a window of {window} hits")
    head = sorted(zip(hits[:window], map(float, scores)), key=lambda pair: (-pair[1], pair[0].doc_id))
    return [RankedHit(h, s, True) for h, s in head] + [RankedHit(h, h.score, False) for h in hits[window:]]
