"""``esrr bench http`` reports the gateway's own CPU per search: the process serving the port, found in /proc."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from benchmarks.gateway_process import ProcessCpu, serving_pid
from benchmarks.http import gateway_processes
from es_rerank.cli import main
from tests.benchmarks.test_events_bench import served_tiny_home
from tests.conftest import esrr_serve

BURN = (
    "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    "print('done', flush=True)\ntime.sleep(60)"
)  # 0.3 s of CPU, then asleep


def test_the_process_listening_on_a_port_is_found():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert serving_pid(listening.getsockname()[1]) == os.getpid()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening
        assert serving_pid(closed.getsockname()[1]) is None


def test_a_processs_cpu_is_read_whole_and_per_thread():
    child = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"  # 0.3 s of CPU spent, then asleep
        cpu = ProcessCpu(child.pid)
        seconds, nanoseconds = cpu.seconds(), cpu.thread_ns()
        time.sleep(0.2)
        assert 0.25 <= seconds < 5 and 0.25e9 <= nanoseconds < 5e9
        assert cpu.thread_ns() - nanoseconds < 0.05e9  # asleep: nothing more
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_bench_http_reports_the_cpu_of_the_gateway_it_times(tmp_path, free_port):
    env, data = served_tiny_home(tmp_path)
    figures = tmp_path / "figures.json"
    with esrr_serve(env, free_port()) as (url, process):
        result = CliRunner().invoke(
            main, ["bench", "http", "--url", url, "--data", str(data), "--rounds", "3", "--json-out", str(figures)]
        )
        assert result.exit_code == 0, result.output
        named = CliRunner().invoke(
            main,
            ["bench", "http", "--url", url, "--data", str(data), "--rounds", "1", "--gateway-pid", str(process.pid)],
        )
        assert named.exit_code == 0, named.output
    report = json.loads(figures.read_text())
    assert report["gateway_cpu_of"].startswith(f"pid {process.pid} (serving port")
    per_round = report["gateway_cpu_ms_per_search"]["per_round"]
    assert len(per_round) == 3 and all(ms >= 0 for ms in per_round)
    assert 0 < report["gateway_cpu_ms"]["p50"] <= report["gateway_cpu_ms"]["p99"]
    assert "gateway CPU, 1 at a time" in result.output and f"pid {process.pid} (--gateway-pid)" in named.output
    gone = CliRunner().invoke(
        main, ["bench", "http", "--url", url, "--data", str(data), "--gateway-pid", str(process.pid)]
    )
    assert gone.exit_code == 2 and "no running process has pid" in gone.output


def test_a_gateway_elsewhere_is_not_measured():
    gateway, why = gateway_processes("http://10.1.2.3:9200", None)
    assert gateway is None and "pass --gateway-pid" in why
