"""A kombu Redis channel builds its synchronous client once (``worker.redis_channel``), and the worker's tasks are
still copied and acknowledged through it."""

from __future__ import annotations

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
