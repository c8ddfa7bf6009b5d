"""`esrr bench index`: a collection it cannot time, or a --json-out it cannot write, is a clean error first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DOCS = [
    ("D1", "Statins and breast cancer", "Statin use may delay breast cancer recurrence."),
    ("D2", "Vitamin D and colorectal cancer", "Serum vitamin D lowers colorectal cancer risk."),
]


def _collection(directory: Path, documents: list[tuple[str, str, str]], dev_judged: bool) -> Path:
    """A BEIR-layout NFCorpus copy: the queries are the titles, judged on dev only when ``dev_judged``."""
    (directory / "qrels").mkdir(parents=True)
    (directory / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": a}) + "\n" for i, t, a in documents), encoding="utf-8"
    )
    (directory / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"Q{i}", "text": t}) + "\n" for i, t, _ in documents), encoding="utf-8"
    )
    judged = ["query-id\tcorpus-id\tscore", *(f"Q{i}\t{i}\t2" for i, _, _ in documents)]
    for split in ("train", "dev", "test"):
        lines = judged if split != "dev" or dev_judged else judged[:1]
        (directory / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def test_bench_index_times_a_tiny_collection_and_writes_its_figures(esrr, tmp_path: Path):
    out = tmp_path / "new" / "figures.json"
    result = esrr(
        "bench",
        "index",
        "--data",
        str(_collection(tmp_path / "data", DOCS, dev_judged=True)),
        "--repeats",
        "1",
        "--rounds",
        "1",
        "--k",
        "10",
        "--json-out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text(encoding="utf-8"))["dev_queries"] == 2


@pytest.mark.parametrize(
    "documents, dev_judged, message",
    [
        (DOCS, False, "no dev query has both judgments (qrels/dev.tsv) and text"),
        ([], True, "corpus.jsonl holds no readable document"),
    ],
)
def test_bench_index_refuses_a_collection_it_cannot_time(
    esrr, tmp_path: Path, documents, dev_judged: bool, message: str
):
    data = _collection(tmp_path / "data", documents, dev_judged)
    result = esrr("bench", "index", "--data", str(data), "--repeats", "1", "--rounds", "1", "--k", "10")
    assert result.exit_code == 1 and message in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_bench_index_checks_json_out_before_the_timings(esrr, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark started before --json-out was checked")

    monkeypatch.setattr("index_setup.nfcorpus.NFCorpus.locate", started)
    blocker = tmp_path / "figures"
    blocker.write_text("kept\n", encoding="utf-8")
    result = esrr("bench", "index", "--json-out", str(blocker / "index.json"))
    assert result.exit_code == 1, result.output
    assert f"cannot write in {blocker}: {blocker} is a file, not a folder" in result.output
    assert "as --json-out" in result.output and blocker.read_text(encoding="utf-8") == "kept\n"
