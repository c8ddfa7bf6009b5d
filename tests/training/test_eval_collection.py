"""`esrr eval --data` on judged collections other than NFCorpus: BEIR folders with a test split only, or a
corpus with queries and TREC qrels named apart; the served stages as rows, and the verdict as the last line."""

from __future__ import annotations

import gzip
import json
from itertools import groupby
from pathlib import Path

import click
import ir_measures
import numpy as np
import pytest
from click.testing import CliRunner

from es_rerank.cli import main
from es_rerank.cli_options import load_settings
from es_rerank.ranking.assemble import served_pipeline
from tests.artifact_home import home_without_index
from tests.conftest import ranked
from training.collection import CollectionError, JudgedCollection
from training.commands.evaluate import evaluation_collection
from training.evaluate import EvalRow, verdict, wins_ties_losses
from worker.local import LocalReranker
from worker.settings import WorkerSettings


def _beir(directory: Path, documents, n_queries: int = 12) -> Path:
    """A BEIR folder with only a test split: each query is a document's title, that document relevant."""
    (directory / "qrels").mkdir(parents=True)
    with gzip.open(directory / "corpus.jsonl.gz", "wt", encoding="utf-8") as out:
        for doc in documents:
            out.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.abstract}) + "\n")
    with (directory / "queries.jsonl").open("w", encoding="utf-8") as out:
        for i in range(n_queries):
            out.write(json.dumps({"_id": f"q{i}", "text": documents[2 * i].title}) + "\n")
    rows = [f"q{i}\t{documents[2 * i].doc_id}\t1" for i in range(n_queries)]
    (directory / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8"
    )
    return directory


def _read_run(path: Path) -> dict[str, dict[str, float]]:
    return {
        query_id: {doc.doc_id: doc.score for doc in docs}
        for query_id, docs in groupby(ir_measures.read_trec_run(str(path)), key=lambda doc: doc.query_id)
    }


def test_eval_data_reports_the_served_stages_and_ends_with_the_verdict(artifacts, corpus_documents, tmp_path):
    home = home_without_index(artifacts, tmp_path)
    data = _beir(tmp_path / "my-collection", corpus_documents[:40])
    env = {"ESRR_HOME": str(home)}
    result = CliRunner().invoke(main, ["eval", "--data", str(data), "--out", str(tmp_path / "report")], env=env)
    assert result.exit_code == 0, result.output
    last = result.output.rstrip().splitlines()[-1]
    assert last.startswith(
        (
            "the reranker helps this collection (my-collection test): served default: ",
            "the reranker does not help this collection (my-collection test)",
        )
    ), last
    assert "delta-32-lex3 + BM25 guard + candidate feedback, nDCG@10 " in last and "queries better" in last
    table = (tmp_path / "report" / "table.md").read_text(encoding="utf-8")
    for row in (
        "| BM25 |",
        "| served: BM25 + candidate feedback |",
        "| served: delta-32-lex3 |",
        "| served: delta-32-lex3 + BM25 guard |",
        "| served default: delta-32-lex3 + BM25 guard + candidate feedback |",
    ):
        assert row in table
    assert "| nDCG@10 | NDCG@20 (2^rel-1) |" in table and "12 judged queries" in table
    assert table.rstrip().endswith(last)  # the report keeps the verdict
    assert "Uninformed" not in table and "DRMM" not in table  # the paper's rows only with --baselines
    results = json.loads((tmp_path / "report" / "results.json").read_text(encoding="utf-8"))
    assert results["verdict"] == last and results["served_default"].startswith("served default: ")
    wins = {r["name"]: r["wins_ties_losses"] for r in results["rows"]}
    assert wins["BM25"] is None and sum(wins[results["served_default"]]) == 12
    assert (tmp_path / "report" / "chart.png").stat().st_size > 0
    assert (tmp_path / "report" / "per-query.png").stat().st_size > 0

    # The served default row is what search serves over the same index, query by query.
    (index,) = [d for d in (home / "indexes").iterdir() if d.name.startswith("eval-my-collection-")]
    assert not (home / "indexes" / "embedded").exists()  # no served index was built or changed
    settings = WorkerSettings(home=home)
    from es_rerank.backends.embedded import EmbeddedBackend

    pipeline = served_pipeline(
        settings, 500, backend=EmbeddedBackend.open_current(index), local_reranker=lambda: LocalReranker(settings)
    )
    try:
        runs = _read_run(
            home / "runs" / index.name / "test" / "served_default_delta-32-lex3_BM25_guard_candidate_feedback.run"
        )
        queries = JudgedCollection.locate(data).queries
        for query_id, text in queries.items():
            ranking = ranked(pipeline, text, 500)
            served = {item.hit.doc_id: item.combined for item in ranking.ranked}  # before the lift
            assert served.keys() == runs[query_id].keys()
            assert [runs[query_id][d] for d in served] == pytest.approx(list(served.values()), abs=1e-5)
    finally:
        pipeline.reranker.close()


def test_eval_reads_a_corpus_file_with_tsv_queries_and_trec_qrels(artifacts, corpus_documents, tmp_path):
    home = home_without_index(artifacts, tmp_path)
    beir = _beir(tmp_path / "beir", corpus_documents[:40], n_queries=8)
    queries = tmp_path / "topics.tsv"
    queries.write_text("".join(f"q{i}\t{corpus_documents[2 * i].title}\n" for i in range(8)), encoding="utf-8")
    qrels = tmp_path / "judgments.qrels"
    qrels.write_text("".join(f"q{i} 0 {corpus_documents[2 * i].doc_id} 2\n" for i in range(8)), encoding="utf-8")
    result = CliRunner().invoke(
        main,
        [
            "eval",
            "--data",
            str(beir / "corpus.jsonl.gz"),
            "--queries",
            str(queries),
            "--qrels",
            str(qrels),
            "--out",
            str(tmp_path / "r"),
        ],
        env={"ESRR_HOME": str(home)},
    )
    assert result.exit_code == 0, result.output
    assert "8 judged queries" in (tmp_path / "r" / "table.md").read_text(encoding="utf-8")
    assert result.output.rstrip().splitlines()[-1].startswith("the reranker ")


def test_a_collection_that_cannot_be_evaluated_names_the_fix(corpus_documents, tmp_path):
    data = _beir(tmp_path / "c", corpus_documents[:20], n_queries=4)
    with pytest.raises(CollectionError, match=r"no judgments for the dev split .* holds test: pass --split test"):
        JudgedCollection.locate(data, "dev")
    (data / "queries.jsonl").unlink()
    with pytest.raises(CollectionError, match="pass the queries with --queries FILE"):
        JudgedCollection.locate(data)
    (data / "queries.jsonl").write_text(json.dumps({"_id": "other", "text": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(CollectionError, match="none of the 4 queries judged in .* has a text"):
        JudgedCollection.locate(data)
    result = CliRunner().invoke(
        main, ["eval", "--data", str(data), "--split", "dev"], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 1 and "pass --split test" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(
        main, ["eval", "--qrels", str(data / "qrels" / "test.tsv")], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 2 and "given with --data" in result.output


def test_a_workspace_of_another_collection_has_no_nfcorpus_splits_and_says_so(
    artifacts, corpus_documents, tmp_path, monkeypatch
):
    monkeypatch.setenv("ESRR_HOME", str(home_without_index(artifacts, tmp_path)))
    data = _beir(tmp_path / "c", corpus_documents[:20], n_queries=4)
    work, queries, qrels, name = evaluation_collection(JudgedCollection.locate(data), "test", load_settings())
    assert (len(queries), len(qrels), name) == (4, 4, "c") and work.nfcorpus_or_none is None
    with pytest.raises(click.UsageError, match=r"reads another collection .*drop --data to use NFCorpus"):
        _ = work.nfcorpus


def test_a_changed_corpus_gets_an_index_of_its_own(corpus_documents, tmp_path):
    data = _beir(tmp_path / "c", corpus_documents[:20], n_queries=4)
    first = JudgedCollection.locate(data).index_name()
    assert first.startswith("eval-c-") and first == JudgedCollection.locate(data).index_name()
    with gzip.open(data / "corpus.jsonl.gz", "at", encoding="utf-8") as out:
        out.write(json.dumps({"_id": "new", "title": "t", "text": "a"}) + "\n")
    assert JudgedCollection.locate(data).index_name() != first


def _row(name: str, values: list[float]) -> EvalRow:
    return EvalRow(
        name, {"nDCG@10": float(np.mean(values))}, {"nDCG@10": {f"q{i}": v for i, v in enumerate(values)}}, {}
    )


@pytest.mark.parametrize(
    "served, p, start",
    [
        (
            [0.6] * 10,
            0.001,
            "the reranker helps this collection (c test): served default: x, nDCG@10 0.6000 against "
            "BM25's 0.5000 (+20.0%, paired t-test p=0.001; 10 queries better, 0 equal, 0 worse).",
        ),
        (
            [0.4] * 10,
            0.001,
            "the reranker does not help this collection (c test), it hurts it: served default: x, nDCG@10 0.4000",
        ),
        (
            [0.52] * 10,
            0.2,
            "the reranker does not help this collection (c test) measurably: served default: x, nDCG@10 0.5200",
        ),
    ],
)
def test_the_verdict_says_helps_hurts_or_within_chance(served: list[float], p: float, start: str):
    base = _row("BM25", [0.5] * 10)
    row = _row("served default: x", served)
    row.p_values["nDCG@10"] = p
    row.wins = wins_ties_losses(row.per_query["nDCG@10"], base.per_query["nDCG@10"])
    assert verdict(row, base, "c test").startswith(start)


def test_wins_ties_and_losses_count_queries():
    assert wins_ties_losses({"a": 0.5, "b": 0.2, "c": 0.1}, {"a": 0.4, "b": 0.2, "c": 0.3}) == (1, 1, 1)
