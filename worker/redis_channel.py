"""kombu's Redis channel, cheaper per task: one client for its bookkeeping, and its unacknowledged copy unparsed.

With ``task_acks_late`` kombu's Redis transport keeps a copy of every task it delivers (``QoS.append``) and
drops it once the task is acknowledged (``QoS.ack``). Each of the two asks ``Channel.conn_or_acquire`` for a
client, and with none given it builds a new ``redis.Redis`` on the channel's connection pool: a copy of
redis-py's ~200 response callbacks each time, 0.2 ms of the worker's CPU, twice a task
(reports/profile/README.md, "The worker's CPU per task"). A ``redis.Redis`` holds no connection of its own (each
command borrows one from the pool) and is safe to share between threads, so one per pool does the same.

Only the synchronous client is shared; the channel's own (``Channel.client``, BRPOP's) is untouched.

The copy itself is ``[message, exchange, routing_key]`` in JSON, the message being the envelope kombu has just
parsed from the item BRPOP popped (140 KB for 500 documents): kombu dumps it again, 0.45 ms of JSON a task.
``ItemCopy`` writes the item's own text in its place, the same JSON value: kombu reads a copy back (to deliver
it again after ``ESRR_VISIBILITY_TIMEOUT_S``) with ``json.loads``, which gives the same envelope either way. The
poison screen (``worker.poison.BrokerScreen``) hands it each item it lets through; a message not made from
that item (its delivery tag not the one the item holds, once) is copied kombu's way.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import redis
from kombu.transport import virtual

TAG_KEY = b'"delivery_tag": "'  # unescaped quotes: a key of the envelope, never text inside one of its strings


class SharedClient:
    """``Channel._create_client`` answering one synchronous client per connection pool (a new pool: a new one)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.create = channel._create_client
        self.client: redis.Redis | None = None
        self.lock = threading.Lock()

    def __call__(self, asynchronous: bool = False) -> Any:
        """The channel's client: the shared one, or a new asynchronous one as kombu makes it."""
        if asynchronous:
            return self.create(asynchronous=True)
        pool = self.channel.pool  # kombu makes a new pool after a disconnect: the client follows
        with self.lock:
            if self.client is None or self.client.connection_pool is not pool:
                self.client = self.create()
            return self.client


def share_client(channel: Any) -> None:
    """Let ``channel``, a kombu Redis channel, build its synchronous client once; another channel is left alone."""
    if channel is None or isinstance(getattr(channel, "_create_client", None), SharedClient):
        return
    if not isinstance(getattr(channel, "client", None), redis.Redis):  # AMQP: no Redis client to share
        return
    channel._create_client = SharedClient(channel)


def item_tag(item: bytes) -> str | None:
    """The delivery tag of an envelope's bytes, where its key occurs once (as ``json.dumps`` writes it); else None."""
    if item.count(TAG_KEY) != 1:
        return None
    start = item.index(TAG_KEY) + len(TAG_KEY)
    end = item.find(b'"', start)
    return item[start:end].decode("utf-8", "replace") if end > 0 else None


class ItemCopy:
    """``QoS.append`` that stores the delivered item's own text as kombu's unacknowledged copy."""

    def __init__(self, qos: Any) -> None:
        self.qos = qos
        self.kombus = qos.append
        self.item: bytes | None = None  # the last item the screen let through, until a message takes it

    def remember(self, item: bytes) -> None:
        """The screen's hook: ``item`` is about to become a message."""
        self.item = item

    def __call__(self, message: Any, delivery_tag: str) -> None:
        """Keep ``message``'s unacknowledged copy: the item's text when the message is the item's, else kombu's."""
        item, self.item = self.item, None
        if item is None or item_tag(item) != delivery_tag:
            self.kombus(message, delivery_tag)
            return
        delivery = message.delivery_info
        copy = b"".join(
            [b"[", item, b", ", json.dumps(delivery["exchange"]).encode(), b", "]
            + [json.dumps(delivery["routing_key"]).encode(), b"]"]
        )
        with self.qos.pipe_or_acquire() as pipe:  # kombu's QoS.append, with the copy above
            pipe.zadd(self.qos.unacked_index_key, {delivery_tag: time.time()})
            pipe.hset(self.qos.unacked_key, delivery_tag, copy)
            pipe.execute()
        virtual.QoS.append(self.qos, message, delivery_tag)


def copy_items(channel: Any, screen: Any) -> None:
    """Let ``channel``'s QoS copy the items ``screen`` (a ``BrokerScreen``) lets through as they are; once."""
    qos = getattr(channel, "qos", None)
    if qos is None or isinstance(qos.append, ItemCopy) or screen is None:
        return
    copier = ItemCopy(qos)
    qos.append = copier
    screen.passed = copier.remember
