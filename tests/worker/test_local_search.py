"""`esrr search` reranks the BM25 window in-process with the served checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from es_rerank.backends.base import text_hits
from es_rerank.cli import main
from es_rerank.lex import LEX3, lex_features
from es_rerank.payload import WorkerSetupError
from es_rerank.ranking.feedback import FeedbackParams, document_vectors, with_feedback
from es_rerank.ranking.guard import guarded
from es_rerank.ranking.pipeline import STAGES
from es_rerank.settings import CommonSettings
from es_rerank.text import embedding_tokens, tokenize
from tests.artifact_home import home_with_index, nfcorpus_with_dev_queries
from worker.ensemble import ensemble_scores
from worker.local import LocalReranker
from worker.model import Checkpoint
from worker.settings import WorkerSettings


def rerank_scores(query: str, hits, stats, settings: WorkerSettings) -> tuple[np.ndarray, str]:
    """The served model's scores of ``hits`` and its name, through the in-process reranker."""
    with LocalReranker(settings) as reranker:
        return reranker(query, hits, stats), reranker.name


def test_rerank_scores_equal_the_reference_model(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    query = "cancer risk and diet"
    hits = text_hits(backend, query, 20)
    assert len(hits) >= 5
    scores, model_name = rerank_scores(query, hits, backend.stats, WorkerSettings(home=home))
    assert model_name == "delta-32-lex3"

    model = Checkpoint.load(artifacts.checkpoint_path).build_model(artifacts.vectors)
    query_rows = np.zeros((len(hits), 7), dtype=np.int64)
    tokens = embedding_tokens(tokenize(query))[:7]
    query_rows[:, : len(tokens)] = artifacts.embedding_rows(tokens)
    doc_rows = np.zeros((len(hits), 50), dtype=np.int64)
    for i, hit in enumerate(hits):
        words = [backend.stats.vocab.terms[t] for t in hit.terms.first_ids]
        doc_rows[i, : len(words)] = artifacts.embedding_rows(words)
    lex = lex_features(backend.stats.vocab.lookup(tokenize(query)), [h.terms for h in hits], backend.stats, LEX3)
    with torch.inference_mode():
        expected = model(torch.from_numpy(doc_rows), torch.from_numpy(query_rows), torch.from_numpy(lex)).numpy()
    assert np.abs(scores - expected).max() < 1e-4


def test_search_command_prints_the_reranked_window(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    result = CliRunner().invoke(main, ["search", "cancer risk and diet", "-k", "5"], env={"ESRR_HOME": str(home)})
    assert result.exit_code == 0, result.output
    ranker, _, header, *rows = result.stdout.splitlines()
    assert header.split() == ["rank", "score", "BM25", "id", "title"]
    shown = [float(row.split()[1]) for row in rows]
    hits = text_hits(backend, "cancer risk and diet", 500)
    assert ranker == f"ranked by: BM25 top {len(hits)} → delta-32-lex3 + BM25 guard + candidate feedback"
    model_scores, _ = rerank_scores("cancer risk and diet", hits, backend.stats, WorkerSettings(home=home))
    settings = CommonSettings()
    blended = guarded(model_scores, np.array([h.score for h in hits]), settings.bm25_guard_weight)
    fed = with_feedback(
        blended, document_vectors([h.terms for h in hits], backend.stats), FeedbackParams.from_settings(settings)
    )
    # The model's scores, fed, lifted as one above the BM25 tail: their differences are the model's.
    best = sorted(fed, reverse=True)[:5]
    assert len(rows) == 5 and np.diff(shown) == pytest.approx(np.diff(best), abs=2e-3)
    assert shown[0] - best[0] == pytest.approx(min(h.score for h in hits) + 1.0 - min(fed), abs=2e-3)

    def ranker_of(*options: str) -> str:
        result = CliRunner().invoke(
            main, ["search", "cancer risk and diet", "-k", "5", *options], env={"ESRR_HOME": str(home)}
        )
        return result.stdout.splitlines()[0]

    assert ranker_of("--no-feedback") == f"ranked by: BM25 top {len(hits)} → delta-32-lex3 + BM25 guard"
    assert ranker_of("--no-rerank", "--no-feedback") == "ranked by: BM25 (no stage reordered the hits)"

    as_json = CliRunner().invoke(
        main, ["search", "cancer risk and diet", "-k", "5", "--json"], env={"ESRR_HOME": str(home)}
    )
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert body["esrr"]["ranker"] == "delta-32-lex3 + BM25 guard + candidate feedback"
    assert [h["_score"] for h in body["hits"]["hits"]] == pytest.approx(shown, abs=1e-3)  # the table's
    assert all(h["fields"]["reranked"] == [True] for h in body["hits"]["hits"])
    assert body["hits"]["total"] == {"value": len(hits), "relation": "gte" if len(hits) == 500 else "eq"}


def test_search_json_scores_descend_past_a_short_window(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    result = CliRunner().invoke(
        main, ["search", "cancer risk and diet", "-k", "8", "--window", "3", "--json"], env={"ESRR_HOME": str(home)}
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    scores = [h["_score"] for h in hits["hits"]]
    assert [h["fields"]["reranked"] for h in hits["hits"]] == [[True]] * 3 + [[False]] * 5
    assert scores == sorted(scores, reverse=True) and hits["max_score"] == scores[0]
    bm25 = [h["fields"]["bm25_score"][0] for h in hits["hits"][3:]]
    assert scores[3:] == pytest.approx(bm25)  # the tail is BM25's
    window_bm25 = [h["fields"]["bm25_score"][0] for h in hits["hits"][:3]]
    assert min(scores[:3]) == pytest.approx(min(window_bm25) + 1.0)  # one point above the window's lowest BM25
    table = CliRunner().invoke(
        main, ["search", "cancer risk and diet", "-k", "8", "--window", "3"], env={"ESRR_HOME": str(home)}
    )
    assert [float(row.split()[1]) for row in table.stdout.splitlines()[3:]] == pytest.approx(scores, abs=1e-3)


def test_an_ensemble_of_checkpoints_is_served_as_one_ranker(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    query = "cancer risk and diet"
    hits = text_hits(backend, query, 20)
    first = home / "models" / "delta-32-lex3.pt"
    second = artifacts.another_checkpoint(home / "models" / "delta-32-lex3-seed2.pt")
    singles = [
        rerank_scores(query, hits, backend.stats, WorkerSettings(home=home, checkpoint=path))[0]
        for path in (first, second)
    ]
    assert np.corrcoef(*singles)[0, 1] < 0.99  # two different rankers

    scores, name = rerank_scores(query, hits, backend.stats, WorkerSettings(home=home, checkpoint=f"{first},{second}"))
    assert name == "delta-32-lex3+delta-32-lex3-seed2"
    np.testing.assert_allclose(scores, ensemble_scores([[singles[0]], [singles[1]]])[0], atol=1e-5)

    result = CliRunner().invoke(
        main,
        ["search", query, "-k", "3", "--no-neighbours"],
        env={"ESRR_HOME": str(home), "ESRR_CHECKPOINT": f"{first},{second}"},
    )
    assert result.exit_code == 0, result.output
    assert "→ delta-32-lex3+delta-32-lex3-seed2 + BM25 guard + candidate feedback" in result.stdout.splitlines()[0]


def test_ensemble_members_must_read_the_same_inputs(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    hits = text_hits(backend, "cancer risk and diet", 5)
    other = artifacts.another_checkpoint(home / "models" / "delta-32.pt", lex_names=())
    settings = WorkerSettings(home=home, checkpoint=f"{home / 'models' / 'delta-32-lex3.pt'},{other}")
    with pytest.raises(WorkerSetupError, match=r"member .*delta-32.pt does not fit .*Lex features \[\] against"):
        rerank_scores("cancer risk and diet", hits, backend.stats, settings)
    missing = WorkerSettings(home=home, checkpoint=f"{home / 'models' / 'delta-32-lex3.pt'},{home / 'none.pt'}")
    with pytest.raises(WorkerSetupError, match="no model checkpoint at .*none.pt"):
        rerank_scores("cancer risk and diet", hits, backend.stats, missing)


def test_a_missing_model_names_the_folder_looked_in_and_both_fixes(tmp_path):
    from worker.runtime import load_checkpoints

    with pytest.raises(WorkerSetupError) as missing:
        load_checkpoints(WorkerSettings(home=tmp_path / "elsewhere"))
    message = str(missing.value)
    assert f"no model checkpoint at {tmp_path / 'elsewhere' / 'models' / 'delta-32-lex3.pt'}." in message
    assert "cd to the es-rerank folder or set ESRR_HOME=/path/to/artifacts" in message
    assert "train one there with `esrr train`" in message and "ESRR_CHECKPOINT" in message


def test_bench_search_times_every_stage_that_search_serves(artifacts, corpus_documents, tmp_path):
    home, _ = home_with_index(artifacts, corpus_documents, tmp_path)
    data = nfcorpus_with_dev_queries(tmp_path / "nfcorpus", ["cancer risk and diet", "zebra", "vitamin d and bone"])
    figures = tmp_path / "figures.json"
    result = CliRunner().invoke(
        main,
        ["bench", "search", "--data", str(data), "--rounds", "2", "--json-out", str(figures)],
        env={"ESRR_HOME": str(home)},
    )
    assert result.exit_code == 0, result.output
    body = json.loads(figures.read_text(encoding="utf-8"))
    assert body["ranker"] == "delta-32-lex3 + BM25 guard + candidate feedback" and body["queries"] == 3
    stages = body["stages"]
    assert list(stages) == [
        "retrieve",
        "features",
        "model",
        "guard",
        "feedback vectors",
        "feedback votes",
        "merge",
        "total",
        "feedback vectors, uncached",
    ]
    assert stages["retrieve"]["queries"] == stages["total"]["queries"] == 6  # 3 queries x 2 rounds
    assert stages["model"]["queries"] == stages["feedback vectors, uncached"]["queries"] == 4  # "zebra": no hit
    served = [row["share_of_total"] for name, row in stages.items() if name in STAGES]
    assert sum(served) <= 1.0 and stages["feedback vectors, uncached"]["share_of_total"] is None
    assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in stages.values())
    assert "feedback vectors" in result.output and "delta-32-lex3 + BM25 guard + candidate feedback" in result.output


def test_bench_search_without_an_index_is_a_clean_error(tmp_path):
    data = nfcorpus_with_dev_queries(tmp_path / "nfcorpus", ["cancer risk and diet"])
    result = CliRunner().invoke(
        main, ["bench", "search", "--data", str(data)], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "esrr index build" in result.output, result.output


def test_the_in_process_reranker_does_not_wait_for_company(artifacts, corpus_documents, tmp_path):
    home, backend = home_with_index(artifacts, corpus_documents, tmp_path)
    with LocalReranker(WorkerSettings(home=home, batch_wait_ms=5)) as reranker:
        assert reranker.runtime.batcher.max_wait_s == 0  # one caller, one request at a time
        assert len(reranker("cancer risk and diet", text_hits(backend, "cancer risk and diet", 20), backend.stats)) > 0
