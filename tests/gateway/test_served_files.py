"""Served index files changed underneath a gateway under load (issue 32, item 4): never a crash, a 500 or an
answer from mixed data; the gateway answers from the verified version or 503 with health red and the reason.

The writer is always another process (a ``python -c`` doing what ``truncate``, ``dd
conv=notrunc`` + ``touch -d``, ``rsync --inplace --times`` or ``rm`` would), while two
client threads search. A real ``esrr serve`` holds read leases on the files
(``es_rerank.held_files``); the Flask app in this process holds none and checks the
files' fingerprints (with ctime, verified by checksum) instead. A truncation is only
run against ``esrr serve``: without a lease, a page cut between a check and a read
ends the process that reads it, which here would be the test run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import REPO, esrr_serve

WORDS = [f"w{i}" for i in range(300)]
QUERIES = [f"w{i} w{(i * 7 + 3) % 300}" for i in range(0, 300, 7)]
LOAD_S = 1.5  # searching before, during and after the change

# What the writer process does to ``path`` (its argument); each keeps or restores what ``ls -l`` shows, or not.
TRUNCATE = "import os, sys; os.truncate(sys.argv[1], os.path.getsize(sys.argv[1]) // 3)"
REWRITE_MTIME_RESTORED = """
import os, sys
path = sys.argv[1]
st = os.stat(path)
with open(path, "r+b") as file:  # the same size, other bytes: the middle third reversed
    data = file.read()
    third = len(data) // 3
    file.seek(third)
    file.write(data[third:2 * third][::-1])
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
"""
DELETE = "import os, sys; os.unlink(sys.argv[1])"


def _documents() -> list[Document]:
    """3,000 documents: the statistics span many pages, so a cut leaves rows past the end."""
    rng = random.Random(7)
    return [
        Document(f"d{i}", " ".join(rng.choices(WORDS, k=5)), " ".join(rng.choices(WORDS, k=40))) for i in range(3000)
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with the documents' index as version v1."""
    home = tmp_path_factory.mktemp("served-files")
    build_embedded_index(_documents(), home / "indexes" / "embedded", version="v1", progress=False)
    return home


@pytest.fixture
def home(built: Path, tmp_path: Path) -> Path:
    """A copy of the built home for one test, whose files it may damage."""
    subprocess.run(["cp", "-a", str(built), str(tmp_path / "home")], check=True)
    return tmp_path / "home"


def _version(home: Path) -> Path:
    return home / "indexes" / "embedded" / "v1"


def _segment_file(home: Path, suffix: str) -> Path:
    (path,) = (_version(home) / "tantivy").glob(f"*{suffix}")
    return path


def _write(code: str, path: Path) -> None:
    """Run the writer ``code`` on ``path`` in another process (it waits while a lease holder lets it)."""
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)


def _answer(body: dict) -> list[tuple[str, float]]:
    return [(hit["_id"], round(hit["_score"], 4)) for hit in body["hits"]["hits"]]


class Load:
    """Two threads searching ``QUERIES`` until stopped; each answer's status and hits, and any failed connection."""

    def __init__(self, search: Callable[[str], tuple[int, dict]]) -> None:
        self.search = search
        self.answers: list[tuple[str, int, dict]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(offset,)) for offset in (0, 1)]

    def _run(self, offset: int) -> None:
        index = offset
        while not self._stop.is_set():
            query = QUERIES[index % len(QUERIES)]
            index += 2
            try:
                status, body = self.search(query)
            except OSError as error:  # the gateway died or stopped answering
                self.failures.append(f"{query}: {error}")
                return
            self.answers.append((query, status, body))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def _check(load: Load, baseline: dict[str, list]) -> tuple[int, int]:
    """Every answer a 200 with the hits of the unchanged index, or a 503 naming a change; (200s, 503s)."""
    assert not load.failures, load.failures[:3]
    statuses = [status for _, status, _ in load.answers]
    assert set(statuses) <= {200, 503}, [(q, s, b) for q, s, b in load.answers if s not in (200, 503)][:3]
    for query, status, body in load.answers:
        if status == 200:
            assert _answer(body) == baseline[query], f"{query}: an answer from changed files"
        else:
            assert "changed on disk" in body["error"]["reason"], body
    return statuses.count(200), statuses.count(503)


def _http(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@contextmanager
def _serving(home: Path, port: int, *args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ESRR_")}
    env.update(ESRR_HOME=str(home), ESRR_GATEWAY_RERANK="false", ESRR_GATEWAY_INDEX_CHECK_S="0", PYTHONPATH=str(REPO))
    with esrr_serve(env, port, *args, ready_path="/_esrr/health") as served:
        yield served


def _search_url(url: str) -> Callable[[str], tuple[int, dict]]:
    return lambda query: _http(f"{url}/_search?size=10&q={query.replace(' ', '+')}")


CHANGES = {
    "statistics cut short": (TRUNCATE, lambda home: _version(home) / "stats" / "title_ptr.npy", "title_ptr.npy"),
    "statistics rewritten, mtime restored": (
        REWRITE_MTIME_RESTORED,
        lambda home: _version(home) / "stats" / "doc_ids.txt",
        "doc_ids.txt",
    ),
    "tantivy postings cut short": (TRUNCATE, lambda home: _segment_file(home, ".idx"), ".idx"),
    "tantivy terms rewritten, mtime restored": (
        REWRITE_MTIME_RESTORED,
        lambda home: _segment_file(home, ".term"),
        ".term",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("change, processes", [(change, "1") for change in CHANGES] + [("statistics cut short", "2")])
def test_a_serving_gateway_answers_from_the_verified_files_or_503_while_one_changes(home, free_port, change, processes):
    code, target, name = CHANGES[change]
    with _serving(home, free_port(), "--processes", processes) as (url, process):
        search = _search_url(url)
        baseline = {query: _answer(search(query)[1]) for query in QUERIES}
        with Load(search) as load:
            time.sleep(LOAD_S / 3)
            _write(code, target(home))  # blocks until the gateway has given its lease up
            time.sleep(LOAD_S / 3)
        assert process.poll() is None, "the gateway died"
        served, refused = _check(load, baseline)
        assert served > 0 and refused > 0
        status, body = _http(f"{url}/_esrr/health")
        assert status == 503 and body["status"] == "red"
        assert name in body["error"]["reason"] and "esrr index use" in body["error"]["reason"]
        assert str(home) not in json.dumps(body)  # file names, never paths
        assert search(QUERIES[0])[0] == 503
        assert _http(f"{url}/")[0] == 200


@pytest.mark.slow
def test_files_unlinked_under_a_serving_gateway_keep_being_served_and_health_says_so(home, free_port):
    with _serving(home, free_port()) as (url, process):
        search = _search_url(url)
        baseline = {query: _answer(search(query)[1]) for query in QUERIES}
        with Load(search) as load:
            time.sleep(LOAD_S / 3)
            _write(DELETE, _version(home) / "stats" / "title_values.npy")
            _write(DELETE, _segment_file(home, ".store"))
            time.sleep(LOAD_S / 3)
        assert process.poll() is None
        assert _check(load, baseline) == (len(load.answers), 0)  # the held files still read what was verified
        status, body = _http(f"{url}/_esrr/health")
        assert status == 200 and body["status"] == "yellow"
        assert "title_values.npy" in body["problem"] and "unlinked" in body["problem"]


@pytest.mark.slow
def test_a_version_put_back_whole_is_served_again_and_a_new_one_after_a_reindex(home, free_port):
    path = _version(home) / "stats" / "doc_ids.txt"
    original = path.read_bytes()
    with _serving(home, free_port()) as (url, process):
        search = _search_url(url)
        before = _answer(search(QUERIES[0])[1])
        _write(REWRITE_MTIME_RESTORED, path)
        assert search(QUERIES[0])[0] == 503
        path.write_bytes(original)  # put back: it verifies again, and the gateway serves it at its next look
        status, body = search(QUERIES[0])
        assert status == 200 and _answer(body) == before
        assert _http(f"{url}/_esrr/health")[1]["status"] == "green"

        _write(TRUNCATE, _segment_file(home, ".term"))
        status, body = search(QUERIES[0])
        assert status == 503 and ".term" in body["error"]["reason"]
        # The admin's fix: a new version (`esrr index build` builds one and makes it current, as here).
        build_embedded_index(_documents(), home / "indexes" / "embedded", version="v2", progress=False, workers=0)
        status, body = search(QUERIES[0])
        assert status == 200 and _answer(body) == before and body["hits"]["hits"][0]["_index"] == "v2"
        assert _http(f"{url}/_esrr/health")[1]["status"] == "green"
        assert process.poll() is None


def _app_search(home: Path) -> Callable[[str], tuple[int, dict]]:
    """Searches through the Flask app in this process: no lease, the fingerprints are checked."""
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(home / "indexes" / "embedded"), 0), 5.0)
    app = create_app(served, GatewaySettings(home=home))

    def search(query: str) -> tuple[int, dict]:
        response = app.test_client().get("/_search", query_string={"q": query, "size": 10})
        return response.status_code, response.get_json()

    search.app = app  # type: ignore[attr-defined]
    return search


@pytest.mark.parametrize("target", ["title_ptr.npy", "doc_ids.txt", ".term"])
def test_without_leases_a_rewrite_with_its_mtime_restored_is_refused_never_read(home, target):
    search = _app_search(home)
    baseline = {query: _answer(search(query)[1]) for query in QUERIES}
    path = _segment_file(home, target) if target.startswith(".") else _version(home) / "stats" / target
    with Load(search) as load:
        time.sleep(LOAD_S / 3)
        _write(REWRITE_MTIME_RESTORED, path)
        time.sleep(LOAD_S / 3)
    served, refused = _check(load, baseline)
    assert served > 0 and refused > 0
    health = search.app.test_client().get("/_esrr/health")  # type: ignore[attr-defined]
    assert health.status_code == 503 and health.get_json()["status"] == "red"
    assert path.name in health.get_json()["error"]["reason"]


def test_without_leases_a_change_of_mode_or_an_unlink_is_no_change_of_content(home):
    search = _app_search(home)
    baseline = {query: _answer(search(query)[1]) for query in QUERIES}
    with Load(search) as load:
        time.sleep(LOAD_S / 3)
        _write("import os, sys; os.chmod(sys.argv[1], 0o444)", _version(home) / "stats" / "title_values.npy")
        _write(DELETE, _segment_file(home, ".store"))
        time.sleep(LOAD_S / 3)
    assert _check(load, baseline) == (len(load.answers), 0)
