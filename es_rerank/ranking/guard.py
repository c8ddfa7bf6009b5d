"""The BM25 guard: the model's scores blended with BM25's, so that a model reading a collection it was not
trained for cannot move far from the first stage's order.

    guarded(d) = z(model)(d) + weight * z(BM25)(d)        z: standardised within the query's window

weight 0 leaves the model's order; a large weight tends to BM25's. The served weight is a setting
(``ESRR_BM25_GUARD_WEIGHT``) chosen on the dev queries of NFCorpus and of its shifted copies
(docs/quality.md); a per-query agreement test between model and BM25 was measured too and did not
find the queries the model hurts, so the guard is this fixed blend.
"""

from __future__ import annotations

import numpy as np

from es_rerank.ranking.neighbours import standardised
from es_rerank.ranking.ranker_name import Refinement

GUARD_ROW_SUFFIX = Refinement.GUARD.suffix  # how search output and eval rows name a model's scores blended with BM25


def guarded(model_scores: np.ndarray, bm25_scores: np.ndarray, weight: float) -> np.ndarray:
    """float32 [n]: one window's model scores standardised, plus ``weight`` times its BM25 scores standardised."""
    model_scores, bm25_scores = np.asarray(model_scores, np.float64), np.asarray(bm25_scores, np.float64)
    if model_scores.shape != bm25_scores.shape or model_scores.ndim != 1:
        raise ValueError(f"one BM25 score per model score expected, got {model_scores.shape} and {bm25_scores.shape}")
    return (standardised(model_scores) + weight * standardised(bm25_scores)).astype(np.float32)
