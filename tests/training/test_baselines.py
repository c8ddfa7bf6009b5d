"""Greedy Lex-feature selection, the linear Lex ranker and the DRMM baseline on tiny inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from es_rerank.embeddings import Embeddings
from es_rerank.stats import Document, build_stats
from training.data import QueryCandidates
from training.drmm import (
    DRMM,
    DRMMCheckpoint,
    DRMMConfig,
    HistogramBuilder,
    build_histograms,
    drmm_scores,
    train_drmm,
)
from training.feature_selection import greedy_select, linear_evaluator
from training.train import TrainConfig
from worker.model import Checkpoint


def test_greedy_selection_adds_the_best_feature_at_each_step():
    # A subset's value: a + b are worth most together, c alone beats either of them alone.
    value = {("c",): 0.5, ("a",): 0.3, ("b",): 0.2, ("d",): 0.1}

    def evaluate(subset: tuple[str, ...]) -> float:
        if set(subset) >= {"a", "b"}:
            return 0.9 + 0.01 * len(subset)
        return value.get(subset, 0.4 + 0.01 * ("a" in subset) + 0.02 * ("b" in subset))

    steps = greedy_select(["a", "b", "c", "d"], evaluate, max_features=3, progress=False)
    assert [s.added for s in steps] == ["c", "b", "a"]
    assert steps[0].trials == {"a": 0.3, "b": 0.2, "c": 0.5, "d": 0.1}
    assert steps[2].dev_ndcg20 == pytest.approx(0.93) and set(steps[2].trials) == {"a", "d"}


def test_greedy_selection_breaks_ties_by_the_papers_order_and_checks_its_budget():
    steps = greedy_select(["x", "y"], lambda subset: 0.5, max_features=1, progress=False)
    assert steps[0].added == "x"
    with pytest.raises(ValueError, match="max_features"):
        greedy_select(["x", "y"], lambda subset: 0.5, max_features=3, progress=False)


def _lex_query(qid: str, rng: np.random.Generator, n: int = 12) -> QueryCandidates:
    """Feature 0 is noise, feature 1 is high exactly on the relevant documents."""
    grades = np.zeros(n, dtype=np.int64)
    grades[:3] = 1
    lex = np.stack([rng.normal(size=n), grades + 0.1 * rng.normal(size=n)], axis=1).astype(np.float32)
    return QueryCandidates(
        qid, np.zeros(7, np.int64), [f"{qid}-{i}" for i in range(n)], np.arange(n), lex, np.ones(n, np.float32), grades
    )


def test_linear_evaluator_finds_the_informative_feature():
    rng = np.random.default_rng(0)
    train = [_lex_query(f"t{i}", rng) for i in range(20)]
    dev = [_lex_query(f"d{i}", rng) for i in range(6)]
    qrels = {c.query_id: {d: 1 for d, g in zip(c.doc_ids, c.grades) if g} for c in dev}
    evaluate = linear_evaluator(["noise", "signal"], train, dev, qrels, TrainConfig(max_epochs=3, batch_size=8))
    assert evaluate(("signal",)) == pytest.approx(1.0)
    assert evaluate(("noise",)) < 0.8
    steps = greedy_select(["noise", "signal"], evaluate, max_features=1, progress=False)
    assert steps[0].added == "signal"


@pytest.fixture()
def tiny_index():
    stats = build_stats(
        "v",
        [Document("a", "zinc", "zinc absorption zinc"), Document("b", "vitamin", "bone bone"), Document("c", "", "")],
    )
    words = ["<pad>", "<unk>", "zinc", "absorption", "vitamin", "bone"]
    vectors = np.zeros((len(words), 2), dtype=np.float32)
    vectors[2:] = [[1, 0], [0.6, 0.8], [-1, 0], [0, 1]]  # cos with zinc: 1, 0.6, -1, 0
    return stats, Embeddings(vectors, words, "e")


def test_histograms_count_cosine_bins_with_exact_matches_apart(tiny_index):
    stats, embeddings = tiny_index
    config = DRMMConfig(n_bins=5, query_len=3)
    query = HistogramBuilder(stats, embeddings, config).query("zinc", np.array([0, 1, 2]))
    counts = np.expm1(query.histograms.astype(np.float64))  # [3 docs, 3 query slots, 5 bins]
    assert query.histograms.shape == (3, 3, 5)
    # Bins of (cos + 1) / 2 * 4 over [-1, 1): cos 0.6 -> bin 3; cos -1 -> bin 0; cos 0 -> bin 2; exact -> bin 4.
    assert counts[0, 0].round(2).tolist() == [0, 0, 0, 1, 3]  # title zinc + 2 abstract zinc, absorption
    assert counts[1, 0].round(2).tolist() == [1, 0, 2, 0, 0]  # vitamin, bone bone
    assert counts[2].sum() == 0 and counts[:, 1:].sum() == 0  # empty document, padded query slots
    assert query.mask.tolist() == [True, False, False]
    assert query.idf[0] == pytest.approx(math.log1p((3 - 1 + 0.5) / (1 + 0.5)))


def test_unknown_words_match_only_themselves(tiny_index):
    stats, embeddings = tiny_index
    stats = build_stats("v", [Document("a", "", "qwerty"), Document("b", "", "asdfgh")])
    config = DRMMConfig(n_bins=5, query_len=1)
    counts = np.expm1(
        HistogramBuilder(stats, embeddings, config).query("qwerty", np.array([0, 1])).histograms.astype(np.float64)
    )
    # Both words are UNK to the embeddings: an exact match for the same term, cosine 0 (bin 2) otherwise.
    assert counts[0, 0].round(2).tolist() == [0, 0, 0, 0, 1]
    assert counts[1, 0].round(2).tolist() == [0, 0, 1, 0, 0]


def test_drmm_gates_terms_by_idf_and_ignores_padding():
    model = DRMM(DRMMConfig(n_bins=4, query_len=3))
    histograms = torch.rand(2, 3, 4)
    idf = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    z = model.matching(histograms)[:, :, 0]
    gates = torch.softmax(model.gate * idf[0, :2], dim=0)
    scores = model(histograms, idf, mask)
    assert scores[0].item() == pytest.approx((gates * z[0, :2]).sum().item(), abs=1e-6)
    assert scores[1].item() == pytest.approx(z[1, 0].item(), abs=1e-6)
    empty = model(histograms, idf, torch.zeros(2, 3, dtype=torch.bool))
    assert empty.tolist() == [0.0, 0.0]
    (scores.sum() + empty.sum()).backward()  # a query without terms must not poison the gradients
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_drmm_learns_exact_matches_and_its_checkpoint_round_trips(tmp_path):
    vocab = [f"w{i}" for i in range(40)]
    rng = np.random.default_rng(0)
    docs, candidates, queries = [], [], {}
    for q in range(16):
        word = vocab[q]
        rows = []
        for i in range(10):
            body = " ".join(rng.choice(vocab[16:], size=8))
            docs.append(Document(f"q{q}-d{i}", "", f"{word} {body}" if i < 3 else body))
            rows.append(len(docs) - 1)
        grades = np.array([1] * 3 + [0] * 7)
        queries[f"q{q}"] = word
        candidates.append(
            QueryCandidates(
                f"q{q}",
                np.zeros(7, np.int64),
                [docs[r].doc_id for r in rows],
                np.array(rows),
                np.zeros((10, 0), np.float32),
                np.ones(10, np.float32),
                grades,
            )
        )
    stats = build_stats("v", docs)
    vectors = rng.normal(size=(len(vocab) + 2, 4)).astype(np.float32)
    embeddings = Embeddings(vectors, ["<pad>", "<unk>", *vocab], "e")
    builder = HistogramBuilder(stats, embeddings, DRMMConfig(query_len=3))
    inputs = build_histograms(candidates, queries, builder, progress=False)
    qrels = {c.query_id: {d: 1 for d, g in zip(c.doc_ids, c.grades) if g} for c in candidates}
    result = train_drmm(
        candidates[:12],
        inputs[:12],
        candidates[12:],
        inputs[12:],
        qrels,
        TrainConfig(max_epochs=8, patience=8, batch_size=8, learning_rate=0.2),
        builder.config,
        progress=False,
    )
    assert result.best_dev > 0.9  # random vectors: cosine bins are noise, exact matches are the signal
    path = tmp_path / "drmm.pt"
    DRMMCheckpoint(builder.config, result.model.state_dict(), "e", "v", {"dev_ndcg20": result.best_dev}).save(path)
    with pytest.raises(ValueError, match="drmm checkpoint, not a delta model"):
        Checkpoint.load(path)
    loaded = DRMMCheckpoint.load(path)
    assert loaded.config == builder.config
    for a, b in zip(drmm_scores(loaded.build_model(), inputs[12:]), drmm_scores(result.model, inputs[12:])):
        assert a == pytest.approx(b)
