"""Messages on the task queue that are not tasks (``worker.poison``): a real worker drops them and goes on.

Each case pushes raw bytes onto the queue's Redis list, as ``redis-cli LPUSH`` would, then
sends a real ``rerank.score`` task: it must be answered by the same worker process. Every
case here ended a Celery worker before the guard (measured: "Unrecoverable error", or a
request error whose unacknowledged message came back to end the next worker too).
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from es_rerank.payload import TASK_NAME, encode
from tests.worker.test_broker import QUERIES, make_request, rows_for, send
from worker.poison import KEPT_BYTES, MAX_ENVELOPE_BYTES, POISON_LIST, envelope_problem

TIMEOUT = 30


def _envelope(body: bytes, headers: object = None, **properties: object) -> bytes:
    """A kombu Redis envelope around ``body`` (base64), with ``properties`` over the usual ones."""
    props = {
        "body_encoding": "base64",
        "delivery_info": {"exchange": "", "routing_key": "q"},
        "delivery_mode": 2,
        "delivery_tag": str(uuid.uuid4()),
        "priority": 0,
        **properties,
    }
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "headers": {} if headers is None else headers,
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "properties": props,
        }
    ).encode()


POISON = {  # each of these ended the worker before the guard
    "not json": b"not json",
    "empty": b"",
    "not utf-8": b"\xff\xfe",
    "a list": b"[1, 2]",
    "null": b"null",
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "properties not an object": b'{"properties": []}',
    "delivery tag a list": _envelope(b"[[], {}, {}]", delivery_tag=[1]),
    "body not base64": _envelope(b"").replace(b'"body": ""', b'"body": "!!!x"'),
    "unknown body encoding": _envelope(b"[[], {}, {}]", body_encoding="rot13"),
    "headers a list": _envelope(b"[[], {}, {}]", headers=[1]),
    "compressed": _envelope(b"x", headers={"compression": "application/x-gzip"}),
    "task body of the wrong shape": _envelope(b"[1]", headers={"task": TASK_NAME, "id": str(uuid.uuid4())}),
}


@pytest.fixture(scope="module")
def redis_client(broker):
    import redis

    client = redis.Redis.from_url(broker.redis_url)
    yield client
    client.close()


def _answered(running_worker, artifacts) -> None:
    good = encode(make_request(artifacts, QUERIES[0], rows_for(artifacts, 5, 4)))
    result = send(running_worker.client, running_worker.queue, good).get(timeout=TIMEOUT)
    assert len(result["scores"]) == 4
    assert running_worker.process.process.poll() is None, running_worker.process.log_tail()


@pytest.mark.broker
def test_the_worker_drops_poison_and_answers_the_next_task(running_worker, artifacts, broker, redis_client):
    queue_key = broker.key_prefix + running_worker.queue
    kept_key = broker.key_prefix + POISON_LIST
    redis_client.delete(kept_key)
    for item in POISON.values():
        redis_client.lpush(queue_key, item)
        _answered(running_worker, artifacts)
    # Nothing came back from the unacked set either (a restored poison message would be delivered again).
    assert redis_client.llen(queue_key) == 0

    kept = [json.loads(record) for record in redis_client.lrange(kept_key, 0, -1)]
    assert len(kept) == len(POISON)
    assert {record["queue"] for record in kept[1:]} == {running_worker.queue}  # the newest is Celery's: "q"
    assert all(len(record["message"]) <= KEPT_BYTES and record["problem"] for record in kept)
    log = running_worker.process.log_tail(200_000)
    assert "Unrecoverable error" not in log
    assert log.count("dropped a message on queue") == len(POISON)


@pytest.mark.broker
def test_the_kept_list_is_capped(broker, artifacts, redis_client):
    queue = f"poison-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    process = broker.worker(queue, poison_kept=3).start()
    kept_key = broker.key_prefix + POISON_LIST
    try:
        process.wait_ready(client)
        redis_client.delete(kept_key)
        for number in range(6):
            redis_client.lpush(broker.key_prefix + queue, f"poison {number}".encode())
        good = encode(make_request(artifacts, QUERIES[1], rows_for(artifacts, 6, 3)))
        assert len(send(client, queue, good).get(timeout=TIMEOUT)["scores"]) == 3
        assert [json.loads(r)["message"] for r in redis_client.lrange(kept_key, 0, -1)] == [
            "poison 5",
            "poison 4",
            "poison 3",
        ]
        assert process.process.poll() is None
    finally:
        process.stop()
        client.close()


def test_a_real_task_envelope_passes_the_screen_and_poison_does_not(broker, artifacts):
    from kombu.transport.virtual.base import Channel

    codecs = Channel.codecs
    # The largest payload the format allows, as Celery wraps it: well under the size limit.
    big = encode(make_request(artifacts, QUERIES[2], [row % artifacts.stats.n_docs for row in range(1000)]))
    body = json.dumps([[big], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]).encode()
    envelope = _envelope(body, headers={"task": TASK_NAME, "id": str(uuid.uuid4())})
    assert envelope_problem(envelope, codecs) is None and len(envelope) < MAX_ENVELOPE_BYTES / 4
    for name, item in POISON.items():
        problem = envelope_problem(item, codecs)
        assert (problem is None) == (name == "task body of the wrong shape"), (name, problem)  # Celery's to reject
    assert "more than" in envelope_problem(b" " * (MAX_ENVELOPE_BYTES + 1), codecs)
