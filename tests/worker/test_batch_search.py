"""`esrr batch-search`: every query of a file through the served pipeline, one TREC run out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ir_measures
import pytest
from click.testing import CliRunner

from es_rerank.cli import main
from index_setup.embedded_index import build_embedded_index


@pytest.fixture
def home(artifacts, corpus_documents, tmp_path: Path) -> Path:
    """The artifacts' home with a served embedded index of 30 documents."""
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    build_embedded_index(corpus_documents[:30], home / "indexes" / "embedded", version="local", progress=False)
    return home


def test_a_run_holds_what_search_serves_for_every_query(home: Path, corpus_documents, tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    texts = {"q1": "cancer risk and diet", "q2": corpus_documents[3].title, "blank": "?!"}
    queries.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in texts.items()), encoding="utf-8")
    runner, env = CliRunner(), {"ESRR_HOME": str(home)}
    result = runner.invoke(
        main, ["batch-search", str(queries), "--out", str(tmp_path / "run.trec"), "-k", "7"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "2 queries in " in result.output
    assert "2 ranked by delta-32-lex3 + BM25 guard + candidate feedback" in result.output
    assert "1 without a word to search for, left out of the run (e.g. blank)" in result.output
    run = list(ir_measures.read_trec_run(str(tmp_path / "run.trec")))
    lines = (tmp_path / "run.trec").read_text(encoding="utf-8").splitlines()
    assert all(line.split()[5] == "esrr" and line.split()[1] == "Q0" for line in lines)
    for query_id in ("q1", "q2"):
        ranked = [(d.doc_id, d.score) for d in run if d.query_id == query_id]
        assert len(ranked) == 7 and [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
        shown = runner.invoke(main, ["search", texts[query_id], "-k", "7", "--json"], env=env)
        hits = json.loads(shown.stdout)["hits"]["hits"]
        assert [d for d, _ in ranked] == [h["_id"] for h in hits]
        assert [s for _, s in ranked] == pytest.approx([h["_score"] for h in hits], abs=1e-5)
    assert not list(tmp_path.glob(".run.trec.partial"))


def test_tsv_queries_and_bm25_order_without_the_model(home: Path, tmp_path: Path) -> None:
    queries = tmp_path / "queries.tsv"
    queries.write_text("a\tcancer\nno tab\nb\tdiet\n", encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["batch-search", str(queries), "--out", str(tmp_path / "bm25.run"), "--window", "0"],
        env={"ESRR_HOME": str(home)},
    )
    assert result.exit_code == 0, result.output
    assert "2 ranked by BM25" in result.output
    assert "read 2 records, skipped 1 malformed (first: " in result.output and "left out of the run" in result.output


@pytest.mark.parametrize(
    "content, args, fragment",
    [
        ("", [], "holds no query"),
        ("no tab here\n", [], "skipped 1 malformed (first: "),
        ("a\tcancer\n", ["--tag", "two words"], "a run tag is one word"),
    ],
)
def test_bad_input_is_a_clean_error(home: Path, tmp_path: Path, content: str, args: list[str], fragment: str) -> None:
    queries = tmp_path / "queries.tsv"
    queries.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(
        main, ["batch-search", str(queries), "--out", str(tmp_path / "r.run"), *args], env={"ESRR_HOME": str(home)}
    )
    assert result.exit_code != 0 and fragment in result.output and "Traceback" not in result.output
    assert not (tmp_path / "r.run").exists()
