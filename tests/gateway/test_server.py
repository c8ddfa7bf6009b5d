"""``esrr serve`` as a real server process on real sockets: slow clients, several processes on one port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.gateway_process import children
from benchmarks.slow_clients import _closed_by_server, hold_connections, time_searches
from index_setup.embedded_index import build_embedded_index
from tests.conftest import REPO, TINY_DOCS, esrr_serve


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("server")
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    return home


@contextmanager
def serving(home: Path, port: int, *args: str, **settings: object) -> Iterator[subprocess.Popen]:
    """``esrr serve --port PORT ARGS`` without a model, until it answers."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
        **{f"ESRR_{k.upper()}": str(v) for k, v in settings.items()},
    }
    with esrr_serve(env, port, *args) as (_, process):
        yield process


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_searches_answer_while_300_clients_hang_half_sent_and_idle_ones_are_closed(home, free_port):
    # The order of events, not a stopwatch: every search is answered while all 300 hanging connections are
    # still held (a server that serves only 100 at once would answer them only after its channel timeout
    # closed some); then the server closes them all. How long searches take meanwhile is
    # `esrr bench slow-clients`'s figure (docs/performance.md).
    port = free_port()
    with serving(home, port, gateway_channel_timeout_s=5):
        held, short = hold_connections("127.0.0.1", port, 300, timeout=30)  # waitress' default limit: 100
        try:
            assert short is None and len(held) == 300
            time.sleep(0.5)
            times = time_searches(f"http://127.0.0.1:{port}", 5, timeout=30)
            assert None not in times, times
            assert sum(map(_closed_by_server, held)) == 0  # answered before the server let any of them go
            closed: set[int] = set()
            for _ in range(120):  # looks every 0.5 s until the channel timeout has closed them all
                closed |= {index for index, sock in enumerate(held) if index not in closed and _closed_by_server(sock)}
                if len(closed) == 300:
                    break
                time.sleep(0.5)
            assert len(closed) == 300
        finally:
            for sock in held:
                sock.close()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads child processes from /proc")
@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_several_processes_share_the_port_and_one_that_dies_is_replaced(home, free_port):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(home, port, "--processes", "2") as parent:
        deadline = time.monotonic() + 30
        while len(children(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        first = children(parent.pid)
        assert len(first) == 2
        os.kill(min(first), signal.SIGKILL)
        answers = time_searches(url, 20, timeout=5)
        assert None not in answers  # the other process answers meanwhile
        while (len(children(parent.pid)) < 2 or min(first) in children(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        now = children(parent.pid)
        assert len(now) == 2 and min(first) not in now and max(first) in now
        body = json.load(urllib.request.urlopen(f"{url}/_search?q=bone", timeout=5))
        assert [hit["_id"] for hit in body["hits"]["hits"]] == ["b", "a"]
        parent.terminate()
        assert parent.wait(15) == 0
    assert not children(parent.pid)


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_bench_slow_clients_reports_held_connections_and_answered_searches(home, free_port, tmp_path):
    from click.testing import CliRunner

    from es_rerank.cli import main

    port, figures = free_port(), tmp_path / "slow.json"
    with serving(home, port):
        result = CliRunner().invoke(
            main,
            [
                "bench",
                "slow-clients",
                "--url",
                f"http://127.0.0.1:{port}",
                "--connections",
                "20",
                "--searches",
                "3",
                "--json-out",
                str(figures),
            ],
        )
    assert result.exit_code == 0, result.output
    assert "connections held half-sent: 20 of 20" in result.output and "searches answered: 3 of 3" in result.output
    assert json.loads(figures.read_text())["answered"] == 3


# Children that take a while to start (imports, opening the index) before ``serve_on`` installs their own
# SIGTERM handler; each prints its pid once it serves.
SLOW_STARTING_CHILDREN = textwrap.dedent("""
    import os, signal, sys, time
    from es_rerank.gateway.server import supervise

    def serve_one():
        time.sleep(3)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print(os.getpid(), flush=True)
        while True:
            time.sleep(0.1)

    sys.exit(supervise(2, serve_one))
""")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads child processes from /proc")
def test_a_stop_while_processes_are_still_starting_ends_them_all():
    # A child forked with the parent's SIGTERM handler ran it when stopped before it served: it signalled
    # its siblings and served on, and the parent waited for it for ever (the flaky replacement test above).
    parent = subprocess.Popen(
        [sys.executable, "-c", SLOW_STARTING_CHILDREN], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while len(children(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        started = children(parent.pid)
        assert len(started) == 2
        parent.terminate()  # both children are still in their 3 s start
        assert parent.wait(15) == 0
        assert parent.stdout.read() == ""  # neither went on to serve
        assert not any(Path(f"/proc/{pid}").exists() for pid in started)
    finally:
        if parent.poll() is None:
            for pid in children(parent.pid):
                os.kill(pid, signal.SIGKILL)
            parent.kill()
            parent.wait(10)
