"""The gateway while workers or the broker are gone: real ``esrr serve``, real Redis, real worker processes.

Floors of issue 25: with no worker, once the breaker is open a search answers in at most
50 ms at the 99th percentile with 16 clients at once; reranking resumes within 10 s of
a worker starting; what an outage leaves on Redis is capped by ``ESRR_QUEUE_MAX_TASKS``.
The gateway runs with the default deadline, breaker and cap.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from es_rerank.backends.base import Hit
from es_rerank.ranking.broker import client_app
from es_rerank.ranking.dispatch import WorkerReranker
from es_rerank.ranking.pipeline import ScoringUnavailable
from es_rerank.settings import BrokerSettings
from tests.worker.test_local_search import _home_with_index
from tests.conftest import REPO, esrr_serve


CLIENTS = 16
# The floor (p99 <= 50 ms at 16 clients with the breaker open) is a benchmark figure
# (`esrr bench chaos`, docs/performance.md); a test on a shared machine checks what makes it
# possible: searches no longer wait for the broker, so they answer far inside the deadline.
OPEN_BREAKER_P99_MS = 500.0
RESUME_FLOOR_S = 10.0
DEADLINE_S = 2.0  # the default ESRR_SCORE_DEADLINE_S


@pytest.fixture(scope="module")
def home(artifacts, corpus_documents, tmp_path_factory) -> Path:
    return _home_with_index(artifacts, corpus_documents, tmp_path_factory.mktemp("outage"))[0]


@contextmanager
def gateway(env: dict[str, str], port: int, log_path: Path) -> Iterator[str]:
    """``esrr serve`` on ``port``, its log in ``log_path``, until it answers; yields its URL."""
    with esrr_serve({**env, "PATH": "/usr/bin:/bin"}, port, log_path=log_path) as (url, _):
        yield url


def _env(broker, queue: str, home: Path, **overrides: object) -> dict[str, str]:
    return {**broker.settings_env(queue, home=home, **overrides), "PYTHONPATH": str(REPO)}


def search(pool, url: str, query: str = "breast cancer") -> tuple[float, dict]:
    """One search's latency in ms and its body (a non-200 fails the test: a search must always answer)."""
    started = time.perf_counter()
    response = pool.request("GET", f"{url}/_search", fields={"q": query, "size": 5})
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status == 200, response.data[:500]
    return elapsed, json.loads(response.data)


def burst(pool, url: str, searches: int) -> tuple[np.ndarray, list[dict]]:
    """``searches`` searches from ``CLIENTS`` threads at once; their latencies (ms) and bodies."""
    with ThreadPoolExecutor(CLIENTS) as threads:
        results = list(threads.map(lambda _: search(pool, url), range(searches)))
    return np.array([ms for ms, _ in results]), [body for _, body in results]


def wait_for_reranking(pool, url: str, timeout: float) -> float:
    """Seconds until a search is reranked again (searching every 0.1 s); fails after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        _, body = search(pool, url)
        if "fallback" not in body["esrr"]:
            return time.monotonic() - started
        time.sleep(0.1)
    pytest.fail(f"no search was reranked within {timeout} s: {body['esrr']}")


def _fallback_lines(log_path: Path) -> list[dict]:
    lines = [line[line.index("{"):] for line in log_path.read_text().splitlines() if '"model_fallback"' in line]
    return [json.loads(line) for line in lines]


@pytest.mark.broker
def test_a_killed_worker_trips_the_breaker_and_a_new_one_reranks_within_10_s(broker, home, free_port, tmp_path):
    import redis
    import urllib3

    queue = f"outage-{uuid.uuid4().hex[:6]}"
    first = broker.worker(queue, home=home).start()
    client = broker.client(queue, home=home)
    log_path = tmp_path / "gateway.log"
    pool = urllib3.PoolManager(maxsize=CLIENTS, retries=False, timeout=urllib3.Timeout(30))
    try:
        first.wait_ready(client)
        with gateway(_env(broker, queue, home), free_port(), log_path) as url:
            _, body = search(pool, url)
            assert "fallback" not in body["esrr"] and body["hits"]["hits"][0]["fields"]["reranked"] == [True]

            first.kill()
            unanswered, bodies = burst(pool, url, CLIENTS)  # those before the breaker opens wait the deadline
            assert all("fallback" in b["esrr"] for b in bodies)
            waited = sum("no worker answered" in b["esrr"]["fallback"] for b in bodies)
            assert waited >= BrokerSettings().breaker_failures
            assert unanswered.max() < (DEADLINE_S + 1.5) * 1000  # the deadline, plus Celery's once-a-second drain

            latencies, bodies = burst(pool, url, 10 * CLIENTS)  # the breaker is open: BM25 at once
            p99 = float(np.percentile(latencies, 99))
            assert p99 <= OPEN_BREAKER_P99_MS, f"p99 {p99:.1f} ms with the breaker open"
            assert all("the model stage is skipped" in b["esrr"]["fallback"] for b in bodies)
            assert all(hit["fields"]["reranked"] == [False] for b in bodies for hit in b["hits"]["hits"])
            health = json.loads(pool.request("GET", f"{url}/_esrr/health").data)
            info = json.loads(pool.request("GET", f"{url}/").data)
            assert health["status"] == "yellow" and health["reranks"] is False and info["esrr"]["reranks"] is False
            queued = redis.Redis.from_url(broker.redis_url).llen(broker.key_prefix + queue)
            assert queued <= BrokerSettings().queue_max_tasks

            second = broker.worker(queue, home=home).start()
            try:
                second.wait_ready(client)
                resumed = wait_for_reranking(pool, url, timeout=30)
            finally:
                second.stop()
    finally:
        first.stop()
        client.close()
    assert resumed <= RESUME_FLOOR_S, f"reranking resumed {resumed:.1f} s after the worker was ready"
    logged = _fallback_lines(log_path)
    assert len(logged) >= 11 * CLIENTS and all(line["reason"] and len(line["query_id"]) == 16 for line in logged)
    assert len({line["query_id"] for line in logged}) == len(logged)


@pytest.mark.broker
def test_a_stopped_broker_falls_back_within_the_deadline_then_at_once(broker, home, private_redis, free_port,
                                                                      tmp_path):
    import urllib3

    queue = f"frozen-{uuid.uuid4().hex[:6]}"
    on_private = {"broker_url": private_redis.url, "broker_key_prefix": ""}
    worker = broker.worker(queue, home=home, **on_private).start()
    client = broker.client(queue, home=home, **on_private)
    pool = urllib3.PoolManager(maxsize=CLIENTS, retries=False, timeout=urllib3.Timeout(30))
    try:
        worker.wait_ready(client)
        # ESRR_BREAKER_REFINE=false: the searches the breaker skips answer BM25's page alone.
        env = _env(broker, queue, home, breaker_refine=False, **on_private)
        with gateway(env, free_port(), tmp_path / "gateway.log") as url:
            assert "fallback" not in search(pool, url)[1]["esrr"]
            private_redis.freeze()
            stopped, bodies = burst(pool, url, CLIENTS)
            assert all("fallback" in b["esrr"] for b in bodies)
            waited = [b for b in bodies if "the model stage is skipped" not in b["esrr"]["fallback"]]
            assert waited and all("candidate feedback" in b["esrr"]["ranker"] for b in waited)  # refined as ever
            assert stopped.max() < (DEADLINE_S + 1.5) * 1000
            latencies, bodies = burst(pool, url, 10 * CLIENTS)
            assert float(np.percentile(latencies, 99)) <= OPEN_BREAKER_P99_MS
            assert all("the model stage is skipped" in b["esrr"]["fallback"] for b in bodies)
            assert all(b["esrr"]["ranker"] == "BM25" for b in bodies)
            private_redis.process.send_signal(signal.SIGCONT)
            resumed = wait_for_reranking(pool, url, timeout=30)
    finally:
        private_redis.process.send_signal(signal.SIGCONT)
        worker.stop()
        client.close()
    assert resumed <= RESUME_FLOOR_S


@pytest.mark.broker
def test_the_queue_cap_bounds_what_an_outage_leaves_on_redis(broker, home):
    import redis

    from es_rerank.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    stats = backend.stats
    window = [Hit(stats.doc_ids[row % stats.n_docs], 1.0, "", stats.doc_terms(row % stats.n_docs))
              for row in range(500)]  # a full window of 500 hits, as a search sends
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    settings = BrokerSettings(home=home, broker_url=broker.redis_url, broker_key_prefix=broker.key_prefix,
                              queue=queue)
    reranker = WorkerReranker(client_app(settings), queue, 0.2, max_queued=settings.queue_max_tasks)  # no breaker
    attempts, refused_s = 300, []
    try:
        for _ in range(attempts):
            started = time.monotonic()
            with pytest.raises(ScoringUnavailable) as unavailable:
                reranker("breast cancer risk", window, stats)
            if "tasks wait on queue" in str(unavailable.value):
                refused_s.append(time.monotonic() - started)
    finally:
        reranker.close()
    left = redis.Redis.from_url(broker.redis_url).lrange(broker.key_prefix + queue, 0, -1)
    assert len(left) == settings.queue_max_tasks and len(refused_s) == attempts - settings.queue_max_tasks
    assert sum(map(len, left)) <= 1_000_000  # the floor: at most 1 MB left, whatever the outage's length
    assert float(np.median(refused_s)) < 0.1  # a refusal costs a look at the queue, not a deadline


@pytest.mark.broker
def test_bench_chaos_runs_every_phase_without_a_failed_search(broker, home, tmp_path):
    from click.testing import CliRunner

    from es_rerank.cli import main
    from tests.worker.test_local_search import _dev_queries

    data = _dev_queries(tmp_path / "nfcorpus", ["breast cancer", "cancer risk and diet", "vitamin d and bone"])
    env = {key: value for key, value in broker.settings_env("unused", home=home, torch_threads=1).items()
           if key not in ("ESRR_BROKER_URL", "ESRR_QUEUE", "ESRR_BROKER_KEY_PREFIX")}  # the bench starts its own
    figures = tmp_path / "chaos.json"
    result = CliRunner().invoke(main, ["bench", "chaos", "--phase-s", "5", "--clients", "2", "--window", "20",
                                       "--outage-sends", "30", "--data", str(data), "--log-dir", str(tmp_path / "logs"),
                                       "--json-out", str(figures)], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    assert [row["phase"] for row in report["phases"]][0] == "steady" and len(report["phases"]) == 7
    assert all(row["failed"] == 0 for row in report["phases"]), report["phases"]
    assert report["phases"][-1]["unasked"] == report["phases"][-1]["searches"]
    assert report["queue_bound"]["tasks_left"] == BrokerSettings().queue_max_tasks
    assert {row["attack"] for row in report["attacks"]} >= {"index name a*a*... of 200 KB", "100,000-word query"}
    assert all(row["cpu_ms"] < 100 for row in report["attacks"])


@pytest.mark.broker
def test_get_root_and_health_agree_that_nothing_is_reranked_while_no_worker_answers(broker, home, free_port, tmp_path):
    import urllib3

    pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(30))
    with gateway(_env(broker, f"absent-{uuid.uuid4().hex[:6]}", home), free_port(), tmp_path / "gateway.log") as url:
        info = json.loads(pool.request("GET", f"{url}/").data)  # b2f3ea0 said reranks: true here
        health = json.loads(pool.request("GET", f"{url}/_esrr/health").data)
    assert health["status"] == "yellow" and "no worker" in health["fallback"]
    assert info["esrr"]["reranks"] is health["reranks"] is False
    assert info["tagline"].endswith(": BM25")
