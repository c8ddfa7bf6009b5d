"""Fixtures for backend tests: Elasticsearch-API servers for the whole session.

``es_url`` is ``ESRR_TEST_ES_URL`` when set (a cluster of yours); otherwise every test that
uses it runs three times, once per server started here on a free loopback port and stopped at
the end of the session:

- ``es7``: a real Elasticsearch 7.17 node (``scripts/engine.sh elasticsearch``, jars from
  Maven Central, see ``tests/engines.py``). Without Java or Maven its tests are skipped,
  except in CI (``CI`` set), where they fail; a node that was started and failed to answer
  within 30 s fails them everywhere.
- ``os2``: a real OpenSearch 2.19 node, the same way (``scripts/engine.sh opensearch``); its
  tests drive ``ESRR_BACKEND=opensearch`` (``es_backend``, ``es_client`` is an ``OpenSearchClient``).
- ``noida``: noida-db (PyPI), a fresh data directory. It is what the 8.x client meets as an
  Elasticsearch 8 here; a server that cannot start fails the tests loudly (with its output).

``gateway`` is the gateway in front of such an index, for the tests that drive it through the official client;
``embedded`` and ``elasticsearch`` hold the seeded corpus of ``test_query_semantics`` on either backend.
(``es_stub``, for the errors noida-db cannot produce, is in ``tests/conftest.py``.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import pytest
from elasticsearch import Elasticsearch
from werkzeug.serving import make_server

from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.backends.es_server import VersionedTransport
from es_rerank.backends.opensearch import OpenSearchBackend, OpenSearchClient
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.settings import CommonSettings
from index_setup.embedded_index import build_embedded_index
from index_setup.es_index import load_index
from tests.backends.test_query_semantics import CORPUS
from tests.engines import engine_for_tests, report
from tests.gateway.test_query_dsl import DOCS

START_TIMEOUT_S = 20.0


def _noida_command() -> list[str]:
    """The noida-db server binary itself (not the Python wrapper, which would not pass on SIGTERM)."""
    try:
        binary = resources.files("noida_db").joinpath("noida-db")
        if binary.is_file():
            return [str(binary)]
    except ModuleNotFoundError:
        pass
    wrapper = Path(sys.executable).with_name("noida-db")
    if wrapper.is_file():
        return [str(wrapper)]
    found = shutil.which("noida-db")
    if found:
        return [found]
    pytest.fail(
        "noida-db is not installed: `pip install -e .[test]`, or point ESRR_TEST_ES_URL at a running Elasticsearch 8",
        pytrace=False,
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server we started: its process group (it may have children), then wait."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _start_noida(base: Path, free_port: Callable[[], int]) -> tuple[subprocess.Popen, str]:
    command = _noida_command()
    failures = []
    for attempt in range(3):  # a free port can be taken between probing and binding
        port = free_port()
        data_dir = base / f"data-{attempt}"
        data_dir.mkdir()
        log_path = base / f"noida-{attempt}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    *command,
                    "start",
                    "--data-dir",
                    str(data_dir),
                    "--only",
                    "elasticsearch",
                    "--elasticsearch-port",
                    str(port),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers(url):
                return proc, url
            time.sleep(0.05)
        _stop(proc)
        output = log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        failures.append(f"attempt {attempt + 1} (port {port}, exit code {proc.returncode}):\n{output}")
    pytest.fail(
        "noida-db exited or did not answer HTTP within "
        f"{START_TIMEOUT_S:.0f} s{' (CI)' if os.environ.get('CI') else ''}; set ESRR_TEST_ES_URL "
        "to a running Elasticsearch 8 to test against it instead.\n" + "\n".join(failures),
        pytrace=False,
    )


def _start_engine(request: pytest.FixtureRequest, name: str, base: Path) -> Iterator[str]:
    engine = engine_for_tests(name, base)
    report(
        request.config,
        f"{PRODUCTS[name]} {engine.version} answered at {engine.url} {engine.start_s:.1f} s after its start",
    )
    try:
        yield engine.url
    finally:
        engine.stop()


PRODUCTS = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}
ES_SERVERS = ["external"] if os.environ.get("ESRR_TEST_ES_URL") else ["es7", "os2", "noida"]


@pytest.fixture(scope="session", params=ES_SERVERS)
def es_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]):
    """URL of an Elasticsearch-API server: ``ESRR_TEST_ES_URL``, real Elasticsearch 7.17, real OpenSearch 2.19,
    or noida-db."""
    if request.param == "external":
        yield os.environ["ESRR_TEST_ES_URL"].rstrip("/")
    elif request.param == "es7":
        yield from _start_engine(request, "elasticsearch", tmp_path_factory.mktemp("elasticsearch"))
    elif request.param == "os2":
        yield from _start_engine(request, "opensearch", tmp_path_factory.mktemp("opensearch"))
    else:
        proc, url = _start_noida(tmp_path_factory.mktemp("noida-db"), free_port)
        try:
            yield url
        finally:
            _stop(proc)


def backend_at(url: str) -> str:
    """The ESRR_BACKEND that serves the cluster at ``url``: opensearch when its ``GET /`` says so, else
    elasticsearch."""
    with urllib.request.urlopen(url, timeout=10) as response:
        version = json.load(response).get("version") or {}
    return "opensearch" if version.get("distribution") == "opensearch" else "elasticsearch"


@pytest.fixture(scope="session")
def es_backend(es_url: str) -> str:
    """``ESRR_BACKEND`` for ``es_url``'s server: elasticsearch (Elasticsearch 7.17, noida-db) or opensearch."""
    return backend_at(es_url)


@pytest.fixture(scope="session")
def es_backend_class(es_backend: str) -> type[ElasticsearchBackend]:
    """The backend class for ``es_url``'s server (``OpenSearchBackend`` is ``ElasticsearchBackend`` on its client)."""
    return OpenSearchBackend if es_backend == "opensearch" else ElasticsearchBackend


def engine_client(url: str, backend: str) -> Elasticsearch | OpenSearchClient:
    """A client for ``url``: elasticsearch-py 8 with the headers its server accepts (``VersionedTransport``), or for
    ``backend`` opensearch opensearch-py in that client's shape (``OpenSearchClient``)."""
    if backend == "opensearch":
        return OpenSearchClient(url, request_timeout=30)
    return Elasticsearch(url, request_timeout=30, transport_class=VersionedTransport)


@pytest.fixture(scope="session")
def es_client(es_url: str, es_backend: str):
    """``engine_client`` for ``es_url``'s server, for the session."""
    client = engine_client(es_url, es_backend)
    yield client
    client.close()


def _delete_alias_indices(client, alias: str) -> None:
    indices = client.indices.get(index=f"{alias}*").body
    for name in indices:
        client.options(ignore_status=404).indices.delete(index=name)


@pytest.fixture
def es_alias(es_client):
    """A unique alias name; its indices are deleted after the test (safe on a shared real cluster)."""
    alias = f"esrr-test-{uuid.uuid4().hex[:10]}"
    yield alias
    _delete_alias_indices(es_client, alias)


@pytest.fixture
def es_settings(es_url: str, es_backend: str, es_alias: str, tmp_path: Path):
    """CommonSettings for one test: its own ESRR_HOME, alias and small bulk chunks."""
    from es_rerank.settings import CommonSettings

    return CommonSettings(
        home=tmp_path / "home",
        backend=es_backend,
        es_url=es_url,
        es_alias=es_alias,
        es_bulk_chunk_size=20,
        es_bulk_initial_backoff_s=0.1,
    )


class DocsGateway(NamedTuple):
    """The gateway over an Elasticsearch index of ``DOCS``, and the names it serves."""

    client: Elasticsearch  # the official client of the gateway
    alias: str
    index: str  # the concrete index behind the alias


@pytest.fixture(scope="module")
def gateway(es_url, es_backend, es_backend_class, es_client, tmp_path_factory: pytest.TempPathFactory, free_port):
    """The gateway (the real app, served by werkzeug on a free loopback port) in front of an index of
    ``tests.gateway.test_query_dsl.DOCS``, the window reordered by the candidate feedback (a stage without a model);
    one per test module."""
    alias = f"esrr-test-app-{uuid.uuid4().hex[:10]}"
    settings = CommonSettings(home=tmp_path_factory.mktemp("home"), backend=es_backend, es_url=es_url, es_alias=alias)
    load_index(es_client, DOCS, settings, progress=False)
    backend = es_backend_class(es_client, alias, stats_root(settings))
    served = ServedSearch(SearchPipeline(backend, 10, feedback=FeedbackParams(2, 1.0)), 3600)
    server = make_server(
        "127.0.0.1", free_port(), create_app(served, GatewaySettings(**settings.model_dump())), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = Elasticsearch(f"http://127.0.0.1:{server.server_port}", request_timeout=30)
    yield DocsGateway(client, alias, backend.index)
    client.close()
    server.shutdown()
    thread.join(10)
    _delete_alias_indices(es_client, alias)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    """The embedded index of ``CORPUS`` (``test_query_semantics``, ``test_aggregations``); one per test module."""
    root = tmp_path_factory.mktemp("semantics")
    build_embedded_index(CORPUS, root, progress=False)
    return EmbeddedBackend.open_current(root)


@pytest.fixture(scope="module")
def elasticsearch(es_url, es_client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ElasticsearchBackend]:
    """An Elasticsearch index of ``CORPUS`` behind its backend, for the same tests; one per test module."""
    alias = f"esrr-test-dsl-{uuid.uuid4().hex[:10]}"
    settings = CommonSettings(home=tmp_path_factory.mktemp("home"), es_url=es_url, es_alias=alias)
    load_index(es_client, CORPUS, settings, progress=False)
    yield ElasticsearchBackend(es_client, alias, stats_root(settings))
    for name in es_client.indices.get(index=f"{alias}*").body:
        es_client.options(ignore_status=404).indices.delete(index=name)
