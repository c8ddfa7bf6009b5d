"""A kombu Redis channel builds its synchronous client once (``worker.redis_channel``), and the worker's tasks are
still copied and acknowledged through it."""

from __future__ import annotations

import uuid

import pytest
import redis
from kombu import Connection

from es_rerank.payload import encode
from tests.worker.test_broker import QUERIES, make_request, rows_for, send
from worker.redis_channel import SharedClient, share_client

TIMEOUT = 30


@pytest.fixture
def channel(redis_url: str):
    with Connection(redis_url) as connection:
        yield connection.default_channel


def test_one_synchronous_client_per_pool(channel) -> None:
    share_client(channel)
    share_client(channel)  # once is enough: not wrapped twice
    assert isinstance(channel._create_client, SharedClient)
    assert not isinstance(channel._create_client.create, SharedClient)
    first = channel._create_client()
    assert isinstance(first, redis.Redis) and first.connection_pool is channel.pool
    with channel.conn_or_acquire() as client:
        assert client is first and client.ping()
    assert channel._create_client(asynchronous=True) is not first  # BRPOP's kind: kombu's own, new each time
    channel._pool = None  # what kombu's disconnect does: a new pool, and a client on it
    again = channel._create_client()
    assert again is not first and again.connection_pool is channel.pool


def test_other_channels_are_left_alone() -> None:
    share_client(None)

    class Amqp:
        client = object()

        def _create_client(self) -> None:
            return None

    amqp = Amqp()
    share_client(amqp)
    assert not isinstance(amqp._create_client, SharedClient)


@pytest.mark.broker
def test_tasks_are_copied_and_acknowledged(running_worker, artifacts, broker) -> None:
    """Each answered task leaves the unacknowledged copies (kombu's ``unacked`` hash and its index) empty."""
    client = redis.Redis.from_url(broker.redis_url)
    try:
        for number, query in enumerate(QUERIES[:3]):
            payload = encode(make_request(artifacts, query, rows_for(artifacts, 7 + number, 5)))
            assert len(send(running_worker.client, running_worker.queue, payload).get(timeout=TIMEOUT)["scores"]) == 5
        assert client.hlen(broker.key_prefix + "unacked") == 0
        assert client.zcard(broker.key_prefix + "unacked_index") == 0
    finally:
        client.close()


def test_the_unacked_copy_is_the_item_as_it_came(redis_url: str, key_prefix: str) -> None:
    """``ItemCopy`` stores the popped item's text where kombu stores its envelope dumped again: the same JSON value,
    and kombu's own copy where the message is not that item's."""
    import json

    from worker.redis_channel import ItemCopy, copy_items, item_tag

    with Connection(redis_url, transport_options={"global_keyprefix": key_prefix}) as connection:
        channel = connection.default_channel
        qos = channel.qos

        class Screen:
            passed = None

        screen = Screen()
        copy_items(channel, screen)
        copy_items(channel, screen)  # once
        assert isinstance(qos.append, ItemCopy) and not isinstance(qos.append.kombus, ItemCopy)
        client = redis.Redis.from_url(redis_url)
        stored = {}
        for number, fed in enumerate([True, False, True]):
            tag = f"tag-{number}-{uuid.uuid4()}"
            envelope = {
                "body": json.dumps([[{"b64": "QUJD" * 100, "n": number}], {}, None]),  # quotes to escape
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": {"task": "rerank.score", "id": tag},
                "properties": {"delivery_tag": tag, "delivery_info": {"exchange": "", "routing_key": "q"}},
            }
            item = json.dumps(envelope).encode()
            assert item_tag(item) == tag
            if fed:
                screen.passed(item)
            else:
                screen.passed(json.dumps({**envelope, "properties": {"delivery_tag": "another"}}).encode())
            qos.append(channel.Message(json.loads(item), channel=channel), tag)
            stored[tag] = client.hget(key_prefix + "unacked", tag)
            assert json.loads(stored[tag]) == [envelope, "", "q"]
            assert client.zscore(key_prefix + "unacked_index", tag) is not None
            qos.ack(tag)
        assert client.hlen(key_prefix + "unacked") == 0
        client.close()
    assert item_tag(b'{"delivery_tag": "a", "headers": {"delivery_tag": "b"}}') is None  # twice: not told apart
