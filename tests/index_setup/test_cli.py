"""The ``esrr index ...`` and ``esrr search`` commands on the embedded backend.

Each test gets its own ``ESRR_HOME`` (a temporary directory, ``conftest.py``) and a
corpus file of a few lines written by the test; commands run in-process through click's
``CliRunner``, except the torch check, which needs a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from es_rerank.cli import main
from es_rerank.versions import CURRENT_FILE

RECORDS = [
    {"_id": "d1", "title": "Vitamin D deficiency", "text": "Vitamin D deficiency causes bone loss."},
    {"_id": "d2", "title": "Curcumin and colorectal cancer", "text": "Turmeric curcumin slows tumour growth."},
    {"_id": "d3", "title": "Breast cancer screening", "text": "Mammography screening of women over 50."},
]
NEW_RECORDS = [
    {"_id": "n1", "title": "Green tea catechins", "text": "Green tea and cardiovascular risk."},
]


def write_corpus(path: Path, records, bad_line: str | None = None) -> Path:
    """A corpus.jsonl of ``records``; ``bad_line`` (if given) becomes line 2."""
    lines = [json.dumps(r) for r in records]
    if bad_line is not None:
        lines.insert(1, bad_line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl", RECORDS)


def embedded_root(home: Path) -> Path:
    return home / "indexes" / "embedded"


WRONG_FOLDER_FIX = "cd to the es-rerank folder or set ESRR_HOME=/path/to/artifacts"


def assert_clean_failure(result: Result, *fragments: str) -> None:
    """Exit code 1 with an ``Error:`` message holding ``fragments``, no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "Error: " in result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def assert_ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


# --- build / reindex ---------------------------------------------------------------


def test_build_prints_counts_and_the_load_report(esrr, home: Path, corpus: Path) -> None:
    out = assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    assert f"loading {corpus} into the embedded backend" in out
    assert "built embedded index v1: 3 documents," in out
    assert "read 3 records, skipped 0 malformed" in out
    root = embedded_root(home)
    assert (root / "v1" / "meta.json").is_file()
    assert (root / CURRENT_FILE).read_text().strip() == "v1"


@pytest.mark.parametrize("name", ["../evil", "", "CURRENT"])
def test_a_bad_version_name_is_refused_before_the_corpus_is_read(esrr, home: Path, corpus: Path, name: str) -> None:
    result = esrr("index", "build", "--data", str(corpus), "--version", name)
    assert result.exit_code == 2 and "bad version name" in result.output and "read 0 records" not in result.output
    assert not embedded_root(home).exists()


def test_build_with_an_existing_version_name_fails_cleanly(esrr, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    assert_clean_failure(esrr("index", "build", "--data", str(corpus), "--version", "v1"), "already exists")


def test_build_of_a_missing_file_is_a_usage_error(esrr, tmp_path: Path) -> None:
    result = esrr("index", "build", "--data", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_malformed_line_is_skipped_and_reported(esrr, tmp_path: Path) -> None:
    path = write_corpus(tmp_path / "corpus.jsonl", RECORDS, bad_line='{"_id": "bad", "title": broken')
    out = assert_ok(esrr("index", "build", "--data", str(path)))
    assert "3 documents" in out
    assert f"read 3 records, skipped 1 malformed (first: {path}, line 2: not valid JSON" in out


def test_strict_fails_naming_file_and_line(esrr, home: Path, tmp_path: Path) -> None:
    path = write_corpus(tmp_path / "corpus.jsonl", RECORDS, bad_line='{"_id": "bad", "title": broken')
    result = esrr("index", "build", "--data", str(path), "--strict", "--version", "v1")
    assert_clean_failure(result, f"{path}, line 2: not valid JSON", "or load without --strict to skip bad records")
    root = embedded_root(home)
    assert not (root / "v1").exists()  # the half-built version is gone
    assert not (root / CURRENT_FILE).exists()


def test_strict_reindex_failure_keeps_the_old_version(esrr, home: Path, corpus: Path, tmp_path: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    bad = write_corpus(tmp_path / "new.jsonl", NEW_RECORDS + RECORDS, bad_line="[1, 2]")
    assert_clean_failure(esrr("index", "reindex", "--data", str(bad), "--strict", "--version", "v2"), f"{bad}, line 2")
    assert not (embedded_root(home) / "v2").exists()
    assert "d2" in assert_ok(esrr("search", "curcumin"))


def test_a_damaged_corpus_file_keeps_the_served_version(esrr, home: Path, corpus: Path, tmp_path: Path) -> None:
    import gzip

    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    whole = gzip.compress(
        b"".join(
            json.dumps({"_id": f"n{i}", "title": "new", "text": "curcumin " * 50}).encode() + b"\n" for i in range(400)
        )
    )
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    result = esrr("index", "reindex", "--data", str(cut), "--version", "v2")  # not --strict: still refused
    assert_clean_failure(result, f"{cut}, after line", "truncated or corrupt", "the served index stays as it was")
    assert "read " not in result.output  # no load summary: nothing was loaded
    assert not (embedded_root(home) / "v2").exists()
    assert (embedded_root(home) / CURRENT_FILE).read_text(encoding="utf-8").strip() == "v1"


def test_a_duplicate_id_is_skipped_with_its_file_and_line_and_fails_a_strict_load(
    esrr, home: Path, tmp_path: Path
) -> None:
    path = write_corpus(tmp_path / "dup.jsonl", [*RECORDS, RECORDS[0]])
    assert_clean_failure(
        esrr("index", "build", "--data", str(path), "--strict"),
        f"{path}, line 4: document id 'd1' was read before",
        "remove or rename this one",
    )
    assert not (embedded_root(home) / CURRENT_FILE).exists()
    output = assert_ok(esrr("index", "build", "--data", str(path)))
    assert "built embedded index" in output and f"{len(RECORDS)} documents" in output
    assert f"skipped 1 malformed (first: {path}, line 4: document id 'd1' was read before" in output


def test_reindex_without_an_index_fails_cleanly(esrr, home: Path, corpus: Path) -> None:
    result = esrr("index", "reindex", "--data", str(corpus))
    assert_clean_failure(result, "no embedded index", "esrr index build")
    assert not embedded_root(home).exists() or not any(embedded_root(home).iterdir())


def test_reindex_swaps_to_the_new_version(esrr, corpus: Path, tmp_path: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    new = write_corpus(tmp_path / "new.jsonl", NEW_RECORDS)
    out = assert_ok(esrr("index", "reindex", "--data", str(new), "--version", "v2"))
    assert "built embedded index v2: 1 documents" in out
    assert "n1" in assert_ok(esrr("search", "green tea"))
    assert assert_ok(esrr("search", "curcumin")).strip() == "no hits"
    assert assert_ok(esrr("index", "versions")).splitlines() == ["  v1", "* v2"]


# --- search ----------------------------------------------------------------------------


def test_search_prints_ranked_hits(esrr, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus)))
    ranker, order, header, *lines = assert_ok(esrr("search", "cancer curcumin", "--no-feedback")).splitlines()
    assert ranker == "ranked by: BM25 (no stage reordered the hits)" and order == "ordered by score: BM25's"
    assert header.split() == ["rank", "score", "BM25", "id", "title"]
    assert len(lines) == 2
    ranks, scores, bm25, doc_ids = zip(
        *[(int(row[0]), float(row[1]), float(row[2]), row[3]) for row in (line.split() for line in lines)]
    )
    assert ranks == (1, 2)
    assert doc_ids == ("d2", "d3")
    assert scores[0] > scores[1] > 0 and scores == bm25  # no model trained: BM25 order and scores
    assert lines[0].endswith("Curcumin and colorectal cancer")
    assert len(assert_ok(esrr("search", "cancer", "-k", "1")).splitlines()) == 3 + 1
    assert assert_ok(esrr("search", "xylophone")).strip() == "no hits"


def test_search_says_how_to_train_a_model_only_when_it_would_rerank(esrr, home: Path, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus)))
    untrained = esrr("search", "cancer")
    assert "(not reranked: no model at" in untrained.stderr and "bash scripts/run.sh --train" in untrained.stderr
    assert f"no model at {home.absolute() / 'models' / 'delta-32-lex3.pt'}" in untrained.stderr
    assert WRONG_FOLDER_FIX in untrained.stderr
    for asked_for_none in (["--no-rerank"], ["--window", "0"]):
        assert "not reranked" not in esrr("search", "cancer", *asked_for_none).stderr


def test_search_json_is_the_table_as_an_elasticsearch_response(esrr, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    table = assert_ok(esrr("search", "cancer curcumin", "--no-feedback")).splitlines()[3:]
    result = esrr("search", "cancer curcumin", "--no-feedback", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    hits = body["hits"]["hits"]
    assert [h["_id"] for h in hits] == [line.split()[3] for line in table]
    assert [h["_score"] for h in hits] == pytest.approx([float(line.split()[1]) for line in table], abs=1e-3)
    assert [h["_source"]["title"] for h in hits][0] == "Curcumin and colorectal cancer"
    assert all(
        h["_index"] == "v1" and h["fields"]["bm25_score"] == [h["_score"]] and h["fields"]["reranked"] == [False]
        for h in hits
    )  # no model trained: BM25 scores, nothing reordered
    assert body["hits"]["total"] == {"value": 2, "relation": "eq"} and body["hits"]["max_score"] == hits[0]["_score"]
    assert body["esrr"] == {"ranker": "BM25"} and body["timed_out"] is False and body["took"] >= 0
    capped = json.loads(esrr("search", "cancer", "-k", "1", "--no-feedback", "--json").stdout)
    assert capped["hits"]["total"] == {"value": 1, "relation": "gte"}  # asked for 1, more may match
    empty = json.loads(esrr("search", "xylophone", "--json").stdout)
    assert empty["hits"] == {"total": {"value": 0, "relation": "eq"}, "max_score": None, "hits": []}


def test_search_without_an_index_fails_cleanly(esrr) -> None:
    assert_clean_failure(esrr("search", "cancer"), "no embedded index", "esrr index build")


def test_search_from_another_folder_names_where_it_looked_and_both_fixes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # ESRR_HOME unset: ./artifacts of this folder, which has none
    result = CliRunner().invoke(main, ["search", "cancer"], env={"ESRR_HOME": None, "ESRR_BACKEND": "embedded"})
    assert_clean_failure(
        result,
        f"no embedded index in {tmp_path / 'artifacts' / 'indexes' / 'embedded'}.",
        "ESRR_HOME defaults to ./artifacts of the current folder",
        WRONG_FOLDER_FIX,
        "build one there with `esrr index build`",
    )


def test_the_table_names_its_ranker_and_columns() -> None:
    from worker.search import TABLE_HEADER, ranked_by

    assert TABLE_HEADER.split() == ["rank", "score", "BM25", "id", "title"]
    ranker = "delta-32-lex3 + candidate feedback + judged neighbours"
    assert ranked_by(ranker, 500, 10) == [
        f"ranked by: BM25 top 500 → {ranker}",
        "ordered by score, the last ranker's; the BM25 column is each hit's first-stage score, for comparison",
    ]
    assert ranked_by("delta-32-lex3", 3, 8)[0] == "ranked by: BM25 top 3 → delta-32-lex3, then the rest in BM25's order"
    assert ranked_by("BM25", 500, 10) == ["ranked by: BM25 (no stage reordered the hits)", "ordered by score: BM25's"]


def test_search_of_a_damaged_version_fails_cleanly(esrr, home: Path, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    for path in (embedded_root(home) / "v1" / "stats").glob("*.npy"):
        path.unlink()
    assert_clean_failure(esrr("search", "cancer"), "v1", "esrr index build")
    assert_clean_failure(esrr("index", "stats"), "v1", "esrr index build")


# --- versions / use / prune / stats -------------------------------------------------------


@pytest.fixture
def three_versions(esrr, corpus: Path) -> None:
    for version in ("v1", "v2", "v3"):
        assert_ok(esrr("index", "build", "--data", str(corpus), "--version", version))


@pytest.mark.usefixtures("three_versions")
def test_versions_marks_the_served_one(esrr) -> None:
    assert assert_ok(esrr("index", "versions")).splitlines() == ["  v1", "  v2", "* v3"]


@pytest.mark.usefixtures("three_versions")
def test_use_switches_the_served_version(esrr, home: Path) -> None:
    assert assert_ok(esrr("index", "use", "v1")).strip() == "serving v1"
    assert (embedded_root(home) / CURRENT_FILE).read_text().strip() == "v1"
    assert assert_ok(esrr("index", "versions")).splitlines() == ["* v1", "  v2", "  v3"]
    assert assert_ok(esrr("index", "stats")).startswith("version v1:")


@pytest.mark.usefixtures("three_versions")
def test_use_of_a_missing_version_fails_cleanly(esrr, home: Path) -> None:
    assert_clean_failure(esrr("index", "use", "v9"), "no complete index version v9")
    assert (embedded_root(home) / CURRENT_FILE).read_text().strip() == "v3"


@pytest.mark.usefixtures("three_versions")
def test_use_refuses_a_version_whose_term_ids_would_break_a_search(esrr, home: Path) -> None:
    import numpy as np

    path = embedded_root(home) / "v1" / "stats" / "abstract_values.npy"
    values = np.load(path)
    values[:] = 10**8  # past any vocabulary: the first search would index past its tables
    np.save(path, values)
    assert_clean_failure(esrr("index", "use", "v1"), "abstract_values.npy holds term ids outside", "esrr index build")
    assert (embedded_root(home) / CURRENT_FILE).read_text().strip() == "v3"


@pytest.mark.usefixtures("three_versions")
def test_prune_deletes_old_versions_but_not_the_served_one(esrr, home: Path) -> None:
    assert_ok(esrr("index", "use", "v1"))
    assert assert_ok(esrr("index", "prune", "--keep", "1")).splitlines() == ["deleted v2"]
    assert assert_ok(esrr("index", "versions")).splitlines() == ["* v1", "  v3"]
    assert assert_ok(esrr("index", "prune", "--keep", "0")).splitlines() == ["deleted v3"]
    assert sorted(p.name for p in embedded_root(home).iterdir()) == [CURRENT_FILE, "v1"]
    assert "d2" in assert_ok(esrr("search", "curcumin"))


@pytest.mark.usefixtures("three_versions")
def test_prune_default_keeps_two(esrr) -> None:
    assert assert_ok(esrr("index", "prune")).splitlines() == ["deleted v1"]


@pytest.mark.usefixtures("three_versions")
def test_prune_default_comes_from_the_keep_versions_setting(home: Path) -> None:
    result = CliRunner().invoke(main, ["index", "prune"], env={"ESRR_HOME": str(home), "ESRR_ES_KEEP_VERSIONS": "3"})
    assert assert_ok(result) == ""


@pytest.mark.usefixtures("three_versions")
def test_prune_rejects_a_negative_keep(esrr) -> None:
    result = esrr("index", "prune", "--keep", "-1")
    assert result.exit_code == 2
    assert "--keep" in result.output
    assert assert_ok(esrr("index", "versions")).splitlines() == ["  v1", "  v2", "* v3"]


@pytest.mark.usefixtures("three_versions")
def test_a_pointer_to_a_missing_version_is_reported_and_stops_prune(esrr, home: Path) -> None:
    (embedded_root(home) / CURRENT_FILE).write_text("v9\n")  # e.g. a half-restored backup
    result = esrr("index", "versions")
    assert result.exit_code == 0 and "names v9, which is not a complete version here" in result.output
    assert_clean_failure(esrr("index", "prune", "--keep", "0"), "esrr index use VERSION")
    assert sorted(p.name for p in embedded_root(home).iterdir()) == [CURRENT_FILE, "v1", "v2", "v3"]


@pytest.mark.usefixtures("three_versions")
def test_interrupted_builds_are_listed_and_pruned(esrr, home: Path) -> None:
    (embedded_root(home) / "half" / "tantivy").mkdir(parents=True)  # a build killed outright: its lock is gone
    assert assert_ok(esrr("index", "versions")).splitlines() == [
        "  half (interrupted build; `esrr index prune` deletes it)",
        "  v1",
        "  v2",
        "* v3",
    ]
    assert assert_ok(esrr("index", "prune", "--keep", "3")).splitlines() == ["deleted half (an interrupted build)"]
    assert assert_ok(esrr("index", "versions")).splitlines() == ["  v1", "  v2", "* v3"]


def test_a_reindex_stopped_with_sigterm_removes_its_half_built_version(
    esrr, home: Path, corpus: Path, tmp_path: Path
) -> None:
    """`timeout`, `docker stop` and systemd send SIGTERM: the build cleans up as on Ctrl-C."""
    import signal
    import time

    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    slow = tmp_path / "slow.jsonl"
    os.mkfifo(slow)
    env = {**os.environ, "ESRR_HOME": str(home)}
    reindex = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from es_rerank.cli import main; main()",
            "index",
            "reindex",
            "--data",
            str(slow),
            "--version",
            "half",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with open(os.open(slow, os.O_RDWR), "w", encoding="utf-8") as feed:  # read-write: opens without a reader
        feed.write(json.dumps(NEW_RECORDS[0]) + "\n")
        feed.flush()
        deadline = time.monotonic() + 30
        while not (embedded_root(home) / "half" / "tantivy").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # now waiting for more of the corpus
        reindex.send_signal(signal.SIGTERM)
        output = reindex.communicate(timeout=30)[0].decode()
    assert reindex.returncode == 128 + signal.SIGTERM, output
    assert "Traceback" not in output
    assert sorted(p.name for p in embedded_root(home).iterdir()) == [CURRENT_FILE, "v1"]
    assert "d2" in assert_ok(esrr("search", "curcumin"))


def test_sigterm_exits_through_cleanup_only_inside_the_guard_and_never_unignored() -> None:
    import signal

    from es_rerank.cli_options import sigterm_as_exit

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        cleaned = []
        with pytest.raises(SystemExit) as stopped, sigterm_as_exit():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            finally:
                cleaned.append(True)
        assert stopped.value.code == 128 + signal.SIGTERM and cleaned == [True]
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored: long-running commands keep the default
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with sigterm_as_exit():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # a caller's choice stays
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_versions_without_an_index_prints_nothing(esrr) -> None:
    assert assert_ok(esrr("index", "versions")) == ""


@pytest.mark.usefixtures("three_versions")
def test_versions_without_a_current_pointer_lists_them_unmarked(esrr, home: Path) -> None:
    (embedded_root(home) / CURRENT_FILE).unlink()
    assert assert_ok(esrr("index", "versions")).splitlines() == ["  v1", "  v2", "  v3"]


def test_stats_prints_the_corpus_statistics(esrr, corpus: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(corpus), "--version", "v1"))
    lines = assert_ok(esrr("index", "stats")).splitlines()
    assert lines[0].startswith("version v1: 3 documents, ")
    assert lines[0].endswith(" terms")
    # Titles: 3 + 4 + 3 tokens; abstracts: 6 + 5 + 6.
    assert lines[1].split() == ["title", "average", "length", "3.3", "tokens"]
    assert lines[2].split() == ["abstract", "average", "length", "5.7", "tokens"]
    assert lines[3].split() == ["text", "average", "length", "9.0", "tokens"]


def test_stats_without_an_index_fails_cleanly(esrr) -> None:
    assert_clean_failure(esrr("index", "stats"), "esrr index build")


# --- help, and no torch -------------------------------------------------------------------


def test_help_lists_the_commands(esrr) -> None:
    out = assert_ok(esrr("--help"))
    for command in ("index", "search", "embeddings", "train", "eval", "worker", "bench"):
        assert f"  {command} " in out, command
    out = assert_ok(esrr("index", "--help"))
    for command in ("build", "reindex", "versions", "use", "prune", "stats"):
        assert f"  {command} " in out, command


TORCH_PROBE = """
import sys
from click.testing import CliRunner
from es_rerank.cli import main

runner = CliRunner()
for args in (["--help"], ["index", "--help"], ["index", "build", "--data", sys.argv[1]],
             ["search", "curcumin"], ["index", "stats"], ["index", "versions"]):
    result = runner.invoke(main, args)
    assert result.exit_code == 0, (args, result.output, result.exception)
print("torch" in sys.modules)
"""


def test_help_and_index_commands_do_not_import_torch(home: Path, corpus: Path) -> None:
    env = {**os.environ, "ESRR_HOME": str(home), "ESRR_BACKEND": "embedded"}
    done = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE, str(corpus)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_bad_setting_is_a_clear_error_not_a_traceback(home: Path) -> None:
    result = CliRunner().invoke(main, ["index", "versions"], env={"ESRR_HOME": str(home), "ESRR_BACKEND": "bogus"})
    assert_clean_failure(result, "ESRR_BACKEND")
    result = CliRunner().invoke(
        main, ["search", "x", "--no-rerank"], env={"ESRR_HOME": str(home), "ESRR_BROKER_URL": "http://x"}
    )
    assert_clean_failure(result, "ESRR_BROKER_URL")
    for name, value in [
        ("ESRR_DEVICE", "gpu"),
        ("ESRR_ES_TIMEOUT_S", "0"),
        ("ESRR_ES_URL", "notaurl"),
        ("ESRR_ES_URL", "http://127.0.0.1:99999"),
        ("ESRR_ES_URL", "http://a b:9200"),
        ("ESRR_BROKER_URL", "redis://127.0.0.1:6379/abc"),
        ("ESRR_BM25_B", "2"),
        ("ESRR_CHECKPOINT", str(home.parent)),
        ("ESRR_CHECKPOINT", ","),
        ("ESRR_CHECKPOINT", f"{home}/m.pt,{home}/../{home.name}/m.pt"),
        ("ESRR_BROKER_URL", "redis://:s3cret@127.0.0.1:99999/0"),
        ("ESRR_BROKER_URL", "redis://:s3cret@127.0.0.1:6379/0/x"),
        ("ESRR_ES_ALIAS", "ESRR"),
        ("ESRR_ES_ALIAS", "esrr docs"),
        ("ESRR_ES_TIMEOUT_S", "inf"),
        ("ESRR_ES_BULK_INITIAL_BACKOFF_S", "nan"),
        ("ESRR_HOME", ""),
        ("ESRR_FEEDBACK_WEIGHT", "1e39"),
    ]:
        result = CliRunner().invoke(main, ["search", "x", "--no-rerank"], env={"ESRR_HOME": str(home), name: value})
        assert_clean_failure(result, name)
        assert "s3cret" not in result.output


def test_a_bad_alias_stops_an_elasticsearch_build_before_any_request(home: Path, corpus: Path, free_port) -> None:
    env = {"ESRR_HOME": str(home), "ESRR_ES_ALIAS": "ESRR", "ESRR_ES_URL": f"http://127.0.0.1:{free_port()}"}
    result = CliRunner().invoke(main, ["index", "build", "--backend", "elasticsearch", "--data", str(corpus)], env=env)
    assert_clean_failure(result, "ESRR_ES_ALIAS", "upper-case", "such as esrr-docs")
    assert not home.exists()


def test_an_empty_home_is_an_error_not_the_current_directory(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["index", "build", "--data", str(corpus)], env={"ESRR_HOME": ""})
    assert_clean_failure(result, "ESRR_HOME", "is empty", "./artifacts")
    assert not (tmp_path / "indexes").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["index", "stats"],
        ["index", "versions"],
        ["index", "build", "--data", "CORPUS"],
        ["index", "reindex", "--data", "CORPUS"],
        ["index", "prune"],
        ["index", "use", "v1"],
        ["search", "vitamin", "--no-rerank"],
    ],
)
def test_every_elasticsearch_command_without_credentials_names_the_fix(
    home: Path, corpus: Path, es_stub: Callable[..., str], args: list[str]
) -> None:
    # An Elasticsearch 8 with security on, asked without credentials.
    secured = es_stub(
        401, {"error": {"type": "security_exception", "reason": "missing authentication credentials"}, "status": 401}
    )
    env = {"ESRR_HOME": str(home), "ESRR_BACKEND": "elasticsearch", "ESRR_ES_URL": secured}
    result = CliRunner().invoke(main, [str(corpus) if arg == "CORPUS" else arg for arg in args], env=env)
    # Most commands ask HEAD /_alias first, whose answer has no body, so only some can name the reason.
    assert_clean_failure(
        result, "refused a request with HTTP 401", "password it accepts in ESRR_ES_URL, e.g. https://USER:"
    )


def test_reindex_against_an_unreachable_cluster_is_a_clean_error(home: Path, corpus: Path, free_port) -> None:
    env = {"ESRR_HOME": str(home), "ESRR_ES_URL": f"http://127.0.0.1:{free_port()}"}
    result = CliRunner().invoke(
        main, ["index", "reindex", "--backend", "elasticsearch", "--data", str(corpus)], env=env
    )
    assert_clean_failure(result, "cannot reach Elasticsearch", "ESRR_ES_URL")


def test_a_damaged_embeddings_pointer_is_a_clean_error(home: Path) -> None:
    (home / "embeddings").mkdir(parents=True)
    (home / "embeddings" / CURRENT_FILE).write_text("../../elsewhere\n")
    result = CliRunner().invoke(main, ["embeddings", "info"], env={"ESRR_HOME": str(home)})
    assert_clean_failure(result, "CURRENT is damaged")


def test_a_named_checkpoint_that_does_not_exist_is_an_error_not_bm25(home: Path) -> None:
    env = {"ESRR_HOME": str(home), "ESRR_CHECKPOINT": str(home / "models" / "typo.pt")}
    assert_clean_failure(
        CliRunner().invoke(main, ["search", "x"], env=env), "typo.pt, which does not exist", "--no-rerank"
    )


def test_reordering_without_a_window_is_a_usage_error(home: Path) -> None:
    for option in ("--rerank", "--neighbours"):
        result = CliRunner().invoke(main, ["search", "x", "--window", "0", option], env={"ESRR_HOME": str(home)})
        assert result.exit_code == 2 and f"{option} reorders the top --window hits" in result.output, result.output


def test_a_query_without_words_is_a_usage_error(home: Path) -> None:
    for query in ("", "   ", "?!"):
        result = CliRunner().invoke(main, ["search", query], env={"ESRR_HOME": str(home)})
        assert result.exit_code == 2 and "has no words to search for" in result.output, result.output


def test_a_query_that_starts_with_a_dash_is_told_to_follow_the_double_dash(esrr, corpus: Path) -> None:
    for word in ("-statin", "-kinase"):  # no option at all; -k with the value "inase"
        result = CliRunner().invoke(main, ["search", word])
        assert result.exit_code == 2 and f'as in: esrr search -- "{word}"' in result.output
    result = CliRunner().invoke(main, ["search", "--", "-statin", "-k", "2", "--json"])
    assert result.exit_code == 2 and 'options before it, as in: esrr search -k 2 --json -- "-statin"' in result.output
    result = CliRunner().invoke(main, ["search", "--no-rerank", "--window=5", "-k", "3", "-statin"])
    assert 'as in: esrr search --no-rerank --window=5 -k 3 -- "-statin"' in result.output, result.output
    assert "goes after" not in CliRunner().invoke(main, ["search", "x", "-k", "-5"]).output  # a bad value, no query
    assert "Did you mean '--json'" in CliRunner().invoke(main, ["search", "x", "--jsn"]).output  # a typo stays one
    assert_ok(esrr("index", "build", "--data", str(corpus)))
    assert_ok(esrr("search", "--", "-curcumin"))


def test_search_limits_are_option_errors(home: Path) -> None:
    for args in (["-k", "0"], ["-k", "-5"], ["--window", "-1"], ["--window", "100000"]):
        result = CliRunner().invoke(main, ["search", "x", *args], env={"ESRR_HOME": str(home)})
        assert result.exit_code == 2 and "is not in the range" in result.output, result.output


@pytest.mark.parametrize(
    "args",
    [
        ["embeddings", "info", "-k", "0"],
        ["embeddings", "info", "-k", "1001"],
        ["worker", "start", "--concurrency", "0"],
    ],
)
def test_other_limits_are_option_errors_named_after_the_option(home: Path, args: list[str]) -> None:
    result = CliRunner().invoke(main, args, env={"ESRR_HOME": str(home)})
    assert result.exit_code == 2 and "is not in the range" in result.output and args[-2] in result.output, result.output


def test_a_home_that_is_a_file_is_a_clear_error(tmp_path: Path, corpus: Path) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a directory")
    for args in (
        ["index", "build", "--data", str(corpus)],
        ["search", "x"],
        ["index", "versions"],
        ["index", "prune"],
        ["embeddings", "info"],
    ):
        result = CliRunner().invoke(main, args, env={"ESRR_HOME": str(home)})
        assert_clean_failure(result, "ESRR_HOME", f"{home} is a file, not a folder")


def test_versions_on_an_empty_home_says_how_to_build_one(esrr) -> None:
    result = esrr("index", "versions")
    assert result.exit_code == 0 and "esrr index build" in result.output
