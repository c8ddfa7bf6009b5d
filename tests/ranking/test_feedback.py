"""Candidate feedback on a hand-made result list.

    a: "green tea"     "green tea catechins"      b: "green tea"   "catechins in tea"
    c: "bone health"   "bone density"             d: "bone density" "bone health"
    e: "unrelated"     ""                         f: "black tea"   "tea catechins"

a, b and f share tea/catechins, c and d share bone/health/density, e shares nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from es_rerank.ranking.feedback import (
    DocumentVectorCache,
    FeedbackParams,
    document_vectors,
    neighbour_votes,
    with_feedback,
)
from es_rerank.ranking.neighbours import standardised
from es_rerank.stats import CorpusStats, Document, build_stats
from es_rerank.text import tokenize

DOCS = {
    "a": ("green tea", "green tea catechins"),
    "b": ("green tea", "catechins in tea"),
    "c": ("bone health", "bone density"),
    "d": ("bone density", "bone health"),
    "e": ("unrelated", ""),
    "f": ("black tea", "tea catechins"),
}


@pytest.fixture(scope="module")
def stats() -> CorpusStats:
    return build_stats("v1", [Document(i, t, a) for i, (t, a) in DOCS.items()])


SERVED = FeedbackParams(k=5, weight=0.5)


def vectors(stats: CorpusStats, ids: str = "abcdef", **options: int):
    return document_vectors([stats.doc_terms(stats.row(i)) for i in ids], stats, **options)


def test_vectors_are_unit_length_log_tf_idf_of_title_and_abstract(stats: CorpusStats) -> None:
    a = vectors(stats, "a").toarray()[0]

    # a: green tf 2, tea tf 2, catechins tf 1; df over title + abstract: green 2, tea 3, catechins 3.
    def idf(df: int) -> float:
        return math.log(1 + (6 - df + 0.5) / (df + 0.5))

    raw = {"green": (1 + math.log(2)) * idf(2), "tea": (1 + math.log(2)) * idf(3), "catechins": idf(3)}
    norm = math.sqrt(sum(v * v for v in raw.values()))
    for word, value in raw.items():
        assert a[stats.vocab.lookup([word])[0]] == pytest.approx(value / norm)
    assert np.count_nonzero(a) == 3


def test_vectors_keep_the_heaviest_terms_of_each_document(stats: CorpusStats) -> None:
    a = vectors(stats, "a", terms_per_document=2).toarray()[0]
    kept = {stats.vocab.terms[i] for i in np.flatnonzero(a)}
    assert kept == {"green", "tea"}  # catechins (tf 1) is the lightest
    assert np.linalg.norm(a) == pytest.approx(1.0)
    assert vectors(stats, "fa").shape == (2, len(stats.vocab))  # rows in the order asked


@pytest.mark.parametrize("ids", ["fac", "d", "", "bbeacdf"])
def test_a_document_vector_does_not_depend_on_the_other_hits(stats: CorpusStats, ids: str) -> None:
    window = vectors(stats, ids, terms_per_document=2).toarray()
    assert window.shape == (len(ids), len(stats.vocab))
    for row, doc_id in zip(window, ids):
        np.testing.assert_allclose(row, vectors(stats, doc_id, terms_per_document=2).toarray()[0])


def cached(cache: DocumentVectorCache, stats: CorpusStats, ids: str):
    return cache.vectors(list(ids), [stats.doc_terms(stats.row(i)) for i in ids], stats)


def same_matrix(got, expected) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)  # bit for bit: the same rows, only kept


def test_the_cache_builds_the_same_matrix_as_document_vectors(stats: CorpusStats) -> None:
    cache = DocumentVectorCache(max_documents=100, terms_per_document=2)
    for ids in ["fac", "cabe", "d", "", "bbeacdf"]:  # cached, new, mixed, empty, repeated
        same_matrix(cached(cache, stats, ids), vectors(stats, ids, terms_per_document=2))
    assert len(cache) == 6


def test_the_cache_keeps_at_most_its_bound_the_least_recently_used_leaving(stats: CorpusStats) -> None:
    cache = DocumentVectorCache(max_documents=2)
    same_matrix(cached(cache, stats, "abcd"), vectors(stats, "abcd"))  # a window larger than the bound still works
    assert list(cache._slots) == ["c", "d"]
    cached(cache, stats, "c")
    cached(cache, stats, "e")
    assert list(cache._slots) == ["c", "e"]  # d, used longest ago, left


def test_the_cache_refuses_misfit_arguments(stats: CorpusStats) -> None:
    with pytest.raises(ValueError, match="at least 1, got 0"):
        DocumentVectorCache(max_documents=0)
    with pytest.raises(ValueError, match="one id per document expected, got 2 ids for 1 documents"):
        DocumentVectorCache(10).vectors(["a", "b"], [stats.doc_terms(0)], stats)


@pytest.mark.parametrize("version", ["v2", "same name"])
def test_statistics_of_another_build_empty_the_cache(stats: CorpusStats, version: str) -> None:
    """Another version, or the same version name built again after a prune freed it."""
    cache = DocumentVectorCache(max_documents=100)
    cached(cache, stats, "abc")
    reindexed = build_stats(
        stats.version if version == "same name" else version,
        [Document(i, t, a) for i, (t, a) in DOCS.items() if i != "d"] + [Document("d", "unrelated bone", "bone")],
    )  # another vocabulary and idf
    same_matrix(
        cached(cache, reindexed, "dab"),
        document_vectors([reindexed.doc_terms(reindexed.row(i)) for i in "dab"], reindexed),
    )
    assert sorted(cache._slots) == ["a", "b", "d"]  # the rows of the first build are gone


def test_concurrent_windows_get_their_own_matrices(stats: CorpusStats) -> None:
    from concurrent.futures import ThreadPoolExecutor

    cache = DocumentVectorCache(max_documents=3)  # smaller than the windows: rows leave while others read
    windows = ["abcdef", "fedcba", "aabbcc", "def", "ace", "bdf"] * 20
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda ids: cached(cache, stats, ids), windows))
    for ids, matrix in zip(windows, got):
        same_matrix(matrix, vectors(stats, ids))
    assert len(cache) == 3


def test_one_neighbour_votes_with_its_own_standardised_score(stats: CorpusStats) -> None:
    scores = np.array([3.0, 1.0, 2.0, 0.0, 5.0])
    votes = neighbour_votes(vectors(stats, "abcde"), scores, k=1)
    z = standardised(scores)
    assert votes[:4] == pytest.approx([z[1], z[0], z[3], z[2]])
    assert votes[4] == 0.0  # e resembles no other hit: no vote, not a nan


def test_votes_are_cosine_weighted_means_over_the_k_nearest(stats: CorpusStats) -> None:
    scores = np.array([3.0, 1.0, 2.0, 0.0, 5.0, 4.0])
    hits = vectors(stats, "abcdef")
    dense = hits.toarray()
    z = standardised(scores)
    votes = neighbour_votes(hits, scores, k=2)
    assert votes[0] != pytest.approx((z[1] + z[5]) / 2)  # b is closer to a than f is: weights differ
    for i in range(6):
        cos = {j: float(dense[i] @ dense[j]) for j in range(6) if j != i}
        nearest = sorted(cos, key=lambda j: -cos[j])[:2]
        weight = sum(cos[j] for j in nearest)
        expected = sum(cos[j] * z[j] for j in nearest) / weight if weight > 0 else 0.0
        assert votes[i] == pytest.approx(expected)


def test_a_low_hit_with_strong_neighbours_rises_above_an_isolated_one(stats: CorpusStats) -> None:
    scores = np.array([5.0, 1.0, 0.0, 0.0, 1.5])  # b trails e, but b's twin a leads
    fed = with_feedback(scores, vectors(stats, "abcde"), FeedbackParams(k=1, weight=1.0))
    assert fed.dtype == np.float32
    assert fed[1] > fed[4]
    assert np.argmax(fed) == 0


def test_weight_zero_leaves_the_standardised_order(stats: CorpusStats) -> None:
    scores = np.array([5.0, 1.0, 0.0, 2.0, 1.5, 0.5])
    fed = with_feedback(scores, vectors(stats), FeedbackParams(k=5, weight=0.0))
    assert fed == pytest.approx(standardised(scores))


@pytest.mark.parametrize("ids", ["", "a"])
def test_empty_and_single_result_lists(stats: CorpusStats, ids: str) -> None:
    scores = np.ones(len(ids))
    assert with_feedback(scores, vectors(stats, ids), SERVED).tolist() == [0.0] * len(ids)


def test_a_document_with_no_terms_gets_a_zero_vector() -> None:
    stats = build_stats("v1", [Document("x", "", ""), Document("y", "tea", "")])
    xy = vectors(stats, "xy").toarray()
    assert not np.isnan(xy).any()
    assert xy[0].tolist() == [0.0] * len(stats.vocab)
    assert stats.vocab.lookup(tokenize("tea"))[0] in np.flatnonzero(xy[1])


def test_mismatched_or_non_finite_scores_are_refused(stats: CorpusStats) -> None:
    with pytest.raises(ValueError, match="one score per hit"):
        with_feedback(np.ones(4), vectors(stats), SERVED)
    with pytest.raises(ValueError, match="finite"):
        with_feedback(np.array([1.0, np.nan, 0, 0, 0, 0]), vectors(stats), SERVED)


@pytest.mark.parametrize(
    "params",
    [{"k": 0}, {"k": 2.5}, {"k": True}, {"weight": -1.0}, {"weight": float("inf")}, {"weight": "1"}, {"weight": 1e39}],
)
def test_parameters_are_checked(params: dict) -> None:
    with pytest.raises(ValueError):
        FeedbackParams(**{"k": 5, "weight": 0.5, **params})


def test_nearest_hits_are_the_largest_similarities_but_ones_own():
    from scipy import sparse

    from es_rerank.ranking.feedback import nearest_hits

    rng = np.random.default_rng(3)
    dense = np.round(rng.random((40, 12)), 1) * (rng.random((40, 12)) < 0.3)  # sparse, with tied similarities
    vectors = sparse.csr_matrix(dense)
    similarity = dense @ dense.T
    nearest, cosines = nearest_hits(vectors, 5)
    assert nearest.shape == cosines.shape == (40, 5)
    for row in range(40):
        others = np.delete(similarity[row], row)
        assert row not in nearest[row] and len(set(nearest[row])) == 5
        np.testing.assert_allclose(np.sort(similarity[row, nearest[row]]), np.sort(others)[-5:])
        np.testing.assert_allclose(cosines[row], np.maximum(similarity[row, nearest[row]], 0.0))


def test_of_equally_similar_hits_the_one_nearer_the_top_is_nearer():
    """Duplicates tie on every similarity: the vote reads the one BM25 ranks higher, for any k."""
    from scipy import sparse

    from es_rerank.ranking.feedback import nearest_hits

    rng = np.random.default_rng(5)
    dense = np.round(rng.random((30, 8)), 1) * (rng.random((30, 8)) < 0.5)
    dense[:, 0] += 0.1  # no zero row: every one has a norm to divide by
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    dense[[7, 12, 20]] = dense[3]  # hit 3 thrice duplicated, further down: cosine 1 with its copies
    vectors = sparse.csr_matrix(dense)
    for k in (1, 5, 16, 17, 29):
        nearest, cosines = nearest_hits(vectors, k)
        assert (np.diff(cosines, axis=1) <= 0).all()  # most similar first
        for row in range(30):
            for rank in range(k - 1):  # equal cosines in the order of the window
                if cosines[row, rank] == cosines[row, rank + 1] > 0:
                    assert nearest[row, rank] < nearest[row, rank + 1]
        np.testing.assert_array_equal(nearest[:, :1], nearest_hits(vectors, 1)[0])  # a prefix of any larger k
    nearest, _ = nearest_hits(vectors, 1)
    assert [nearest[row, 0] for row in (3, 7, 12, 20)] == [7, 3, 3, 3]  # a copy's nearest: the first other copy
