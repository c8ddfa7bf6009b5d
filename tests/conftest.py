"""Shared fixtures: a tiny corpus (hand-checkable statistics and Lex numbers), free ports, Elasticsearch stubs."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from es_rerank.cli import main
from es_rerank.ranking.answer import answer
from es_rerank.ranking.pipeline import Ranking, SearchPipeline, StageClock, no_clock
from es_rerank.ranking.request import text_request
from es_rerank.stats import CorpusStats, Document, build_stats

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

REPO = Path(__file__).resolve().parents[1]

# Fixtures every room shares, kept in modules of their own: the artifact home and a real broker.
pytest_plugins = ("tests.artifact_home", "tests.real_broker")


def ranked(
    pipeline: SearchPipeline, text: str, k: int, clock: StageClock = no_clock, window: int | None = None
) -> Ranking:
    """The ranking of the request a client sends for ``text`` and ``k`` hits (``window``: ext.esrr.window_size),
    answered as ``_search`` answers it."""
    return answer(pipeline, text_request(text, k, window), clock=clock).ranking


# Lexical tokens: a 3 title + 6 abstract, b 2 + 7, c 2 + 0 (no abstract).
TINY_DOCS = (
    Document("a", "Vitamin D deficiency", "Vitamin D deficiency causes bone loss."),
    Document("b", "Bone health", "Calcium and vitamin K support bone health."),
    Document("c", "Breast cancer", ""),
)


@pytest.fixture
def tiny_docs() -> list[Document]:
    """Three documents; see ``TINY_DOCS``."""
    return list(TINY_DOCS)


@pytest.fixture
def tiny_stats(tiny_docs: list[Document]) -> CorpusStats:
    """``build_stats`` over the tiny corpus, version ``"tiny"``."""
    return build_stats("tiny", tiny_docs)


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A function returning a loopback TCP port that is free right now (for servers the tests start)."""

    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    return pick


class QuietElasticsearchHandler(BaseHTTPRequestHandler):
    """A loopback handler whose every method runs ``answer``; ``reply`` sends what the ES 8 client accepts."""

    def answer(self) -> None:
        raise NotImplementedError

    def _any_method(self) -> None:
        self.answer()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _any_method

    def reply(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """Send ``status`` and ``payload`` (none to a HEAD) with the ``X-Elastic-Product`` header the client wants."""
        self.send_response(status)
        for name, value in {
            "Content-Type": "application/json",
            "X-Elastic-Product": "Elasticsearch",
            **(headers or {}),
        }.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def official_client(app, port: int) -> Iterator[Elasticsearch]:
    """The official Elasticsearch client of a Flask ``app`` served over HTTP on loopback ``port``."""
    from elasticsearch import Elasticsearch
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = Elasticsearch(f"http://127.0.0.1:{server.server_port}", request_timeout=30)
    try:
        yield client
    finally:
        client.close()
        server.shutdown()
        thread.join(10)


def serve_on_loopback(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    """``handler`` served from a daemon thread on a free loopback port, over HTTPS when ``tls`` is given."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_server(server: ThreadingHTTPServer) -> None:
    """Stop a ``serve_on_loopback`` server and close its socket."""
    server.shutdown()
    server.server_close()


@pytest.fixture
def es_stub():
    """A function starting a loopback server that answers every request with ``status`` and ``body``; returns its URL.

    A dict body goes out as JSON with the ``X-Elastic-Product`` header the 8.x client
    insists on; a str body goes out as it is.
    """
    servers: list[ThreadingHTTPServer] = []

    def start(status: int, body: dict | str) -> str:
        payload = (json.dumps(body) if isinstance(body, dict) else body).encode()

        class Answer(QuietElasticsearchHandler):
            def answer(self) -> None:
                self.reply(status, payload)

        servers.append(serve_on_loopback(Answer))
        return f"http://127.0.0.1:{servers[-1].server_port}"

    yield start
    for server in servers:
        stop_server(server)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def esrr(home: Path):
    """Run ``esrr ARGS...`` in-process with ``ESRR_HOME=home``."""
    runner = CliRunner()
    env = {"ESRR_HOME": str(home), "ESRR_BACKEND": "embedded"}

    def run(*args: str) -> Result:
        return runner.invoke(main, list(args), env=env)

    return run


@contextmanager
def esrr_serve(
    env: dict[str, str], port: int, *args: str, log_path: Path | None = None, ready_path: str = "/"
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``esrr serve --port PORT ARGS`` with exactly ``env``, until ``ready_path`` answers (any status); yields
    its URL and process, and stops it after. Its output goes to ``log_path`` (a temporary file if None),
    never to a pipe nobody reads, and is shown if it exits before it answers."""
    with tempfile.TemporaryDirectory() as scratch:
        log_path = log_path or Path(scratch) / "gateway.log"
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", "from es_rerank.cli import main; main()", "serve", "--port", str(port), *args],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    pytest.fail(f"esrr serve exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
                try:
                    urllib.request.urlopen(f"{url}{ready_path}", timeout=30).close()
                    break
                except urllib.error.HTTPError:  # a 503 is an answer too
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail("esrr serve did not answer within 60 s")
                    time.sleep(0.1)
            yield url, process
        finally:
            process.terminate()
            process.wait(15)


# A test that asks for a service's fixture carries the service's marker, so that
# `pytest -m "not broker"` (and `scripts/test.sh --fast`) leaves it out even where the
# test itself forgot the marker.
SERVICE_FIXTURES = {
    "es_url": "es",  # noida-db and a real Elasticsearch 7.17 (tests/backends/conftest.py)
    "redis_url": "broker",  # a real Redis (tests/real_broker.py)
    "private_redis": "broker",
    "postgres_server": "postgres",  # Debian's postgresql (tests/learning/conftest.py)
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the services its fixtures start (see ``SERVICE_FIXTURES``)."""
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & SERVICE_FIXTURES.keys():
            item.add_marker(SERVICE_FIXTURES[fixture])
