"""``esrr bench attack`` against a gateway it starts on the tests' three-document index: the table's fields."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.attack import Bench, Outcome, Request
from benchmarks.chaos import free_port
from benchmarks.gateway_process import StartedGateway
from es_rerank.cli import main
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads the gateway's /proc")

FIELDS = {
    "row",
    "issue",
    "requests",
    "concurrency",
    "statuses",
    "cpu_ms",
    "cpu_ms_per_request",
    "wall_ms",
    "rss_before_mb",
    "rss_change_mb",
    "rss_peak_change_mb",
    "died",
    "restarted",
    "probe_before",
    "probe_during",
    "note",
    "max_response_bytes",
    "extra",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("attack")
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    return home


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_the_bench_reports_status_cpu_memory_and_the_probe_per_row(home, tmp_path):
    figures = tmp_path / "attack.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "attack",
            "--start",
            str(home),
            "--only",
            "invalid UTF-8",
            "--only",
            "in _count",
            "--only",
            "concurrent",
            "--only",
            "health",
            "--concurrent-searches",
            "30",
            "--distinct-queries",
            "6",
            "--concurrent-clients",
            "3",
            "--max-words",
            "40",
            "--heavy-clients",
            "0",
            "--trickle-connections",
            "0",
            "--timeout",
            "20",
            "--log-dir",
            str(tmp_path / "logs"),
            "--json-out",
            str(figures),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    rows = {row["row"]: row for row in report["rows"]}
    assert set(rows) == {
        "invalid UTF-8 in q=",
        "lone surrogate \\ud800 in _count",
        "3 clients, 30 concurrent query_string searches",
        "GET / vs /_esrr/health (the measured gateway)",
        "GET / vs /_esrr/health (a gateway that reranks, no worker)",
    }
    for row in rows.values():
        assert set(row) == FIELDS
        assert row["died"] is None and row["cpu_ms"] >= 0 and row["wall_ms"] > 0 and row["rss_before_mb"] > 10
        # How many probes fit before a row depends on the machine's speed (one every 0.1 s, each waiting for its
        # answer): one shows that the probe ran (a loaded machine answered 3 where the test once asked for 5).
        assert row["probe_before"]["n"] >= 1 and row["probe_before"]["p99_ms"] >= row["probe_before"]["p50_ms"]
    assert rows["invalid UTF-8 in q="]["statuses"] == {"400": 3} and rows["invalid UTF-8 in q="]["requests"] == 3
    searches = rows["3 clients, 30 concurrent query_string searches"]
    assert sum(searches["statuses"].values()) == 30 and searches["extra"]["wrong"] in range(31)
    assert rows["GET / vs /_esrr/health (the measured gateway)"]["extra"]["agree"] is True  # no model, both say so
    assert isinstance(rows["GET / vs /_esrr/health (a gateway that reranks, no worker)"]["extra"]["agree"], bool)
    assert (
        report["gateway"].startswith("esrr serve --processes 1 started by the bench")
        and "RLIMIT_AS 4 GiB" in report["gateway"]
    )
    assert "| invalid UTF-8 in q= | 400x3 |" in result.output


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_the_heaviest_row_floods_from_another_process_after_one_answer(home, tmp_path):
    figures = tmp_path / "heaviest.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "attack",
            "--start",
            str(home),
            "--only",
            "heaviest",
            "--max-words",
            "20",
            "--heavy-clients",
            "4",
            "--heavy-s",
            "2",
            "--concurrent-searches",
            "0",
            "--trickle-connections",
            "0",
            "--timeout",
            "20",
            "--log-dir",
            str(tmp_path / "logs"),
            "--json-out",
            str(figures),
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(figures.read_text())["rows"]
    assert row["row"] == "4 concurrent 20-word highlighted searches for 2 s (from another process)"
    assert row["died"] is None and row["requests"] > 0 and set(row["statuses"]) <= {"200", "429"}
    assert "heavy search process" in (tmp_path / "logs" / "gateway.log").read_text()  # esrr serve started it
    assert row["probe_before"]["n"] >= 5 and row["extra"]["probe_p99_ratio"] > 0


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_a_gateway_that_dies_is_noted_and_started_again_under_its_cap(home, tmp_path):
    env = {**os.environ, "ESRR_GATEWAY_RERANK": "false"}
    gateway = StartedGateway(home, free_port(), 3 << 30, env, tmp_path / "gateway.log").start()
    bench = Bench(gateway, timeout_s=10, before_s=0.5, settle_s=0.1)
    try:
        limits = Path(f"/proc/{gateway.pid}/limits").read_text()
        assert f"Max address space         {3 << 30}" in limits
        first = gateway.pid

        def kill() -> tuple[list[Outcome], str]:
            os.kill(first, signal.SIGKILL)
            gateway.popen.wait(10)
            return [Outcome("conn", 0.0)], "killed"

        result = bench.measure("killed", 32, 1, kill)
        assert result.died == "signal SIGKILL" and result.restarted == "it died"
        assert gateway.alive() and gateway.pid != first and gateway.starts == 2
        assert bench.client.send(Request("GET", "/_search?q=bone")).status == "200"
    finally:
        bench.close()
        gateway.stop()


def test_a_running_gateway_needs_its_pid():
    result = CliRunner().invoke(main, ["bench", "attack", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "--url needs --pid" in result.output
