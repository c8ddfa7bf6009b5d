"""The merge's score modes: Elasticsearch rescore's replace, total and multiply, each side weighted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_rerank.backends.base import Hit
from es_rerank.ranking.merge import Combination, merge
from es_rerank.stats import DocTerms

EMPTY = DocTerms(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
HITS = [Hit("a", 9.0, "", EMPTY), Hit("b", 5.0, "", EMPTY), Hit("c", 1.0, "", EMPTY), Hit("d", 0.5, "", EMPTY)]
MODEL = np.array([0.1, 0.2, 3.0], dtype=np.float32)  # the model's scores of the first three


@pytest.mark.parametrize(
    "combination, order, first_score",
    [
        (Combination(), ["c", "b", "a", "d"], 3.0),  # replace: the model's score alone
        (Combination("replace", rerank_weight=2.0), ["c", "b", "a", "d"], 6.0),
        (Combination("total"), ["a", "b", "c", "d"], 9.1),  # 9 + 0.1, 5 + 0.2, 1 + 3
        (Combination("total", query_weight=0.1), ["c", "a", "b", "d"], 0.1 * 1 + 3.0),
        (Combination("multiply"), ["c", "b", "a", "d"], 3.0),  # 0.9, 1.0, 3.0
        (Combination("total", rerank_weight=0.0), ["a", "b", "c", "d"], 9.0),  # the first stage's order
    ],
)
def test_each_mode_combines_as_elasticsearch_rescore(combination, order, first_score):
    ranked = merge(HITS, MODEL, 3, combination)
    assert [item.hit.doc_id for item in ranked] == order
    assert ranked[0].combined == pytest.approx(first_score)
    lifted = [item.score - item.combined for item in ranked if item.reranked]  # one lift for the whole window
    assert lifted == pytest.approx([lifted[0]] * 3)
    assert min(item.score for item in ranked[:3]) == pytest.approx(1.0 + 1.0)  # 1 over the window's lowest BM25
    assert ranked[3].score == 0.5  # the tail's BM25
    assert [item.reranked for item in ranked] == [True, True, True, False]  # the tail keeps BM25's order below
    assert {item.hit.doc_id: item.model_score for item in ranked if item.reranked} == pytest.approx(
        {"a": 0.1, "b": 0.2, "c": 3.0}
    )


@settings(max_examples=200, deadline=None, database=None)
@given(
    data=st.data(),
    n=st.integers(0, 40),
    window=st.integers(0, 40),
    k=st.integers(0, 50),
    mode=st.sampled_from(["replace", "total", "multiply"]),
)
def test_the_first_k_are_the_whole_rankings_first_k(data, n, window, k, mode):
    # Few distinct scores and ids out of order, so that ties (broken by doc id) are common.
    hits = [
        Hit(f"d{data.draw(st.integers(0, 99)):02d}-{i}", data.draw(st.sampled_from([0.5, 1.0, 2.0])), "", EMPTY)
        for i in range(n)
    ]
    window = min(window, n)
    model = np.array(
        data.draw(st.lists(st.sampled_from([0.0, 1.0, -1.0, 2.5]), min_size=window, max_size=window)), dtype=np.float32
    )
    for scored in (model, None):
        whole = merge(hits, scored, window, Combination(mode))
        assert merge(hits, scored, window, Combination(mode), k) == whole[:k]


@settings(max_examples=300, deadline=None, database=None)
@given(
    data=st.data(),
    n=st.integers(0, 40),
    window=st.integers(0, 40),
    k=st.integers(1, 50),
    mode=st.sampled_from(["replace", "total", "multiply"]),
)
def test_scores_are_never_negative_and_the_window_sits_above_the_tail(data, n, window, k, mode):
    bm25 = sorted(
        data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 7.0, 30.0]), min_size=n, max_size=n)), reverse=True
    )  # the first stage's order
    hits = [Hit(f"d{i:02d}", score, "", EMPTY) for i, score in enumerate(bm25)]
    window = min(window, n)
    model = np.array(data.draw(st.lists(st.floats(-50, 50), min_size=window, max_size=window)), dtype=np.float32)
    ranked = merge(hits, model, window, Combination(mode))
    scores = [item.score for item in ranked]
    assert all(score >= 0 for score in scores) and scores == sorted(scores, reverse=True)
    window_scores = [item.score for item in ranked if item.reranked]
    tail_scores = [item.score for item in ranked if not item.reranked]
    assert not window_scores or not tail_scores or min(window_scores) >= max(tail_scores) + 1.0 - 1e-6
    assert tail_scores == [hit.score for hit in hits[window:]]
    page = {item.hit.doc_id: item.score for item in merge(hits, model, window, Combination(mode), k)}
    assert page == {item.hit.doc_id: item.score for item in ranked[:k]}  # a hit scores the same in any cut
