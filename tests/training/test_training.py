"""Training and evaluation pieces on tiny inputs: triples, loss, a few SGD steps, metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.data import (
    QueryCandidates,
    TrainingError,
    Triples,
    batch_inputs,
    sample_groups,
    sample_triples,
    scaled_relevance,
    select_features,
)
from training.evaluate import evaluate_runs, markdown_table, reverse_doc_id_scores
from training.metrics import PAPER_NDCG20, TREC_NDCG20, mean_metric, per_query, run_from_scores, write_trec_run
from training.train import (
    TrainConfig,
    TrainOverrides,
    fit_pairwise,
    model_score_fn,
    pairwise_hinge_loss,
    score_candidates,
    softmax_loss,
    train_epoch,
    train_model,
)
from worker.ensemble import ensemble_scores
from worker.model import VARIANTS, DeltaConfig, DeltaModel


def _candidates(
    grades: list[int], bm25: list[float] | None = None, query_id: str = "q1", n_lex: int = 3
) -> QueryCandidates:
    n = len(grades)
    return QueryCandidates(
        query_id=query_id,
        query_rows=np.array([2, 3, 0, 0, 0, 0, 0]),
        doc_ids=[f"D{i}" for i in range(n)],
        stats_rows=np.arange(n),
        lex=np.arange(n * n_lex, dtype=np.float32).reshape(n, n_lex),
        bm25=np.asarray(bm25 if bm25 is not None else [float(n - i) for i in range(n)], dtype=np.float32),
        grades=np.asarray(grades),
    )


class _Table:
    """DocumentRows stand-in over an explicit [n_docs, 50] table."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __getitem__(self, stats_rows):
        return self.rows[stats_rows]


class _Rows:
    """DocumentRows stand-in: stats row i has tokens i+2, i+3 then padding."""

    def __getitem__(self, rows):
        out = np.zeros((len(rows), 50), dtype=np.int64)
        out[:, 0] = np.asarray(rows) + 2
        out[:, 1] = np.asarray(rows) + 3
        return out


def test_scaled_relevance_follows_section_4_1():
    # grades 2, 1, 0: rel = 2/3, 1/3, 0 -> srel = 1 + 99 rel, and 0 for non-relevant
    assert scaled_relevance(np.array([2, 1, 0])) == pytest.approx([1 + 66.0, 1 + 33.0, 0.0])


def test_triples_are_balanced_and_weighted():
    cand = _candidates([2, 1, 1, 0, 0, 0, 0, 0])
    triples = sample_triples([cand], np.random.default_rng(0), max_positives=None)
    srel = scaled_relevance(cand.grades)
    # 3 relevant documents each meet one negative; the grade-2 one also meets one grade-1 document.
    assert len(triples.query) == 4
    assert all(cand.grades[p] > cand.grades[n] for p, n in zip(triples.positive, triples.negative))
    assert triples.weight == pytest.approx(np.sqrt(srel[triples.positive] - srel[triples.negative]))
    negatives = [n for p, n in zip(triples.positive, triples.negative) if cand.grades[n] == 0]
    assert len(negatives) == 3 and all(cand.bm25[n] > 0 for n in negatives)


def test_triples_can_pair_each_positive_with_several_negatives():
    cand = _candidates([1, 1, 0, 0, 0, 0, 0, 0])
    triples = sample_triples([cand], np.random.default_rng(0), max_positives=None, negatives_per_positive=3)
    assert sorted(triples.positive.tolist()) == [0, 0, 0, 1, 1, 1]
    assert all(cand.grades[n] == 0 for n in triples.negative)


def test_triples_cap_positives_and_skip_queries_without_negatives():
    many = _candidates([1] * 10 + [0] * 10, query_id="many")
    no_negatives = _candidates([1, 1], query_id="none")
    triples = sample_triples([many, no_negatives], np.random.default_rng(0), max_positives=4)
    assert len(triples.query) == 4 and set(triples.query) == {0}
    with pytest.raises(TrainingError, match="no training triples"):
        sample_triples([no_negatives], np.random.default_rng(0))


def test_groups_put_each_relevant_document_first_with_its_negatives():
    cand = _candidates([2, 0, 1, 0, 0, 0, 1], bm25=[7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 0.0])  # D6 not retrieved
    groups = sample_groups([cand], np.random.default_rng(0), negatives_per_positive=3)
    assert groups.docs.shape == (3, 4)
    assert sorted(groups.docs[:, 0].tolist()) == [0, 2, 6]
    assert set(groups.docs[:, 1:].ravel().tolist()) <= {1, 3, 4, 5}  # grade 0 and retrieved
    assert groups.weight == pytest.approx(np.sqrt(scaled_relevance(cand.grades)[groups.docs[:, 0]]))
    with pytest.raises(TrainingError, match="no training groups"):
        sample_groups([_candidates([1, 1])], np.random.default_rng(0))


def test_softmax_loss():
    scores = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    weight = torch.tensor([1.0, 2.0])
    # -log softmax of the first column: log(e^2 + 2) - 2 and log 3
    expected = (math.log(math.exp(2) + 2) - 2 + 2 * math.log(3)) / 2
    assert softmax_loss(scores, weight).item() == pytest.approx(expected)


def test_triples_are_scored_all_positives_then_all_negatives():
    """The order the recipe's dropout draws were made in; changing it would change the trained weights."""
    seen = []

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        seen.append((query_index.tolist(), doc_index.tolist()))
        return weight * torch.arange(len(doc_index), dtype=torch.float32)

    weight = torch.nn.Parameter(torch.ones(1))
    triples = Triples(np.array([0, 1]), np.array([4, 5]), np.array([6, 7]), np.ones(2, np.float32))
    loss = train_epoch(
        torch.nn.Linear(1, 1),
        torch.optim.SGD([weight], lr=0.0),
        triples.as_groups(),
        score_pairs,
        "hinge",
        batch_size=8,
        epoch=1,
        progress=False,
    )
    assert seen == [([0, 1, 0, 1], [4, 5, 6, 7])]
    assert loss == pytest.approx(3.0)  # scores 0 1 | 2 3: margins 1 - 0 + 2 and 1 - 1 + 3


def test_train_config_names_the_losses_and_their_negatives():
    assert TrainConfig().negatives_drawn == 1 and TrainConfig(loss="softmax").negatives_drawn == 8
    assert TrainConfig(loss="softmax", negatives_per_positive=3).negatives_drawn == 3
    with pytest.raises(ValueError, match="unknown loss 'listnet'; choose one of"):
        TrainConfig(loss="listnet")


def test_train_overrides_replace_only_the_options_given():
    base = TrainConfig(max_epochs=3, patience=1, learning_rate=0.01, max_positives=4)
    config = TrainOverrides(max_epochs=5, loss="softmax", device=None).applied_to(base)
    assert config == TrainConfig(max_epochs=5, patience=1, learning_rate=0.01, max_positives=4, loss="softmax")
    assert TrainOverrides().applied_to(base) == base
    with pytest.raises(ValueError, match="unknown loss 'listnet'"):  # TrainConfig's own checks still run
        TrainOverrides(loss="listnet").applied_to(base)
    with pytest.raises(TypeError, match="max_epoch"):  # an option that is not a TrainConfig field
        TrainOverrides(**{"max_epoch": 2})


def test_a_loss_that_is_not_a_number_stops_training_with_the_fix():
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    candidates = [_candidates([1, 0, 0])]

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        return weight * torch.full((len(doc_index),), float("nan"))  # what a diverged model outputs

    with pytest.raises(TrainingError, match="loss became nan in epoch 1; lower the learning rate"):
        fit_pairwise(
            torch.nn.Linear(1, 1),
            optimizer,
            candidates,
            score_pairs,
            lambda: [np.zeros(3)],
            candidates,
            {"q1": {"D0": 1}},
            TrainConfig(max_epochs=2),
            progress=False,
        )


def test_unretrieved_relevant_documents_are_positives_not_negatives():
    cand = _candidates([1, 0, 0, 1], bm25=[3.0, 2.0, 1.0, 0.0])  # D3 was added, not retrieved
    triples = sample_triples([cand], np.random.default_rng(1), max_positives=None)
    assert set(triples.negative) <= {1, 2}


def test_select_features_picks_lex_columns_by_name():
    candidates = [_candidates([1, 0], n_lex=3)]  # columns 0 1 2 / 3 4 5
    (picked,) = select_features(candidates, ["a", "b", "c"], ["c", "a"])
    np.testing.assert_array_equal(picked.lex, [[2, 0], [5, 3]])
    assert select_features(candidates, ["a", "b", "c"], [])[0].lex.shape == (2, 0)
    with pytest.raises(ValueError, match=r"\['d'\] were not computed"):
        select_features(candidates, ["a", "b", "c"], ["a", "d"])


def test_pairwise_hinge_loss():
    positive = torch.tensor([2.0, 0.5, 0.0])
    negative = torch.tensor([0.0, 0.0, 0.5])
    weight = torch.tensor([1.0, 2.0, 3.0])
    # margins: max(0, 1-2+0)=0, max(0, 1-0.5)=0.5, max(0, 1+0.5)=1.5 -> (0 + 1.0 + 4.5) / 3
    assert pairwise_hinge_loss(positive, negative, weight).item() == pytest.approx(5.5 / 3)


def test_batch_inputs_stack_docs_queries_and_lex():
    cands = [_candidates([1, 0, 0]), _candidates([0, 1], query_id="q2")]
    docs, queries, lex = batch_inputs(cands, _Rows(), np.array([0, 1]), np.array([2, 1]))
    assert docs.shape == (2, 50) and queries.shape == (2, 7) and lex.shape == (2, 3)
    assert docs[0, 0] == 2 + 2 and lex[1].tolist() == cands[1].lex[1].tolist()


def _query_word_problem() -> tuple[np.ndarray, list[QueryCandidates], _Table, dict[str, dict[str, int]]]:
    """24 queries of one word each; their 4 relevant documents (of 20) contain it. Vectors, candidates, rows, qrels."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 300)).astype(np.float32)
    vectors[0] = 0

    def query(qid: str, word: int) -> QueryCandidates:
        n = 20
        rows = np.zeros((n, 50), dtype=np.int64)
        rows[:, :10] = rng.integers(10, 60, size=(n, 10))
        grades = np.zeros(n, dtype=np.int64)
        grades[:4] = 1
        rows[:4, 3] = word
        return QueryCandidates(
            qid,
            np.array([word, 0, 0, 0, 0, 0, 0]),
            [f"{qid}-d{i}" for i in range(n)],
            np.arange(n),
            np.zeros((n, 0), np.float32),
            np.ones(n, np.float32),
            grades,
        ), rows

    built = [query(f"q{i}", 2 + i % 8) for i in range(24)]
    # Give every query's documents their own stats rows in one shared table.
    candidates, offset = [], 0
    for cand, rows in built:
        candidates.append(
            QueryCandidates(
                cand.query_id,
                cand.query_rows,
                cand.doc_ids,
                np.arange(offset, offset + len(rows)),
                cand.lex,
                cand.bm25,
                cand.grades,
            )
        )
        offset += len(rows)
    table = _Table(np.concatenate([rows for _, rows in built]))
    qrels = {c.query_id: {d: int(g) for d, g in zip(c.doc_ids, c.grades) if g} for c in candidates}
    return vectors, candidates, table, qrels


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["hinge", "softmax"])
def test_a_few_epochs_learn_to_prefer_the_relevant_token(loss: str):
    """Relevant documents contain the query word; training must rank them first on dev."""
    vectors, candidates, table, qrels = _query_word_problem()
    config = DeltaConfig(**VARIANTS["delta-32"], dropout=0.0)
    result = train_model(
        config,
        vectors,
        candidates[:16],
        candidates[16:],
        qrels,
        table,
        TrainConfig(max_epochs=6, patience=6, batch_size=16, learning_rate=0.05, loss=loss),
        progress=False,
    )
    assert result.best_dev > 0.9
    assert len(result.history) == 6 and result.best_epoch >= 1
    curve = result.curve()
    assert curve["best_dev"] == round(result.best_dev, 4) == max(curve["dev_per_epoch"])
    assert curve["dev_per_epoch"][curve["best_epoch"] - 1] == curve["best_dev"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_on_cuda_learns_and_returns_a_cpu_model():
    """``TrainConfig(device="cuda")`` (``esrr train --device cuda``): the batches, the loss weights and the dev
    scorer follow the model onto the GPU, and the best model comes back on the CPU, where checkpoints are
    saved from, scoring dev as the GPU measured it. The run does not follow the CPU's, even without dropout:
    Adagrad's first steps are lr * sign(gradient), so kernel-level differences in tiny gradient entries
    (cuDNN's convolutions use TF32) flip whole steps (on an H100: epoch losses 3.78, 0.95 against 3.34, 0.0)."""
    vectors, candidates, table, qrels = _query_word_problem()
    config = DeltaConfig(**VARIANTS["delta-32"], dropout=0.0)
    dev = candidates[16:]
    result = train_model(
        config,
        vectors,
        candidates[:16],
        dev,
        qrels,
        table,
        TrainConfig(max_epochs=4, patience=4, batch_size=16, learning_rate=0.05, device="cuda"),
        progress=False,
    )
    assert result.best_dev > 0.9
    assert {tensor.device.type for tensor in result.model.state_dict().values()} == {"cpu"}
    assert result.model.embeddings.device.type == "cpu"
    on_cpu = score_candidates(model_score_fn(result.model), dev, table)
    assert mean_metric(PAPER_NDCG20, qrels, dev, on_cpu) == pytest.approx(result.best_dev, abs=1e-6)


def test_paper_and_trec_ndcg_differ_only_in_gain():
    qrels = {"q": {"a": 2, "b": 1}}
    run = {"q": {"b": 2.0, "a": 1.0, "c": 0.5}}
    # DCG with gains 2^rel-1: b at rank 1 (gain 1), a at rank 2 (gain 3): 1 + 3/log2(3); ideal 3 + 1/log2(3)
    paper = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    trec = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert per_query(PAPER_NDCG20, qrels, run)["q"] == pytest.approx(paper)
    assert per_query(TREC_NDCG20, qrels, run)["q"] == pytest.approx(trec)


def test_queries_without_hits_score_zero():
    assert per_query(TREC_NDCG20, {"q": {"a": 1}, "r": {"b": 1}}, {"q": {"a": 1.0}}) == {"q": 1.0, "r": 0.0}


def test_run_file_ties_break_by_decreasing_doc_id(tmp_path):
    path = tmp_path / "x.run"
    write_trec_run({"q": {"MED-1": 1.0, "MED-2": 1.0, "MED-3": 2.0}}, path, "tag")
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["MED-3", "MED-2", "MED-1"]


def test_report_run_files_read_back_with_ir_measures(tmp_path):
    import ir_measures

    from training.evaluate import EvalRow, write_report
    from training.metrics import REPORT_MEASURES

    run = {"q1": {"MED-1": 2.0, "MED-2": 1.0}}
    name = "Delta-32-Lex3 (seed 14) + judged neighbours"
    rows = [EvalRow(name, {str(m): 0.5 for m in REPORT_MEASURES}, {}, {})]
    write_report(rows, {name: run}, tmp_path / "report", 0.3, "cmd", "machine", runs_dir=tmp_path / "runs")
    (path,) = (tmp_path / "runs").iterdir()
    assert path.name == "Delta-32-Lex3_seed_14_judged_neighbours.run"
    read = [(d.query_id, d.doc_id, d.score) for d in ir_measures.read_trec_run(str(path))]
    assert read == [("q1", "MED-1", 2.0), ("q1", "MED-2", 1.0)]


def test_evaluation_table_marks_significance_against_bm25():
    cands = [_candidates([1, 0, 0, 0], query_id=f"q{i}") for i in range(12)]
    qrels = {c.query_id: {"D0": 1} for c in cands}
    bm25 = run_from_scores(cands, [np.array([0.0, 3.0, 2.0, 1.0]) for _ in cands])  # relevant doc last
    good = run_from_scores(
        cands,
        [
            np.array([9.0 if i % 3 else 2.5, 3.0, 2.0, 1.0])  # relevant first or second
            for i in range(len(cands))
        ],
    )
    uninformed = run_from_scores(cands, reverse_doc_id_scores(cands))
    rows = evaluate_runs({"BM25": bm25, "Model": good, "Uninformed": uninformed}, qrels)
    model = next(r for r in rows if r.name == "Model")
    assert model.means[str(TREC_NDCG20)] > 0.8 and model.p_values[str(TREC_NDCG20)] < 0.01
    table = markdown_table(rows, recall=1.0)
    assert "| Model |" in table and "+" in table and "Recall@500: 1.0000" in table


def test_ensemble_averages_scores_standardised_within_each_query():
    small = [np.array([0.0, 1.0, 2.0]), np.array([5.0, 5.0]), np.zeros(0)]
    large = [np.array([300.0, 100.0, 200.0]), np.array([1.0, 3.0]), np.zeros(0)]
    first, second, empty = ensemble_scores([small, large])
    z = np.array([-1.0, 0.0, 1.0]) * math.sqrt(1.5)  # (x - mean) / population std of 0, 1, 2
    np.testing.assert_allclose(first, (z + z[[2, 0, 1]]) / 2, rtol=1e-6)  # scale does not matter
    np.testing.assert_allclose(second, [-0.5, 0.5])  # a constant member adds zeros, not NaN
    assert empty.shape == (0,)
    np.testing.assert_allclose(ensemble_scores([large])[0], [1.2247449, -1.2247449, 0.0], rtol=1e-6)


def test_reverse_doc_id_is_numeric_aware():
    cand = _candidates([0, 0, 0])
    cand.doc_ids[:] = ["MED-9", "MED-10", "MED-100"]
    scores = reverse_doc_id_scores([cand])[0]
    assert list(np.argsort(-scores)) == [2, 1, 0]


def test_model_trains_with_lex_features_and_standardises_them():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 300)).astype(np.float32)
    vectors[0] = 0
    cands = [_candidates([1, 1, 0, 0, 0, 0], query_id=f"q{i}") for i in range(4)]
    qrels = {c.query_id: {"D0": 1, "D1": 1} for c in cands}
    config = DeltaConfig(**VARIANTS["delta-32-lex3"])
    result = train_model(config, vectors, cands, cands, qrels, _Rows(), TrainConfig(max_epochs=1), progress=False)
    lex = np.concatenate([c.lex for c in cands])
    assert result.model.lex_mean.numpy() == pytest.approx(lex.mean(axis=0))
    assert isinstance(result.model, DeltaModel)


def test_wmd_title_ranks_the_title_made_of_the_query_words_first() -> None:
    from es_rerank.embeddings import Embeddings
    from es_rerank.stats import Document, build_stats
    from training.evaluate import wmd_title_scores

    stats = build_stats(
        "v",
        [
            Document("a", "zinc absorption", "x"),
            Document("b", "vitamin d bone", "y"),
            Document("c", "unknownword", "z"),
        ],
    )
    words = ["<pad>", "<unk>", "vitamin", "d", "bone", "zinc", "absorption"]
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(words), 8)).astype(np.float32)
    vectors[0] = 0
    embeddings = Embeddings(vectors, words, "e")
    cand = _candidates([0, 1, 0], query_id="q")
    cand.doc_ids[:] = ["a", "b", "c"]
    scores = wmd_title_scores([cand], {"q": "Vitamin D and bone"}, stats, embeddings)[0]
    assert scores[1] == pytest.approx(0.0, abs=1e-5)  # same words: zero transport cost
    assert scores[1] > scores[0] > scores[2]  # a title with no known word ranks last
