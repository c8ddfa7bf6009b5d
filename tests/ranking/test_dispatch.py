"""The served pipeline with a running worker scoring through the broker (``es_rerank.ranking.dispatch``).

Real Redis and a real ``celery worker`` process (``conftest.py``), serving a home with
an embedded index, so that the hits' statistics version is the one the worker loads.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.backends.base import text_hits
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.cli import main
from es_rerank.gateway.app import create_app as create_gateway
from es_rerank.gateway.config import GatewaySettings
from es_rerank.payload import WorkerSetupError
from es_rerank.ranking.dispatch import UNANSWERED_NAME, WorkerReranker
from es_rerank.ranking.pipeline import ScoringUnavailable, SearchPipeline
from es_rerank.ranking.served import ServedSearch
from tests.artifact_home import home_with_index, nfcorpus_with_dev_queries
from tests.conftest import ranked
from worker.celery_app import create_app
from worker.local import LocalReranker
from worker.settings import WorkerSettings

QUERY = "cancer risk and diet"
TIMEOUT = 30


@pytest.fixture(scope="module")
def served_home(artifacts, corpus_documents, tmp_path_factory) -> tuple[Path, EmbeddedBackend]:
    """A copy of the artifacts' home with an embedded index of 30 documents, and that index opened."""
    return home_with_index(artifacts, corpus_documents, tmp_path_factory.mktemp("dispatch"))


@pytest.fixture(scope="module")
def home_worker(broker, served_home):
    """A worker serving ``served_home`` on a queue of its own; yields (queue, sending client)."""
    with broker.serving("dispatch", home=served_home[0]) as (queue, client):
        yield queue, client


def _doc_ids(ranking) -> list[str]:
    return [item.hit.doc_id for item in ranking.ranked]


@pytest.mark.broker
def test_a_worker_ranks_as_the_model_in_this_process(home_worker, served_home):
    queue, client = home_worker
    home, backend = served_home
    reranker = WorkerReranker(client, queue, deadline_s=TIMEOUT)
    assert reranker.name == UNANSWERED_NAME
    remote = ranked(SearchPipeline(backend, 20, reranker), QUERY, 10)
    with LocalReranker(WorkerSettings(home=home)) as local_reranker:
        local = ranked(SearchPipeline(backend, 20, local_reranker), QUERY, 10)
    assert remote.fallback is None and remote.ranker == local.ranker == "delta-32-lex3"
    assert _doc_ids(remote) == _doc_ids(local)
    assert [item.score for item in remote.ranked] == pytest.approx([item.score for item in local.ranked], abs=1e-4)
    bm25 = ranked(SearchPipeline(backend, 0), QUERY, 10)
    assert _doc_ids(remote) != _doc_ids(bm25)  # the model reordered: the comparison above means something


@pytest.mark.broker
def test_without_a_worker_the_query_keeps_bm25_order_and_says_why(broker, served_home):
    _, backend = served_home
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    try:
        ranking = ranked(SearchPipeline(backend, 20, WorkerReranker(client, queue, deadline_s=0.5)), QUERY, 10)
    finally:
        client.close()
    assert ranking.ranker == "BM25" and "no worker answered" in ranking.fallback and queue in ranking.fallback
    assert "within 0.5 s" in ranking.fallback  # ended by its own deadline
    assert _doc_ids(ranking) == _doc_ids(ranked(SearchPipeline(backend, 0), QUERY, 10))


@pytest.mark.broker
def test_a_worker_that_cannot_score_the_index_stops_the_search(running_worker, served_home, broker):
    _, backend = served_home  # its statistics version is not in the session worker's home
    with WorkerReranker(broker.client(running_worker.queue), running_worker.queue, TIMEOUT) as reranker:
        with pytest.raises(WorkerSetupError, match="no statistics for index version"):
            ranked(SearchPipeline(backend, 20, reranker), QUERY, 10)  # every query would meet it: no quiet BM25


@pytest.mark.broker
def test_a_query_that_expires_behind_a_busy_worker_keeps_bm25_order(broker, served_home):
    home, backend = served_home
    queue = f"busy-{uuid.uuid4().hex[:6]}"
    process = broker.worker(queue, home=home, concurrency=1, score_delay_ms=700).start()
    first, second = broker.client(queue, home=home), broker.client(queue, home=home)
    try:
        process.wait_ready(first)
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(ranked, SearchPipeline(backend, 20, WorkerReranker(first, queue, TIMEOUT)), QUERY, 10)
            time.sleep(0.1)  # the one slot is taken for 0.7 s
            ranking = ranked(SearchPipeline(backend, 20, WorkerReranker(second, queue, 0.3)), QUERY, 10)
            assert busy.result().fallback is None
    finally:
        process.stop()
        first.close()
        second.close()
    # Expired in the queue (revoked by the worker) or not answered in time, whichever the worker's
    # speed makes it: either way a fallback, never a TaskRevokedError out of the search.
    assert ranking.ranker == "BM25" and ("busy" in ranking.fallback or "no worker answered" in ranking.fallback)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe closes


def test_an_unreachable_broker_falls_back_at_once(served_home):
    home, backend = served_home
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    client = create_app(WorkerSettings(home=home, broker_url=url))
    try:  # a deadline far longer than the test: a search that waited for it would say "no worker answered"
        ranking = ranked(SearchPipeline(backend, 20, WorkerReranker(client, "rerank", deadline_s=600)), QUERY, 10)
    finally:
        client.close()
    assert ranking.ranker == "BM25" and "cannot reach the broker" in ranking.fallback
    assert len(ranking.ranked) == 10


def _fallback_with(home: Path, backend: EmbeddedBackend, url: str):
    client = create_app(WorkerSettings(home=home, broker_url=url))
    try:
        return ranked(SearchPipeline(backend, 20, WorkerReranker(client, "rerank", deadline_s=2)), QUERY, 10)
    finally:
        client.close()


def test_a_broker_port_speaking_another_protocol_falls_back_to_bm25(served_home):
    """Not a 500 or a traceback: an HTTP server where Redis should be is a broker that cannot be reached."""
    import threading

    home, backend = served_home
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def answer_http() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer_http, daemon=True).start()
    try:
        ranking = _fallback_with(home, backend, f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
    finally:
        listener.close()
    assert ranking.ranker == "BM25" and "cannot reach the broker" in ranking.fallback
    assert "ESRR_BROKER_URL" in ranking.fallback and len(ranking.ranked) == 10


FROZEN_DEADLINE_S = 1.0
# How long the fallback takes is a benchmark's figure (`esrr bench chaos`, its broker-stopped phase), not a
# ceiling asserted on a shared machine. Here: the search falls back with the reason, and never hangs (a hang
# fails the test by pytest-timeout, far above any deadline).
HANG_GUARD_S = 60


@pytest.mark.broker
@pytest.mark.timeout(HANG_GUARD_S)
@pytest.mark.parametrize("connected", [False, True], ids=["new-connections", "pooled-connections"])
def test_a_stopped_redis_falls_back_with_the_reason(private_redis, served_home, connected):
    home, backend = served_home
    hits, stats = text_hits(backend, QUERY, 20), backend.stats
    client = create_app(WorkerSettings(home=home, broker_url=private_redis.url))
    reranker = WorkerReranker(client, "rerank", FROZEN_DEADLINE_S)
    try:
        if connected:  # a query that reaches Redis (no worker answers it) leaves its connections open
            with pytest.raises(ScoringUnavailable, match="no worker answered"):
                reranker(QUERY, hits, stats)
        private_redis.freeze()
        with pytest.raises(ScoringUnavailable, match=f"cannot reach the broker .*at {re.escape(private_redis.url)}"):
            reranker(QUERY, hits, stats)
    finally:
        client.close()


@pytest.mark.broker
@pytest.mark.timeout(HANG_GUARD_S)
def test_health_reports_a_stopped_redis(private_redis, served_home):
    home, backend = served_home
    client = create_app(WorkerSettings(home=home, broker_url=private_redis.url))
    pipeline = SearchPipeline(backend, 20, WorkerReranker(client, "rerank", FROZEN_DEADLINE_S))
    gateway = create_gateway(ServedSearch(pipeline), GatewaySettings(home=home)).test_client()
    private_redis.freeze()
    try:
        response = gateway.get("/_esrr/health")
    finally:
        client.close()
    body = response.get_json()
    assert response.status_code == 200 and body["status"] == "yellow", body
    assert "cannot reach the broker" in body["fallback"] and private_redis.url in body["fallback"]


@pytest.mark.broker
@pytest.mark.timeout(HANG_GUARD_S)
def test_more_searches_at_once_than_celerys_pool_all_fall_back(private_redis, served_home):
    home, backend = served_home
    hits, stats = text_hits(backend, QUERY, 20), backend.stats
    client = create_app(WorkerSettings(home=home, broker_url=private_redis.url))
    reranker = WorkerReranker(client, "rerank", FROZEN_DEADLINE_S)
    searches = 12  # Celery's default pool holds 10 broker connections: the 11th waited for one

    def fallback(_: int) -> str:
        with pytest.raises(ScoringUnavailable, match="cannot reach the broker") as caught:
            reranker(QUERY, hits, stats)
        return str(caught.value)

    private_redis.freeze()
    try:
        with ThreadPoolExecutor(searches) as pool:
            reasons = list(pool.map(fallback, range(searches)))
    finally:
        client.close()
    assert len(reasons) == searches  # the 11th and 12th did not wait for a pool connection forever


@pytest.mark.broker
def test_a_redis_database_the_server_lacks_falls_back_to_bm25(broker, served_home):
    home, backend = served_home
    ranking = _fallback_with(home, backend, broker.redis_url.rsplit("/", 1)[0] + "/99")
    assert ranking.ranker == "BM25" and "DB index is out of range" in ranking.fallback, ranking.fallback


@pytest.mark.broker
def test_search_command_scores_with_the_worker(home_worker, served_home, broker):
    queue, _ = home_worker
    home, _ = served_home
    env = broker.settings_env(queue, home=home, score_deadline_s=30)
    local = CliRunner().invoke(main, ["search", QUERY, "-k", "5"], env=env)
    remote = CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--worker"], env=env)
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert remote.stdout == local.stdout  # same model, same feedback, same table

    env["ESRR_QUEUE"], env["ESRR_SCORE_DEADLINE_S"] = f"nobody-{uuid.uuid4().hex[:6]}", "0.5"
    unanswered = CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--worker"], env=env)
    assert unanswered.exit_code == 0, unanswered.output
    assert "(not reranked: no worker answered" in unanswered.stderr
    ranked_by = unanswered.stdout.splitlines()[0]  # the line above the table names the ranker that ordered the hits
    assert ranked_by.startswith("ranked by: BM25") and "delta" not in ranked_by
    body = json.loads(CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--worker", "--json"], env=env).stdout)
    assert body["esrr"]["ranker"].startswith("BM25") and "no worker answered" in body["esrr"]["fallback"]


@pytest.mark.broker
def test_a_model_with_other_lex_features_is_served_once_the_caller_names_them(artifacts, served_home, broker, tmp_path):
    home, _ = served_home
    lexg = artifacts.another_checkpoint(tmp_path / "delta-32-lexg.pt", lex_names=("text_bm25", "title_jaccard"))
    queue = f"lexg-{uuid.uuid4().hex[:6]}"
    process = broker.worker(queue, home=home, checkpoint=lexg).start()
    client = broker.client(queue, home=home)
    try:
        process.wait_ready(client)
        env = broker.settings_env(queue, home=home, checkpoint=lexg, score_deadline_s=30)
        followed = CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--worker", "--json"], env=env)
        reranker = WorkerReranker(broker.client(queue, home=home), queue, TIMEOUT)  # as a gateway of LEX3 starts
        with reranker:
            ranking = ranked(SearchPipeline(served_home[1], 10, reranker), QUERY, 5)
        assert ranking.fallback is None and reranker.lex_names == ("text_bm25", "title_jaccard")
        env["ESRR_LEX_FEATURES"] = "text_bm25, title_jaccard"
        remote = CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--worker", "--json"], env=env)
        local = CliRunner().invoke(main, ["search", QUERY, "-k", "5", "--json"], env=env)
    finally:
        process.stop()
        client.close()
    assert remote.exit_code == 0 and local.exit_code == 0 and followed.exit_code == 0, followed.output
    # Not named, the model's features are followed (a gateway started before the model was trained): same hits.
    assert json.loads(remote.stdout)["hits"] == json.loads(local.stdout)["hits"] == json.loads(followed.stdout)["hits"]
    env["ESRR_LEX_FEATURES"] = "text_bm25,nope"
    bad = CliRunner().invoke(main, ["search", QUERY, "--worker"], env=env)
    assert bad.exit_code != 0 and "ESRR_LEX_FEATURES" in bad.output and "unknown Lex feature(s) ['nope']" in bad.output


@pytest.mark.broker
def test_bench_search_times_the_trip_to_the_worker_and_refuses_to_time_a_fallback(
    home_worker, served_home, broker, tmp_path
):
    queue, _ = home_worker
    home, _ = served_home
    data = nfcorpus_with_dev_queries(tmp_path / "nfcorpus", [QUERY, "vitamin d and bone"])
    env = broker.settings_env(queue, home=home, score_deadline_s=30)
    figures = tmp_path / "figures.json"
    result = CliRunner().invoke(
        main, ["bench", "search", "--data", str(data), "--rounds", "1", "--worker", "--json-out", str(figures)], env=env
    )
    assert result.exit_code == 0, result.output
    body = json.loads(figures.read_text(encoding="utf-8"))
    assert body["ranker"] == "delta-32-lex3 + BM25 guard + candidate feedback"
    assert body["scored_by"].startswith("a worker")
    assert body["stages"]["model"]["queries"] == 2

    env["ESRR_QUEUE"], env["ESRR_SCORE_DEADLINE_S"] = f"nobody-{uuid.uuid4().hex[:6]}", "0.3"
    result = CliRunner().invoke(main, ["bench", "search", "--data", str(data), "--worker"], env=env)
    assert result.exit_code == 1 and "did not score every query (no worker answered" in result.output, result.output


def test_search_command_refuses_worker_without_reranking(served_home):
    home, _ = served_home
    result = CliRunner().invoke(main, ["search", QUERY, "--worker", "--no-rerank"], env={"ESRR_HOME": str(home)})
    assert result.exit_code == 2 and "drop --no-rerank" in result.output
