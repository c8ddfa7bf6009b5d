"""The merge's score modes: Elasticsearch rescore's replace, total and multiply, each side weighted."""

from __future__ import annotations

import numpy as np
import pytest

from es_rerank.backends.base import Hit
from es_rerank.ranking.merge import Combination, merge
from es_rerank.stats import DocTerms

EMPTY = DocTerms(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
HITS = [Hit("a", 9.0, "", EMPTY), Hit("b", 5.0, "", EMPTY), Hit("c", 1.0, "", EMPTY), Hit("d", 0.5, "", EMPTY)]
MODEL = np.array([0.1, 0.2, 3.0], dtype=np.float32)  # the model's scores of the first three


@pytest.mark.parametrize("combination, order, first_score", [
    (Combination(), ["c", "b", "a", "d"], 3.0),  # replace: the model's score alone
    (Combination("replace", rerank_weight=2.0), ["c", "b", "a", "d"], 6.0),
    (Combination("total"), ["a", "b", "c", "d"], 9.1),  # 9 + 0.1, 5 + 0.2, 1 + 3
    (Combination("total", query_weight=0.1), ["c", "a", "b", "d"], 0.1 * 1 + 3.0),
    (Combination("multiply"), ["c", "b", "a", "d"], 3.0),  # 0.9, 1.0, 3.0
    (Combination("total", rerank_weight=0.0), ["a", "b", "c", "d"], 9.0),  # the first stage's order
])
def test_each_mode_combines_as_elasticsearch_rescore(combination, order, first_score):
    ranked = merge(HITS, MODEL, 3, combination)
    assert [item.hit.doc_id for item in ranked] == order
    assert ranked[0].score == pytest.approx(first_score)
    assert [item.reranked for item in ranked] == [True, True, True, False]  # the tail keeps BM25's order below
    assert {item.hit.doc_id: item.model_score for item in ranked if item.reranked} == pytest.approx(
        {"a": 0.1, "b": 0.2, "c": 3.0})
