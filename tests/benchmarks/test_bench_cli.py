"""`esrr bench score` and `esrr bench roundtrip`: bad options are clean errors before any timing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.cli import main


def test_bench_score_refuses_a_negative_seed():
    result = CliRunner().invoke(main, ["bench", "score", "--seed", "-1"])
    assert result.exit_code == 2 and "-1 is not in the range 0<=x<=4294967295" in result.output, result.output


@pytest.mark.parametrize("command", [["score"], ["roundtrip"]])
def test_a_json_out_under_a_file_fails_before_the_benchmark(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark started before --json-out was checked")

    monkeypatch.setattr("benchmarks.score.bench_vocab", started)
    monkeypatch.setattr("index_setup.nfcorpus.NFCorpus.locate", started)  # the round trip's first step
    blocker = tmp_path / "figures"
    blocker.write_text("kept\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["bench", *command, "--json-out", str(blocker / "rows.json")], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 1, result.output
    assert f"cannot write in {blocker}: {blocker} is a file, not a folder" in result.output
    assert "as --json-out" in result.output and blocker.read_text(encoding="utf-8") == "kept\n"
