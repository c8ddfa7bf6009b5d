"""Lex features against hand-computed values on the tiny corpus of conftest.py.

    a: title "vitamin d deficiency"  abstract "vitamin d deficiency causes bone loss"
    b: title "bone health"           abstract "calcium and vitamin k support bone health"
    c: title "breast cancer"         abstract ""

N = 3, so Lucene's idf log(1 + (N - df + 0.5) / (df + 0.5)) takes four values:
df 0 -> log 8, df 1 -> log 8/3, df 2 -> log 1.6, df 3 -> log 8/7.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from es_rerank.lex import (
    ALL_FEATURES,
    KNOWN_FEATURES,
    LEX3,
    LEX3_WINDOW,
    WINDOW_FEATURES,
    WINDOW_SUFFIX,
    BM25Params,
    UnknownFeatureError,
    check_feature_names,
    lex_features,
)
from es_rerank.stats import CorpusStats, Document, build_stats
from es_rerank.text import tokenize

DF0, DF1, DF2 = math.log(8), math.log(8 / 3), math.log(1.6)
K1, B = 1.2, 0.75


def features(
    stats: CorpusStats, query: str, names=ALL_FEATURES, bm25: BM25Params = BM25Params()
) -> dict[str, np.ndarray]:
    query_ids = stats.vocab.lookup(tokenize(query))
    docs = [stats.doc_terms(row) for row in range(stats.n_docs)]
    values = lex_features(query_ids, docs, stats, names, bm25)
    assert values.shape == (stats.n_docs, len(names)) and values.dtype == np.float32
    return {name: values[:, j] for j, name in enumerate(names)}


def bm25_term(idf: float, tf: int, length: int, avg_length: float) -> float:
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg_length))


def test_abstract_bm25(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin bone health")
    avg = (6 + 7 + 0) / 3
    # abstract df: vitamin 2, bone 2, health 1
    a = bm25_term(DF2, 1, 6, avg) + bm25_term(DF2, 1, 6, avg)  # vitamin, bone; no health
    b = bm25_term(DF2, 1, 7, avg) + bm25_term(DF2, 1, 7, avg) + bm25_term(DF1, 1, 7, avg)
    # written out for b: norm = 1.2 * (0.25 + 0.75 * 7 / (13/3)) = 1.7538...
    assert b == pytest.approx((2 * DF2 + DF1) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 21 / 13)))
    assert f["abstract_bm25"] == pytest.approx([a, b, 0.0], rel=1e-6)


def test_title_and_text_bm25_use_their_own_statistics(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin bone health")
    # title df: vitamin 1, bone 1, health 1; title lengths 3, 2, 2, average 7/3
    assert f["title_bm25"] == pytest.approx(
        [bm25_term(DF1, 1, 3, 7 / 3), 2 * bm25_term(DF1, 1, 2, 7 / 3), 0.0], rel=1e-6
    )
    # text df: vitamin 2, bone 2, health 1; text lengths 9, 9, 2, average 20/3; a has vitamin twice
    assert f["text_bm25"] == pytest.approx(
        [
            bm25_term(DF2, 2, 9, 20 / 3) + bm25_term(DF2, 1, 9, 20 / 3),
            bm25_term(DF2, 1, 9, 20 / 3) + bm25_term(DF2, 2, 9, 20 / 3) + bm25_term(DF1, 2, 9, 20 / 3),
            0.0,
        ],
        rel=1e-6,
    )


def test_title_idf_features_of_lex3(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin bone health", LEX3)
    query_idf = DF2 + DF2 + DF1  # text idf of vitamin, bone, health
    # IDF-weighted proportion of query words in the title
    # a: {vitamin}; b: {bone, health}; c: none
    assert f["title_idf_word_overlap"] == pytest.approx([DF2 / query_idf, (DF2 + DF1) / query_idf, 0.0])
    # IDF-weighted Jaccard: idf(Q ∩ T) / (idf(Q) + idf(T) - idf(Q ∩ T))
    # a: T = {vitamin, d, deficiency} -> DF2 / (query_idf + DF2 + 2 DF1 - DF2)
    # b: T = {bone, health} ⊂ Q       -> (DF2 + DF1) / query_idf
    # c: T = {breast, cancer}         -> 0
    assert f["title_idf_jaccard"] == pytest.approx([DF2 / (query_idf + 2 * DF1), (DF2 + DF1) / query_idf, 0.0])


def test_plain_overlap_and_jaccard(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin bone health")
    # unique query words 3; unique text words a: 6, b: 7, c: 2
    assert f["text_word_overlap"] == pytest.approx([2 / 3, 3 / 3, 0.0])
    assert f["title_word_overlap"] == pytest.approx([1 / 3, 2 / 3, 0.0])
    assert f["abstract_word_overlap"] == pytest.approx([2 / 3, 3 / 3, 0.0])
    # |Q ∩ D| / (|Q| + |D| - |Q ∩ D|)
    assert f["text_jaccard"] == pytest.approx([2 / (3 + 6 - 2), 3 / (3 + 7 - 3), 0 / (3 + 2)])
    assert f["title_jaccard"] == pytest.approx([1 / (3 + 3 - 1), 2 / (3 + 2 - 2), 0.0])


def test_bigram_overlap(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin bone health")
    # query bigrams (vitamin, bone), (bone, health); only b holds "bone health"
    for name in ("text_bigram_overlap", "title_bigram_overlap", "abstract_bigram_overlap"):
        assert f[name] == pytest.approx([0.0, 1 / 2, 0.0])
    # a one-word query has no bigram: 0, not a division by zero
    assert features(tiny_stats, "bone")["text_bigram_overlap"] == pytest.approx([0.0, 0.0, 0.0])


def test_repeated_query_words_count_once(tiny_stats: CorpusStats) -> None:
    once, twice = features(tiny_stats, "vitamin bone"), features(tiny_stats, "vitamin vitamin bone")
    for name in ("text_word_overlap", "text_jaccard", "text_idf_jaccard", "abstract_bm25"):
        assert once[name] == pytest.approx(twice[name])


def test_unknown_query_words(tiny_stats: CorpusStats) -> None:
    f = features(tiny_stats, "vitamin zebrafish")
    # zebrafish is in no document: df 0, idf log 8; it is a query word nothing can match
    assert f["text_word_overlap"] == pytest.approx([1 / 2, 1 / 2, 0.0])
    assert f["text_idf_word_overlap"] == pytest.approx([DF2 / (DF2 + DF0), DF2 / (DF2 + DF0), 0.0])
    # a's text words: vitamin, bone (df 2); d, deficiency, causes, loss (df 1)
    text_a = 2 * DF2 + 4 * DF1
    assert f["text_idf_jaccard"][0] == pytest.approx(DF2 / (DF2 + DF0 + text_a - DF2))
    assert f["text_jaccard"][0] == pytest.approx(1 / (2 + 6 - 1))
    assert f["abstract_bm25"] == pytest.approx(features(tiny_stats, "vitamin")["abstract_bm25"])
    only_unknown = features(tiny_stats, "zebrafish axolotl")
    assert all(np.all(column == 0.0) for column in only_unknown.values())


@pytest.mark.parametrize("query", ["vitamin bone health", "zebrafish", "", "Breast cancer and vitamin D"])
def test_every_feature_is_a_finite_column(tiny_stats: CorpusStats, query: str) -> None:
    f = features(tiny_stats, query)
    assert list(f) == list(ALL_FEATURES) and len(ALL_FEATURES) == 18
    for name, column in f.items():
        assert column.shape == (3,) and np.all(np.isfinite(column)), name
        assert np.all(column >= 0), name
        if not name.endswith("bm25"):
            assert np.all(column <= 1.0 + 1e-6), name


def test_bm25_with_b_1_and_an_empty_abstract_is_zero_not_nan(tiny_stats: CorpusStats) -> None:
    # c has no abstract: its length norm k1 * (1 - b + b * 0 / avg) is 0 when b = 1
    f = features(tiny_stats, "vitamin", bm25=BM25Params(k1=1.2, b=1.0))
    assert np.all(np.isfinite(f["abstract_bm25"])) and f["abstract_bm25"][2] == 0.0


def test_no_candidates_and_default_names(tiny_stats: CorpusStats) -> None:
    query_ids = tiny_stats.vocab.lookup(tokenize("vitamin"))
    assert lex_features(query_ids, [], tiny_stats).shape == (0, 3)
    assert LEX3 == ("abstract_bm25", "title_idf_jaccard", "title_idf_word_overlap")
    default = lex_features(query_ids, [tiny_stats.doc_terms(0)], tiny_stats)
    named = lex_features(query_ids, [tiny_stats.doc_terms(0)], tiny_stats, LEX3)
    assert np.array_equal(default, named)


def test_unknown_feature_name(tiny_stats: CorpusStats) -> None:
    query_ids = tiny_stats.vocab.lookup(["vitamin"])
    with pytest.raises(UnknownFeatureError, match="title_bm26"):
        lex_features(query_ids, [tiny_stats.doc_terms(0)], tiny_stats, ["title_bm26"])


def test_features_do_not_depend_on_the_batch(tiny_stats: CorpusStats) -> None:
    query_ids = tiny_stats.vocab.lookup(tokenize("vitamin bone health"))
    docs = [tiny_stats.doc_terms(row) for row in range(3)]
    together = lex_features(query_ids, docs, tiny_stats, ALL_FEATURES)
    alone = np.concatenate([lex_features(query_ids, [d], tiny_stats, ALL_FEATURES) for d in reversed(docs)])
    assert np.allclose(together, alone[::-1])


def test_numbers_match_lexically() -> None:
    stats = build_stats("n", [Document("x", "Trial in 1998", "p<0.05"), Document("y", "Trial in 2017", "")])
    f = features(stats, "1998 trial")
    assert f["title_word_overlap"] == pytest.approx([1.0, 0.5])  # 1998 is not 2017


def test_no_feature_names_give_an_empty_width_array(tiny_stats) -> None:
    docs = [tiny_stats.doc_terms(row) for row in range(tiny_stats.n_docs)]
    features = lex_features(np.array([0]), docs, tiny_stats, ())
    assert features.shape == (tiny_stats.n_docs, 0) and features.dtype == np.float32


def test_window_features_are_the_papers_standardised_within_the_window(tiny_stats: CorpusStats) -> None:
    """Doc c has no abstract; every doc has a title here, so nothing is imputed."""
    plain = features(tiny_stats, "vitamin bone health")
    window = features(tiny_stats, "vitamin bone health", LEX3_WINDOW)
    for name in LEX3:
        expected = (plain[name] - plain[name].mean()) / plain[name].std()
        assert window[name + WINDOW_SUFFIX] == pytest.approx(expected, abs=1e-6)
    assert features(tiny_stats, "zebra", LEX3_WINDOW)["abstract_bm25_wz"] == pytest.approx([0.0] * 3)  # all equal


def test_a_longer_query_raises_bm25_but_not_its_window_feature() -> None:
    """Words that every candidate matches equally add to each document's BM25 alike: the paper's feature moves up,
    the window feature does not move."""
    docs = [
        Document("a", "t", "vitamin d and bone loss in the elderly cohort"),
        Document("b", "", "vitamin c cohort"),
        Document("c", "t", "bone density and diet cohort"),
    ]
    stats = build_stats("w", docs)
    short, longer = features(stats, "vitamin bone"), features(stats, "vitamin bone cohort")
    assert (longer["abstract_bm25"] > short["abstract_bm25"]).all()
    names = ["abstract_bm25_wz"]
    assert features(stats, "vitamin bone cohort", names)["abstract_bm25_wz"] == pytest.approx(
        features(stats, "vitamin bone", names)["abstract_bm25_wz"], abs=0.3
    )
    window = features(stats, "vitamin bone", names)["abstract_bm25_wz"]
    assert window.mean() == pytest.approx(0.0, abs=1e-6) and window.std() == pytest.approx(1.0, abs=1e-5)
    assert np.argsort(window).tolist() == np.argsort(short["abstract_bm25"]).tolist()


def test_an_empty_title_is_unknown_not_a_mismatch() -> None:
    docs = [Document("a", "Vitamin D", "x"), Document("b", "", "vitamin"), Document("c", "Bone", "y")]
    stats = build_stats("t", docs)
    window = features(stats, "vitamin", ["title_idf_word_overlap", "title_idf_word_overlap_wz"])
    plain = window["title_idf_word_overlap"]
    assert plain.tolist() == pytest.approx([1.0, 0.0, 0.0])  # the paper's: b, without a title, matches nothing
    imputed = np.array([1.0, 0.5, 0.0])  # b takes the mean of the titled a and c
    assert window["title_idf_word_overlap_wz"] == pytest.approx((imputed - imputed.mean()) / imputed.std())
    untitled = build_stats("u", [Document("a", "", "vitamin d"), Document("b", "", "bone")])
    assert features(untitled, "vitamin", LEX3_WINDOW)["title_idf_jaccard_wz"] == pytest.approx([0.0, 0.0])


def test_window_names_are_known_features() -> None:
    assert check_feature_names(list(LEX3_WINDOW)) == LEX3_WINDOW and set(WINDOW_FEATURES) <= set(KNOWN_FEATURES)
    with pytest.raises(ValueError, match="each also with the suffix _wz"):
        check_feature_names(["abstract_bm25_zw"])
