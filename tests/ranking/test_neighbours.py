"""Judged neighbours: similarity, votes, leaving a query out, fusion, the saved file."""

import json
import math

import numpy as np
import pytest

from es_rerank.ranking.neighbours import (
    CorpusIdentity,
    JudgedNeighbours,
    NeighbourParams,
    NeighboursError,
    doc_ids_digest,
    fuse,
)
from es_rerank.stats import Document, build_stats

QUERIES = {"A": "vitamin deficiency", "B": "vitamin supplements", "C": "fish oil", "U": "unjudged query"}
QRELS = {"A": {"d1": 2, "d2": 1}, "B": {"d2": 2, "d3": 1}, "C": {"d4": 2}, "U": {"d5": 0}}
# idf over the three judged queries: "vitamin" is in two, every other word in one
SIM_B = math.log(3 / 2) ** 2 / (math.log(3 / 2) ** 2 + math.log(3) ** 2)


def test_similar_queries_are_idf_weighted_cosines_best_first():
    neighbours = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=5))
    (first, s1), (second, s2) = neighbours.similar("vitamin deficiency")
    assert (first, second) == ("A", "B")
    assert s1 == pytest.approx(1.0) and s2 == pytest.approx(SIM_B)
    assert neighbours.query_ids == ["A", "B", "C"]  # a query without a relevant document never votes


def test_votes_weight_grades_by_similarity_and_lie_in_0_1():
    neighbours = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=2, power=1.0, confidence=0.0))
    votes = neighbours.scores("vitamin deficiency", ["d1", "d2", "d3", "d4", "unknown"])
    expected = np.array([2, 1 + 2 * SIM_B, SIM_B, 0, 0]) / 2
    np.testing.assert_allclose(votes, expected, rtol=1e-6)
    assert votes.dtype == np.float32


def test_power_sharpens_and_k_limits_the_voters():
    squared = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=2, power=2.0, confidence=0.0))
    np.testing.assert_allclose(squared.scores("vitamin deficiency", ["d3"]), [SIM_B**2 / 2], rtol=1e-6)
    nearest_only = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=1, power=1.0, confidence=0.0))
    np.testing.assert_allclose(nearest_only.scores("vitamin deficiency", ["d1", "d3"]), [1.0, 0.0])


def test_a_left_out_query_does_not_vote_for_its_own_documents():
    neighbours = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=5, power=1.0, confidence=0.0))
    np.testing.assert_allclose(
        neighbours.scores("vitamin deficiency", ["d1", "d2", "d3"], exclude="A"), [0.0, 1.0, 0.5], rtol=1e-6
    )


def test_a_query_sharing_no_word_gets_zero_votes():
    neighbours = JudgedNeighbours(QUERIES, QRELS)
    np.testing.assert_array_equal(neighbours.scores("green tea", ["d1", "d4"]), [0.0, 0.0])
    assert neighbours.scores("", []).shape == (0,)


def test_fuse_standardises_the_scores_then_adds_the_weighted_votes():
    fused = fuse(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0]), weight=0.5)
    np.testing.assert_allclose(fused, [-1.2247449, 0.0, 1.2247449 + 0.5], rtol=1e-6)
    np.testing.assert_allclose(fuse(np.array([4.0, 4.0]), np.array([1.0, 0.0]), 2.0), [2.0, 0.0])
    assert fuse(np.zeros(0), np.zeros(0), 1.0).shape == (0,)


def test_saved_neighbours_load_with_the_same_votes(tmp_path):
    path = tmp_path / "neighbours.json"
    original = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=3, power=1.5))
    original.save(path)
    loaded = JudgedNeighbours.load(path)
    assert loaded.params == original.params
    docs = ["d1", "d2", "d3", "d4"]
    np.testing.assert_array_equal(
        loaded.scores("vitamin supplements", docs), original.scores("vitamin supplements", docs)
    )
    assert not path.with_name(path.name + ".tmp").exists()


CORPUS = {"n_docs": 3, "doc_ids_sha256": "0" * 64, "index_version": "v1", "build_id": "b1"}


def saved(**changes) -> str:
    payload = {
        "kind": "judged-neighbours",
        "params": {"k": 2, "power": 1.0, "weight": 1.0},
        "queries": {"A": "vitamin", "B": "fish"},
        "qrels": {"A": {"d1": 1}, "B": {"d2": 2}},
    }
    return json.dumps({**payload, **changes})


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "[]",
        json.dumps({"kind": "checkpoint"}),
        saved(params={"k": 0, "power": 1.0, "weight": 1.0}),
        saved(params={"k": True, "power": 1.0, "weight": 1.0}),
        saved(params={"k": 2}),
        saved(params={"k": 2, "power": 1.0, "weight": 1.0, "extra": 1}),
        saved(queries=[]),
        saved(queries={"A": 7, "B": "fish"}),
        saved(qrels={"A": {"d1": "1"}, "B": {"d2": 2}}),
        saved(qrels={"A": {"d1": True}, "B": {"d2": 2}}),
        saved(qrels={"A": {"d1": 1.5}, "B": {"d2": 2}}),
        saved(qrels={"A": ["d1"], "B": {"d2": 2}}),
        saved(qrels={"A": {"d1": -1}, "B": {"d2": 2}}),
        saved().replace('"d2": 2', '"d2": Infinity'),
        saved().replace('"d2": 2', '"d2": NaN'),
        saved(corpus=[]),
        saved(corpus={"n_docs": 3}),
        saved(corpus={**CORPUS, "n_docs": "3"}),
        saved(corpus={**CORPUS, "build_id": 7}),
        saved(corpus={**CORPUS, "extra": ""}),
    ],
)
def test_a_damaged_file_names_the_fix(tmp_path, content):
    path = tmp_path / "neighbours.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(NeighboursError, match="neighbours"):
        JudgedNeighbours.load(path)


def test_a_well_formed_saved_file_loads(tmp_path):
    path = tmp_path / "neighbours.json"
    path.write_text(saved(), encoding="utf-8")
    assert JudgedNeighbours.load(path).query_ids == ["A", "B"]


def test_fuse_refuses_mismatched_or_non_finite_input():
    with pytest.raises(ValueError, match="one vote per score"):
        fuse(np.ones(3), np.ones(1), 1.0)
    with pytest.raises(ValueError, match="finite"):
        fuse(np.array([1.0, np.nan]), np.zeros(2), 1.0)


def test_huge_grades_give_finite_votes():
    neighbours = JudgedNeighbours({"A": "vitamin", "B": "fish"}, {"A": {"d1": 10**308}, "B": {"d2": 1}})
    np.testing.assert_array_equal(neighbours.scores("vitamin", ["d1", "d2"]), [1.0, 0.0])


@pytest.mark.parametrize(
    "params",
    [
        {"k": 0},
        {"k": 2.5},
        {"k": True},
        {"power": 0.0},
        {"power": float("nan")},
        {"weight": -1.0},
        {"weight": "1"},
        {"weight": True},
        {"weight": 101.0},
        {"confidence": -0.5},
        {"confidence": float("inf")},
        {"confidence": True},
    ],
)
def test_parameters_are_checked(params):
    with pytest.raises(NeighboursError):
        NeighbourParams(**params)


def test_the_corpus_identity_is_saved_and_tells_the_same_documents_from_others(tmp_path):
    stats = build_stats("v1", [Document(i, "t", "a") for i in ("d1", "d2", "d3")])
    identity = CorpusIdentity.of(stats)
    assert identity == CorpusIdentity(3, doc_ids_digest(["d3", "d1", "d2"]), "v1", stats.build_id)
    path = tmp_path / "neighbours.json"
    JudgedNeighbours(QUERIES, QRELS, corpus=identity).save(path)
    loaded = JudgedNeighbours.load(path)
    assert loaded.corpus == identity and loaded.mismatch(stats) is None
    same_documents = build_stats("v2", [Document(i, "other title", "") for i in ("d3", "d2", "d1")])
    assert loaded.mismatch(same_documents) is None  # a reindex, in another order: the same corpus
    renamed = build_stats("v3", [Document(i, "t", "a") for i in ("d1", "d2", "x3")])
    assert "3 documents, index v1); the served index v3 holds other document ids" in loaded.mismatch(renamed)
    bigger = build_stats("v4", [Document(i, "t", "a") for i in ("d1", "d2", "d3", "d4")])
    assert "the served index v4 holds 4 documents" in loaded.mismatch(bigger)
    assert "esrr neighbours build --data" in loaded.mismatch(bigger)
    unrecorded = JudgedNeighbours(QUERIES, QRELS)
    assert "does not say which corpus" in unrecorded.mismatch(stats)


def test_votes_are_as_strong_as_the_nearest_training_query_is_similar():
    plain = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=2, power=1.0, confidence=0.0))
    scaled = JudgedNeighbours(QUERIES, QRELS, NeighbourParams(k=2, power=1.0, confidence=2.0))
    docs = ["d1", "d2", "d3"]
    # "vitamin" alone: A and B are equally near, each with cosine log(3/2)/sqrt(log(3/2)^2 + log(3)^2)
    nearest = math.log(3 / 2) / math.sqrt(math.log(3 / 2) ** 2 + math.log(3) ** 2)
    np.testing.assert_allclose(scaled.scores("vitamin", docs), plain.scores("vitamin", docs) * nearest**2, rtol=1e-6)
    exact = scaled.scores("vitamin deficiency", docs)  # A itself is the nearest: similarity 1, full votes
    np.testing.assert_allclose(exact, plain.scores("vitamin deficiency", docs), rtol=1e-6)
    assert NeighbourParams().confidence == 2.0


def test_a_file_saved_before_the_confidence_existed_votes_as_it_did(tmp_path):
    path = tmp_path / "neighbours.json"
    path.write_text(saved(), encoding="utf-8")  # params k, power, weight only
    assert JudgedNeighbours.load(path).params.confidence == 0.0


def _loop_votes(neighbours: JudgedNeighbours, text: str, doc_ids: list[str], exclude: str | None) -> np.ndarray:
    """The votes as plain loops compute them: each posting, then each voter's judged document, added in turn."""
    from collections import defaultdict

    from es_rerank.text import tokenize

    similarity: dict[int, float] = defaultdict(float)
    for term, weight in neighbours._weights(set(tokenize(text))).items():
        for index, other in neighbours.postings.get(term, ()):
            similarity[index] += weight * other
    voters = sorted(
        ((s, i) for i, s in similarity.items() if neighbours.query_ids[i] != exclude),
        key=lambda pair: (-pair[0], pair[1]),
    )[: neighbours.params.k]
    votes: dict[str, float] = defaultdict(float)
    for s, i in voters:
        for doc_id, grade in neighbours.judged[neighbours.query_ids[i]].items():
            votes[doc_id] += s**neighbours.params.power * grade
    top = max(votes.values(), default=0.0)
    out = np.array([votes.get(d, 0.0) for d in doc_ids], dtype=np.float64)
    if top <= 0:
        return out.astype(np.float32)
    return (out / top * min(voters[0][0], 1.0) ** neighbours.params.confidence).astype(np.float32)


def test_the_votes_are_the_loops_sums_to_the_bit():
    """The votes added up in numpy equal the plain loops' exactly, not only closely."""
    from tests.artifact_home import read_documents  # NFCorpus's documents when the data is there

    rng = np.random.default_rng(5)
    words = sorted(
        {
            word
            for doc in read_documents(200)
            for word in f"{doc.title} {doc.abstract}".lower().split()
            if word.isalpha()
        }
    )
    queries = {f"q{i}": " ".join(rng.choice(words, int(rng.integers(1, 6)))) for i in range(300)}
    documents = [f"D{i}" for i in range(20)]  # few: each gets many votes, whose order of addition shows
    qrels = {q: {d: int(rng.integers(0, 3)) for d in rng.choice(documents, 8, replace=False)} for q in queries}
    neighbours = JudgedNeighbours(queries, qrels, NeighbourParams(k=50))
    for query_id, text in list(queries.items())[:100]:
        window = [*rng.choice(documents, 30), "not-judged"]
        for exclude in (None, query_id):
            assert np.array_equal(
                neighbours.scores(text, window, exclude), _loop_votes(neighbours, text, window, exclude)
            )
