"""The merge of a window's scores with the BM25 tail, whole or cut to the hits a search shows."""

from __future__ import annotations

import numpy as np
import pytest

from es_rerank.backends.base import Hit
from es_rerank.ranking.merge import merge
from es_rerank.stats import DocTerms

EMPTY = DocTerms(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))


def hits(n: int) -> list[Hit]:
    return [Hit(f"d{i:03d}", float(n - i), "", EMPTY) for i in range(n)]


def test_the_window_by_score_ties_by_doc_id_above_the_bm25_tail():
    found = hits(6)
    ranked = merge(found, np.array([1.0, 3.0, 3.0, 0.5]), 4)
    assert [(r.hit.doc_id, r.score, r.reranked) for r in ranked] == [
        ("d001", 3.0, True), ("d002", 3.0, True), ("d000", 1.0, True), ("d003", 0.5, True),
        ("d004", 2.0, False), ("d005", 1.0, False)]
    assert [r.reranked for r in merge(found, None, 0)] == [False] * 6


@pytest.mark.parametrize("k", [1, 10, 49, 50, 51, 80, 200])
def test_the_first_k_are_the_first_k_of_the_whole_merge(k):
    found = hits(80)
    scores = np.round(np.random.default_rng(k).normal(size=50), 1)  # many ties, broken by doc id
    assert merge(found, scores, 50, k) == merge(found, scores, 50)[:k]
    assert merge(found, None, 0, k) == merge(found, None, 0)[:k]
