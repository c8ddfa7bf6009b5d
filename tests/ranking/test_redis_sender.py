"""The gateway's own sender on Redis (``es_rerank.ranking.redis_sender``, ``task_message``): Celery's message, Celery's
results, with a real Redis and Celery's own ``send_task`` and result backend to compare with."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import redis

from es_rerank.payload import TASK_NAME, PayloadError, ScoreRequest, encode
from es_rerank.ranking.dispatch import WorkerReranker
from es_rerank.ranking.pipeline import ScoringUnavailable
from es_rerank.ranking.redis_sender import RedisSender, glob_escaped
from es_rerank.ranking.task_message import TaskHeaders, message_fields, plain_message, task_message

HANG_GUARD_S = 30.0  # a wait for an event, never a timing asserted


def _payload(n: int = 50) -> dict:
    rows = np.random.default_rng(n)
    request = ScoreRequest(
        "20260101t000000z",
        ("breast", "cancer", 'a "quoted" \\ word'),
        rows.integers(-1, 30000, (n, 50)).astype(np.int32),
        rows.random((n, 3)).astype(np.float32),
        ("abstract_bm25", "title_jaccard", "text_bm25"),
        "build-1",
    )
    return encode(request)


def _pushed(redis_url: str, key: str) -> list[dict]:
    return [json.loads(raw) for raw in redis.Redis.from_url(redis_url).lrange(key, 0, -1)]


def _wait_for(condition, what: str) -> None:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > HANG_GUARD_S:
            pytest.fail(f"not within {HANG_GUARD_S} s: {what}")
        time.sleep(0.02)


def test_the_message_is_kombus_dump_byte_for_byte():
    payload = _payload()
    fields = message_fields(TaskHeaders("id-1", TASK_NAME, "rerank", 1.5, "[<50 documents>]", "gen1@host", "r-1"))
    assert task_message(payload, fields) == plain_message(payload, fields)
    assert task_message({"v": 1}, fields) == plain_message({"v": 1}, fields)  # no arrays


def test_a_pattern_matches_its_text_literally():
    assert glob_escaped("esrr[1]*?:\\") == "esrr\\[1\\]\\*\\?:\\\\"


@pytest.mark.broker
def test_the_sent_message_is_the_one_celery_sends(broker):
    queue = f"message-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    payload = _payload()
    celery = WorkerReranker(client, queue, 2.0, direct=False)
    direct = WorkerReranker(client, queue, 2.0)
    try:
        assert direct._sender is not None and celery._sender is None
        celery._send(payload, str(uuid.uuid4()), time.monotonic() + 2)
        direct._send(payload, direct._sender.pending().id, time.monotonic() + 2)
        ours, theirs = _pushed(broker.redis_url, broker.key_prefix + queue)  # LPUSH: the newest first
    finally:
        direct.close()
        redis.Redis.from_url(broker.redis_url).delete(broker.key_prefix + queue)
    assert (
        json.loads(ours.pop("body"))
        == json.loads(theirs.pop("body"))
        == [[payload], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    )
    assert ours.keys() == theirs.keys() and ours["headers"].keys() == theirs["headers"].keys()
    assert ours["properties"].keys() == theirs["properties"].keys()
    per_task = {"id", "root_id", "correlation_id", "delivery_tag", "expires", "expiration"}
    for part in ("headers", "properties"):
        assert {k: v for k, v in ours[part].items() if k not in per_task} == {
            k: v for k, v in theirs[part].items() if k not in per_task
        }, part
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    expires = [datetime.fromisoformat(message["headers"]["expires"]) for message in (ours, theirs)]
    assert abs((expires[0] - expires[1]).total_seconds()) < 1.0 and expires[0].tzinfo is not None
    assert abs(int(ours["properties"]["expiration"]) - int(theirs["properties"]["expiration"])) < 1000
    assert ours["content-type"] == "application/json" and ours["properties"]["body_encoding"] is None


@pytest.mark.broker
def test_results_reach_their_waiters_as_celery_raises_them_and_are_deleted(broker):
    client = broker.client(f"results-{uuid.uuid4().hex[:6]}")
    sender = RedisSender.for_app(client, 1.0)
    store = redis.Redis.from_url(broker.redis_url)
    assert sender is not None
    try:
        answered, refused, late = sender.pending(), sender.pending(), sender.pending()
        _wait_for(sender._ready.is_set, "the result channel subscribed")
        client.backend.store_result(answered.id, {"v": 1, "scores": [1.0]}, "SUCCESS")
        assert answered.get(HANG_GUARD_S) == {"v": 1, "scores": [1.0]}
        answered.forget()
        client.backend.mark_as_failure(refused.id, PayloadError("n must be at most 1000"))
        with pytest.raises(PayloadError, match="at most 1000"):
            refused.get(HANG_GUARD_S)
        refused.forget()
        late.forget()  # its caller gave up: the result the worker stores after is deleted by the reader
        client.backend.store_result(late.id, {"v": 1}, "SUCCESS")
        keys = [client.backend.get_key_for_task(p.id) for p in (answered, refused, late)]
        _wait_for(lambda: not any(store.exists(key) for key in keys), "every result deleted")
    finally:
        sender.close()
        client.close()


@pytest.mark.broker
def test_a_result_stored_while_the_channel_was_lost_reaches_its_waiter(broker, private_redis, monkeypatch):
    import es_rerank.ranking.redis_sender as redis_sender

    monkeypatch.setattr(redis_sender, "RECONNECT_S", 2.0)  # the result is stored before the reader subscribes again
    client = broker.client("lost", broker_url=private_redis.url, broker_key_prefix="")
    sender = RedisSender.for_app(client, 1.0)
    store = redis.Redis.from_url(private_redis.url)
    assert sender is not None
    try:
        waiting = sender.pending()
        _wait_for(sender._ready.is_set, "the result channel subscribed")
        store.client_kill_filter(_type="pubsub")  # as a restarted Redis drops it
        _wait_for(lambda: not sender._ready.is_set(), "the loss seen by the reader")
        client.backend.store_result(waiting.id, 7, "SUCCESS")  # published to nobody
        assert waiting.get(HANG_GUARD_S) == 7  # read by the reader once subscribed again
        waiting.forget()
        assert not store.exists(client.backend.get_key_for_task(waiting.id))
    finally:
        sender.close()
        client.close()


@pytest.mark.broker
def test_the_queue_cap_refuses_and_nothing_is_left_waiting(broker):
    queue = f"capped-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    payload = _payload()
    try:
        with WorkerReranker(client, queue, 0.3, max_queued=2) as reranker:
            reasons = []
            for _ in range(4):
                with pytest.raises(ScoringUnavailable) as unavailable:
                    reranker.answer(payload, time.monotonic() + 0.3)
                reasons.append(str(unavailable.value))
            assert reranker._sender is not None and reranker._sender._waiting == {}
        assert ["no worker answered" in reason for reason in reasons] == [True, True, False, False]
        assert all("2 tasks wait on queue" in reason and "ESRR_QUEUE_MAX_TASKS=2" in reason for reason in reasons[2:])
        assert len(_pushed(broker.redis_url, broker.key_prefix + queue)) == 2
    finally:
        redis.Redis.from_url(broker.redis_url).delete(broker.key_prefix + queue)
        client.close()


@pytest.mark.broker
@pytest.mark.timeout(120)  # a hang guard, far above the deadlines
def test_a_redis_killed_mid_search_ends_it_by_its_deadline_and_the_next_search_reaches_the_new_one(
    broker, private_redis
):
    client = broker.client("killed", broker_url=private_redis.url, broker_key_prefix="")
    payload = _payload()
    try:
        with WorkerReranker(client, "killed", 1.0) as reranker, ThreadPoolExecutor(1) as pool:
            with pytest.raises(ScoringUnavailable, match="no worker answered"):
                reranker.answer(payload, time.monotonic() + 1.0)  # connected: the reader subscribed
            waiting = pool.submit(reranker.answer, payload, time.monotonic() + 1.0)
            _wait_for(lambda: reranker._sender._waiting, "the search sent")
            private_redis.kill_and_restart()
            with pytest.raises(ScoringUnavailable):  # its deadline, or the lost connection: never a hang
                waiting.result()
            reasons = []

            def reached() -> bool:
                with pytest.raises(ScoringUnavailable) as unavailable:
                    reranker.answer(payload, time.monotonic() + 1.0)
                reasons.append(str(unavailable.value))
                return "no worker answered" in reasons[-1]

            _wait_for(reached, "a search that reaches the restarted Redis")  # the reader subscribed again
            assert all("cannot reach the broker" in reason for reason in reasons[:-1]), reasons
            assert reranker._sender._waiting == {}
    finally:
        client.close()


def test_rabbitmq_keeps_celerys_path(tmp_path: Path):
    from worker.celery_app import create_app
    from worker.settings import WorkerSettings

    client = create_app(WorkerSettings(home=tmp_path, broker_url="amqp://guest:guest@127.0.0.1:5672//"))
    try:
        assert RedisSender.for_app(client, 1.0) is None
        assert WorkerReranker(client, "rerank", 2.0)._sender is None
    finally:
        client.close()
