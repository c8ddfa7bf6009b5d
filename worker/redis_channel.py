"""kombu's Redis channel without a new client object for each task's bookkeeping.

With ``task_acks_late`` kombu's Redis transport keeps a copy of every task it delivers (``QoS.append``) and
drops it once the task is acknowledged (``QoS.ack``). Each of the two asks ``Channel.conn_or_acquire`` for a
client, and with none given it builds a new ``redis.Redis`` on the channel's connection pool: a copy of
redis-py's ~200 response callbacks each time, 0.2 ms of the worker's CPU, twice a task
(reports/profile/README.md, "The worker's CPU per task"). A ``redis.Redis`` holds no connection of its own (each
command borrows one from the pool) and is safe to share between threads, so one per pool does the same.

Only the synchronous client is shared; the channel's own (``Channel.client``, BRPOP's) is untouched.
"""

from __future__ import annotations

import threading
from typing import Any

import redis


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
