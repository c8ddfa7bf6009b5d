"""``esrr neighbours build`` and the votes in ``esrr search`` (embedded backend, a tiny NFCorpus)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.index_setup.test_cli import RECORDS, assert_clean_failure, assert_ok, write_corpus


@pytest.fixture
def nfcorpus(tmp_path: Path) -> Path:
    """BEIR layout: the three records, a train query judging d3 relevant, one dev and one test query."""
    root = tmp_path / "nfcorpus"
    (root / "qrels").mkdir(parents=True)
    write_corpus(root / "corpus.jsonl", RECORDS)
    queries = [
        {"_id": "T1", "text": "cancer curcumin"},
        {"_id": "T2", "text": "vitamin"},
        {"_id": "D1", "text": "cancer"},
        {"_id": "E1", "text": "bone"},
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    for split, rows in {
        "train": [("T1", "d3", 2), ("T2", "d1", 1)],
        "dev": [("D1", "d2", 1)],
        "test": [("E1", "d1", 1)],
    }.items():
        lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{g}" for q, d, g in rows)]
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def search_rows(output: str) -> tuple[str, list[str]]:
    """The line naming the ranker, and the ids of the rows (the table's header is the third line)."""
    ranker, _, _, *lines = output.splitlines()
    return ranker, [line.split()[3] for line in lines]


def test_build_writes_the_train_votes_and_search_uses_them(esrr, home: Path, nfcorpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))
    # --no-feedback: these checks are about the votes alone (candidate feedback: test_feedback_cli.py).
    header, bm25_order = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "neighbours" not in header and bm25_order == ["d2", "d3"]

    out = assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus), "--k", "5", "--weight", "3"))
    assert "2 train queries, 2 relevant judgments, k=5" in out
    saved = json.loads((home / "models" / "judged-neighbours.json").read_text(encoding="utf-8"))
    assert sorted(saved["qrels"]) == ["T1", "T2"]  # only the train split votes
    header, _ = search_rows(assert_ok(esrr("search", "cancer curcumin")))
    assert "BM25 + candidate feedback + judged neighbours" in header  # both by default, feedback first
    header, fused_order = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "BM25 + judged neighbours" in header
    assert fused_order == ["d3", "d2"]  # T1, the identical train query, judged d3 relevant
    _, top_one = search_rows(assert_ok(esrr("search", "cancer curcumin", "-k", "1", "--no-feedback")))
    assert top_one == ["d3"]  # the votes reorder the whole window, not only the k hits shown
    _, plain = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-neighbours", "--no-feedback")))
    assert plain == bm25_order
    _, bm25_window = search_rows(assert_ok(esrr("search", "cancer curcumin", "--window", "0")))
    assert bm25_window == bm25_order  # window 0: BM25 order, votes included
    result = esrr("search", "cancer curcumin", "--window", "0", "--neighbours")
    assert result.exit_code == 2 and "give a window above 0" in result.output

    assert "kept" in assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus), "--keep-existing"))
    assert json.loads((home / "models" / "judged-neighbours.json").read_text(encoding="utf-8"))["params"]["k"] == 5


def test_asking_for_votes_without_the_file_names_the_fix(esrr, nfcorpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))
    assert_clean_failure(esrr("search", "cancer", "--neighbours"), "judged-neighbours.json", "esrr neighbours build")


def test_a_damaged_votes_file_is_a_clean_search_error(esrr, home: Path, nfcorpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))
    (home / "models").mkdir(parents=True)
    (home / "models" / "judged-neighbours.json").write_text("{truncated", encoding="utf-8")
    assert_clean_failure(esrr("search", "cancer"), "judged-neighbours.json", "esrr neighbours build")


@pytest.mark.parametrize(
    "args, fragment", [(["--k", "0"], "--k"), (["--weight", "0"], "--weight"), (["--power", "nan"], "--power")]
)
def test_build_options_are_checked(esrr, nfcorpus: Path, args: list[str], fragment: str) -> None:
    result = esrr("neighbours", "build", "--data", str(nfcorpus), *args)
    assert result.exit_code == 2 and fragment in result.output


@pytest.mark.parametrize("rows", ["T1\td3\t0\n", "T1\td3\t2\nT2\td1\t0\n"])
def test_build_with_fewer_than_two_judged_train_queries_fails_cleanly(esrr, nfcorpus: Path, rows: str) -> None:
    (nfcorpus / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    assert_clean_failure(esrr("neighbours", "build", "--data", str(nfcorpus)), "votes need at least 2", "queries.jsonl")


@pytest.mark.parametrize("texts", [("?!", "..."), ("vitamin", "Vitamin")])
def test_build_with_train_queries_no_word_tells_apart_fails_cleanly(
    esrr, nfcorpus: Path, texts: tuple[str, str]
) -> None:
    """Punctuation only, or the same words: every IDF is 0, so no query could ever vote."""
    queries = [{"_id": "T1", "text": texts[0]}, {"_id": "T2", "text": texts[1]}]
    (nfcorpus / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    assert_clean_failure(esrr("neighbours", "build", "--data", str(nfcorpus)), "tells them apart", "queries.jsonl")


def test_votes_belong_to_the_corpus_they_were_built_for(esrr, home: Path, nfcorpus: Path, tmp_path: Path) -> None:
    """Built against the served index's corpus; another corpus whose ids collide does not get them."""
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))
    assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus)))
    corpus = json.loads((home / "models" / "judged-neighbours.json").read_text(encoding="utf-8"))["corpus"]
    assert corpus["n_docs"] == 3 and len(corpus["doc_ids_sha256"]) == 64 and corpus["build_id"]
    header, _ = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "BM25 + judged neighbours" in header
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))  # a reindex of the same documents
    header, _ = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "BM25 + judged neighbours" in header

    # Another collection that reuses the ids d1..d3 (and adds one): the votes would reorder it by name only.
    other = write_corpus(tmp_path / "other.jsonl", [*RECORDS, {"_id": "d4", "title": "Cancer", "text": "curcumin"}])
    assert_ok(esrr("index", "build", "--data", str(other)))
    header, order = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "BM25 (judged neighbours not applied: built for another corpus (3 documents" in header
    _, plain = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback", "--no-neighbours")))
    assert order == plain
    rebuilt = assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus), "--keep-existing"))
    assert "rebuilding" in rebuilt and "built for another corpus" in rebuilt and "4 documents" in rebuilt
    header, _ = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "BM25 + judged neighbours" in header


def test_a_votes_file_without_its_corpus_is_not_applied_and_keep_existing_rebuilds_it(
    esrr, home: Path, nfcorpus: Path
) -> None:
    assert_ok(esrr("index", "build", "--data", str(nfcorpus / "corpus.jsonl")))
    assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus)))
    path = home / "models" / "judged-neighbours.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    del saved["corpus"]  # as written before the votes recorded their corpus
    path.write_text(json.dumps(saved), encoding="utf-8")
    header, _ = search_rows(assert_ok(esrr("search", "cancer curcumin", "--no-feedback")))
    assert "judged neighbours not applied: the votes file does not say which corpus" in header
    assert "rebuilding" in assert_ok(esrr("neighbours", "build", "--data", str(nfcorpus), "--keep-existing"))
    assert "corpus" in json.loads(path.read_text(encoding="utf-8"))


def test_votes_are_not_built_against_an_index_of_another_corpus(esrr, nfcorpus: Path, tmp_path: Path) -> None:
    other = write_corpus(tmp_path / "other.jsonl", [{"_id": "x1", "title": "Cancer", "text": "curcumin"}])
    assert_ok(esrr("index", "build", "--data", str(other)))
    assert_clean_failure(
        esrr("neighbours", "build", "--data", str(nfcorpus)),
        "2 of the 2 documents judged relevant",
        "it holds another corpus",
        f"esrr index build --data {nfcorpus}",
    )
