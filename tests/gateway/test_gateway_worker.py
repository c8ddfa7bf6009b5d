"""``esrr serve`` as a real HTTP server, scored by a real worker through Redis, read by the official ES client.

The gateway answers the Elasticsearch 8 Python client unchanged, ranks as ``esrr search``
does in one process, keeps that ranking under concurrent requests, and answers in BM25
order (saying why) when no worker does.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from elasticsearch import Elasticsearch

from es_rerank.cli import main
from tests.artifact_home import home_with_index, nfcorpus_with_dev_queries
from tests.conftest import REPO, esrr_serve

QUERIES = ("cancer risk and diet", "vitamin d and bone", "breast cancer", "statins", "green tea")
TIMEOUT = 30


@pytest.fixture(scope="module")
def home(artifacts, corpus_documents, tmp_path_factory) -> Path:
    """A copy of the artifacts' home with an embedded index of 30 documents."""
    return home_with_index(artifacts, corpus_documents, tmp_path_factory.mktemp("gateway"))[0]


@pytest.fixture(scope="module")
def queue(broker, home) -> Iterator[str]:
    """A queue that a worker serving ``home`` consumes."""
    with broker.serving("gateway", home=home) as (name, _):
        yield name


@contextmanager
def _serving(env: dict[str, str], port: int) -> Iterator[str]:
    """``esrr serve`` on ``port`` with ``env``, until its health answers; yields its URL."""
    with esrr_serve({**env, "PATH": "/usr/bin:/bin"}, port, ready_path="/_esrr/health") as (url, _):
        yield url


def _env(broker, queue: str, home: Path, **overrides: object) -> dict[str, str]:
    settings = {"home": home, "score_deadline_s": TIMEOUT, **overrides}
    return {**broker.settings_env(queue, **settings), "PYTHONPATH": str(REPO)}


def _ids(body: dict) -> list[str]:
    return [hit["_id"] for hit in body["hits"]["hits"]]


@pytest.mark.broker
def test_the_elasticsearch_client_reads_the_reranked_hits_that_esrr_search_shows(broker, queue, home, free_port):
    env = _env(broker, queue, home)
    local = json.loads(CliRunner().invoke(main, ["search", QUERIES[0], "-k", "5", "--json"], env=env).stdout)
    with _serving(env, free_port()) as url:
        client = Elasticsearch(url, request_timeout=TIMEOUT)
        remote = client.search(index="esrr-docs", query={"match": {"text": QUERIES[0]}}, size=5).body
        paged = client.search(index="esrr-docs", q=QUERIES[0], from_=2, size=3).body
        health = json.load(urllib.request.urlopen(f"{url}/_esrr/health", timeout=TIMEOUT))
        info = json.load(urllib.request.urlopen(f"{url}/", timeout=TIMEOUT))
    assert health["reranks"] is True and health["status"] == "green"
    assert info["esrr"]["reranks"] is True  # GET / says what health says
    assert local["esrr"]["ranker"] == remote["esrr"]["ranker"] == "delta-32-lex3 + BM25 guard + candidate feedback"
    assert "fallback" not in remote["esrr"]
    assert _ids(remote) == _ids(local)
    assert [hit["_score"] for hit in remote["hits"]["hits"]] == pytest.approx(
        [hit["_score"] for hit in local["hits"]["hits"]], abs=1e-4
    )
    assert _ids(paged) == _ids(remote)[2:5]


@pytest.mark.broker
def test_concurrent_searches_get_the_rankings_of_sequential_ones(broker, queue, home, free_port):
    with _serving(_env(broker, queue, home, gateway_threads=8), free_port()) as url:
        client = Elasticsearch(url, request_timeout=TIMEOUT)

        def ranked(text: str) -> tuple[list[str], dict]:
            body = client.search(q=text, size=10).body
            return _ids(body), body["esrr"]

        alone = {text: ranked(text) for text in QUERIES}
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(ranked, QUERIES * 6))
    assert all("fallback" not in esrr for _, esrr in alone.values())
    assert together == [alone[text] for text in QUERIES * 6]


@pytest.mark.broker
def test_without_a_worker_the_gateway_answers_in_bm25_order_and_says_why(broker, home, free_port):
    nobody = f"nobody-{uuid.uuid4().hex[:6]}"
    with _serving(_env(broker, nobody, home, score_deadline_s=0.5), free_port()) as url:
        body = json.load(urllib.request.urlopen(f"{url}/_search?q=breast+cancer", timeout=TIMEOUT))
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=TIMEOUT).read().decode()
        health = json.load(urllib.request.urlopen(f"{url}/_esrr/health", timeout=TIMEOUT))
    assert "no worker answered" in body["esrr"]["fallback"] and "esrr worker start" in body["esrr"]["fallback"]
    assert health["status"] == "yellow" and "no worker answered" in health["fallback"]
    assert body["hits"]["hits"] and all(hit["fields"]["reranked"] == [False] for hit in body["hits"]["hits"])
    # Ended by the search's own 0.5 s deadline (what that costs in time: `esrr bench chaos`, docs/performance.md).
    assert "within 0.5 s" in body["esrr"]["fallback"]
    assert "esrr_model_fallbacks_total 1.0" in metrics


@pytest.mark.broker
def test_health_is_a_503_while_the_worker_refuses_every_search(broker, artifacts, home, free_port):
    refusing = f"refusing-{uuid.uuid4().hex[:6]}"
    client = broker.client(refusing, home=home)
    process = broker.worker(refusing, home=artifacts.home).start()  # that home lacks the served index version
    try:
        process.wait_ready(client)
        with _serving(_env(broker, refusing, home), free_port()) as url:
            with pytest.raises(urllib.error.HTTPError) as health:
                urllib.request.urlopen(f"{url}/_esrr/health", timeout=TIMEOUT)
            with pytest.raises(urllib.error.HTTPError) as search:
                urllib.request.urlopen(f"{url}/_search?q=breast+cancer", timeout=TIMEOUT)
    finally:
        process.stop()
        client.close()
    assert health.value.code == search.value.code == 503
    reason = json.load(health.value)["error"]["reason"]
    assert "the scoring worker refused the request" in reason and "no statistics for index version 'local'" in reason


@pytest.mark.broker
def test_bench_http_times_a_running_gateway_and_refuses_to_time_a_fallback(broker, queue, home, free_port, tmp_path):
    data, figures = nfcorpus_with_dev_queries(tmp_path / "nfcorpus", list(QUERIES[:3])), tmp_path / "figures.json"
    with _serving(_env(broker, queue, home), free_port()) as url:
        result = CliRunner().invoke(
            main,
            [
                "bench",
                "http",
                "--url",
                url,
                "--data",
                str(data),
                "--rounds",
                "2",
                "--concurrency",
                "2",
                "--json-out",
                str(figures),
            ],
        )
    assert result.exit_code == 0, result.output
    written = json.loads(figures.read_text())
    assert written["searches"] == 6 and written["rankers"] == ["delta-32-lex3 + BM25 guard + candidate feedback"]
    assert written["latency_ms"]["p50"] >= written["took_ms"]["p50"] > 0
    with _serving(_env(broker, f"nobody-{uuid.uuid4().hex[:6]}", home, score_deadline_s=0.3), free_port()) as url:
        refused = CliRunner().invoke(main, ["bench", "http", "--url", url, "--data", str(data)])
    assert refused.exit_code == 1 and "was not reranked" in refused.output
    unreachable = CliRunner().invoke(
        main, ["bench", "http", "--url", f"http://127.0.0.1:{free_port()}", "--data", str(data)]
    )
    assert unreachable.exit_code == 1 and "start it with `esrr serve`" in unreachable.output
