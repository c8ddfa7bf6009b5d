"""Statistics damaged under a serving gateway, and a damaged ``CURRENT``: refused or reported, never a crash.

The truncation runs against a real ``esrr serve`` process, since the failure it guards
against (SIGBUS on a mapped page past the end of a file cut short) ends the process
that reads the page: in this test process it would end the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.cli import main
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import CorpusStats, Document, StatsError
from index_setup.embedded_index import build_embedded_index
from tests.conftest import REPO, TINY_DOCS, esrr_serve


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return tmp_path


def _stats(home: Path, version: str = "v1") -> Path:
    return home / "indexes" / "embedded" / version / "stats"


def _client(home: Path, check_every_s: float = 5.0):
    served = ServedSearch(
        SearchPipeline(EmbeddedBackend.open_current(home / "indexes" / "embedded"), 10), check_every_s
    )
    return create_app(served, GatewaySettings(home=home)).test_client()


def _rewrite_in_place(path: Path) -> None:
    """Change the last bytes of ``path`` without changing its size, as `dd conv=notrunc` would."""
    with open(path, "r+b") as file:
        file.seek(-4, os.SEEK_END)
        file.write(b"\x00\x00\x00\x00")


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@contextmanager
def _serving(home: Path, port: int) -> Iterator[tuple[str, subprocess.Popen]]:
    """``esrr serve`` over ``home``'s embedded index, BM25 only, until it answers."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ESRR_")}
    env.update(ESRR_HOME=str(home), ESRR_GATEWAY_RERANK="false", ESRR_GATEWAY_INDEX_CHECK_S="0", PYTHONPATH=str(REPO))
    with esrr_serve(env, port, ready_path="/_esrr/health") as served:
        yield served


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_a_statistics_file_cut_short_under_a_serving_gateway_is_refused_and_reported(tmp_path, free_port):
    # Enough documents that the hit's row pointer lies pages past the cut: the bytes of a cut page that
    # is still partly in the file read as zeros, a page wholly past the end raises SIGBUS.
    docs = [Document(f"d{i}", f"Document {i}", f"Abstract number {i}.") for i in range(1500)]
    docs.append(Document("bone", "Bone health", "Calcium and vitamin K support bone health."))
    build_embedded_index(docs, tmp_path / "indexes" / "embedded", version="v1", progress=False)
    home = tmp_path
    with _serving(home, free_port()) as (url, process):
        status, body = _get(f"{url}/_search?q=bone")
        assert status == 200 and [hit["_id"] for hit in body["hits"]["hits"]] == ["bone"]
        path = _stats(home) / "title_ptr.npy"
        assert path.stat().st_size > 2 * 4096
        os.truncate(path, 4096)  # in place: waits until the gateway gave its lease up, then cuts the mapped pages

        for route in ("/_search?q=bone", "/_esrr/health"):
            status, body = _get(f"{url}{route}")
            reason = body["error"]["reason"]
            assert status == 503, body
            assert "title_ptr.npy was" in reason and "cut short" in reason and "esrr index use" in reason
            assert str(home) not in json.dumps(body)  # file names, no paths
        assert process.poll() is None  # alive: before the check, this read ended the gateway (SIGBUS, exit 135)
        status, _ = _get(f"{url}/")
        assert status == 200


def test_statistics_rewritten_in_place_are_detected(home):
    client = _client(home)
    assert client.get("/_search?q=bone").status_code == 200
    _rewrite_in_place(_stats(home) / "title_values.npy")
    for route in ("/_search?q=bone", "/_esrr/health"):
        response = client.get(route)
        assert response.status_code == 503
        assert "title_values.npy was rewritten in place" in response.get_json()["error"]["reason"]


def test_a_change_of_mode_or_a_second_link_is_no_change_of_content(home, tmp_path):
    client = _client(home)
    for path in _stats(home).glob("*.npy"):
        path.chmod(0o444)  # what operations.md advises; it changes the ctime, not the content
        os.link(path, tmp_path / f"link-{path.name}")
    assert client.get("/_search?q=bone").status_code == 200
    assert client.get("/_esrr/health").get_json()["status"] == "green"


def test_a_version_changed_after_its_build_is_refused_when_opened(home):
    _rewrite_in_place(_stats(home) / "abstract_values.npy")  # same size: only the checksum tells
    CorpusStats.load(_stats(home))  # an open checks sizes only
    with pytest.raises(StatsError, match=r"abstract_values.npy differs from what the build wrote .*esrr index build"):
        CorpusStats.load(_stats(home), check_ids=True)
    refused = CliRunner().invoke(main, ["index", "use", "v1"], env={"ESRR_HOME": str(home)})
    assert refused.exit_code == 1 and "abstract_values.npy differs from what the build wrote" in refused.output

    vocab = _stats(home) / "vocab.txt"
    vocab.write_text(vocab.read_text(encoding="utf-8") + "x", encoding="utf-8")  # grown by a byte, same lines
    with pytest.raises(
        StatsError, match=r"vocab.txt (has .* bytes, the build wrote .* grown|\(\d+ bytes\) does not match)"
    ):
        CorpusStats.load(_stats(home))


def test_a_damaged_pointer_keeps_the_old_version_serving_and_health_says_why(home):
    client = _client(home, check_every_s=0)
    assert client.get("/_esrr/health").get_json()["status"] == "green"
    (home / "indexes" / "embedded" / "CURRENT").write_bytes(b"v\xff1\n")
    assert [hit["_id"] for hit in client.get("/_search?q=bone").get_json()["hits"]["hits"]] == ["b", "a"]

    health = client.get("/_esrr/health")
    body = health.get_json()
    assert health.status_code == 200 and body["status"] == "yellow" and body["index"] == "v1"
    assert "CURRENT is damaged: it is not text" in body["problem"] and str(home) not in json.dumps(body)
    reload = client.post("/_esrr/reload")
    assert reload.status_code == 503 and "it is not text" in reload.get_json()["error"]["reason"]
    assert str(home) not in reload.get_data(as_text=True)

    (home / "indexes" / "embedded" / "CURRENT").write_text("v1\n")  # repaired: green again at the next look
    assert client.get("/_esrr/health").get_json()["status"] == "green"
