"""The programs under examples/ run as a user runs them (``python examples/NAME.py ...``) over the tiny corpus.

Each prints what the library or the gateway ranks; the expected lines are computed here through the
same public calls, so a program that drifts from the library fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.settings import CommonSettings
from index_setup.embedded_index import build_embedded_index
from tests.conftest import REPO, TINY_DOCS, ranked

QUERY = "vitamin d and bone"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ESRR_HOME with the embedded index of the tiny corpus."""
    home = tmp_path_factory.mktemp("examples")
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    return home


def run_example(name: str, *args: str, home: Path) -> list[str]:
    """The lines ``python examples/NAME ARGS`` prints with ``ESRR_HOME=home`` (a failure shows its output)."""
    done = _ran(name, *args, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def _ran(name: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``python examples/NAME ARGS`` with ``ESRR_HOME=home`` and no other ``ESRR_*`` setting, run to its end."""
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / name), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_library_example_prints_the_pipelines_ranking(home: Path) -> None:
    lines = run_example("rank_with_the_library.py", QUERY, home=home)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    feedback = FeedbackParams.from_settings(CommonSettings(home=home))
    ranking = ranked(SearchPipeline(backend, 50, feedback=feedback), QUERY, 10)
    assert "candidate feedback" in ranking.ranker and [item.hit.doc_id for item in ranking.ranked] == ["a", "b"]
    assert lines[0] == f"index v1: 2 hits, ranker {ranking.ranker}"
    assert [line.split()[-1] for line in lines[1:]] == ["a", "b"]
    assert [float(line.split()[1]) for line in lines[1:]] == pytest.approx(
        [item.score for item in ranking.ranked], abs=1e-3
    )


def test_the_entry_point_example_ranks_as_the_served_pipeline(home: Path, tmp_path: Path) -> None:
    lines = run_example("python_entry_point.py", str(home), QUERY, home=tmp_path)  # home= wins over ESRR_HOME
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    feedback = FeedbackParams.from_settings(CommonSettings(home=home))
    ranking = ranked(SearchPipeline(backend, 500, feedback=feedback), QUERY, 10)  # no model, no votes file there
    assert ranking.ranker == "BM25 + candidate feedback"
    assert lines[0] == f"index v1: 2 hits, ranker {ranking.ranker}"
    assert [line.split()[-1] for line in lines[1:]] == [item.hit.doc_id for item in ranking.ranked] == ["a", "b"]
    assert [float(line.split()[1]) for line in lines[1:]] == pytest.approx(
        [item.score for item in ranking.ranked], abs=1e-3
    )


def test_the_entry_point_example_says_why_a_home_cannot_be_searched(tmp_path: Path) -> None:
    done = _ran("python_entry_point.py", str(tmp_path), QUERY, home=tmp_path)
    assert done.returncode == 1 and not done.stdout, done.stdout + done.stderr
    assert f"cannot search {tmp_path}: no embedded index in" in done.stderr and "esrr index build" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_official_client_example_searches_a_running_gateway(home: Path) -> None:
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    pipeline = SearchPipeline(backend, 10, feedback=FeedbackParams(2, 1.0))
    server = make_server(
        "127.0.0.1", 0, create_app(ServedSearch(pipeline, 3600), GatewaySettings(home=home)), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        lines = run_example(
            "search_with_elasticsearch_client.py", f"http://127.0.0.1:{server.server_port}", QUERY, home=home
        )
    finally:
        server.shutdown()
        thread.join(10)
    ranking = ranked(pipeline, QUERY, 10)
    assert lines[0] == f"index v1: 2 hits, ranker {ranking.ranker}"
    assert [line.split()[3] for line in lines[1:]] == ["a", "b"]
    assert [line.split()[2] for line in lines[1:]] == ["reranked", "reranked"]  # the feedback reordered the window
    assert lines[1].endswith("Vitamin D deficiency") and lines[2].endswith("Bone health")
