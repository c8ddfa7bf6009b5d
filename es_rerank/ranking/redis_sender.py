"""Scoring tasks sent to a Redis broker, and their results read from a Redis result backend, without Celery's
per-task machinery: the same messages and results, two round trips a search instead of six.

Celery's ``send_task`` and ``AsyncResult.get`` cost a search 5.4 ms of the gateway's CPU on Redis
(reports/profile/micro_broker.py): a new Redis client and a ``Producer`` per send, the message built
through ``as_task_v2`` and dumped twice, ``LLEN`` then ``LPUSH``, and for the result ``SUBSCRIBE``, ``GET``,
the wait, ``UNSUBSCRIBE`` and ``DEL``. ``RedisSender`` keeps a connection pool and one long-lived pub/sub
connection: a send is one script call (the queue's cap looked at and the task pushed at once, atomically),
and the result reaches its waiting thread from a reader thread, which has subscribed once to the pattern of
this sender's task ids (Celery's worker publishes each result on its key's channel). The waiter then deletes
the stored result; a result that comes after its caller gave up is deleted by the reader.

The workers do not change: the message is Celery's (``task_message``), the result is read with the
app's own result backend (``decode_result``: the worker's exceptions come back as Celery raises them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlparse

import redis
from celery import states
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.utils.nodenames import anon_nodename
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from es_rerank.ranking.task_message import TaskHeaders, message_fields, task_message

log = logging.getLogger(__name__)

# The queue's cap and the push in one step: no other sender's push comes between the look and this one's.
PUSH_UNDER_CAP = """
local queued = redis.call('LLEN', KEYS[1])
if queued >= tonumber(ARGV[1]) then return queued end
redis.call('LPUSH', KEYS[1], ARGV[2])
return -1
"""
# At the queue's cap, how long a send waits for a worker to take tasks off before it is refused (a quarter of the
# deadline at most), looking every CAP_POLL_S, and giving up once the queue has not gone down for CAP_STALL_S: a
# worker that is there takes a burst within milliseconds; a refusal in an outage costs CAP_STALL_S.
CAP_GRACE_S = 0.1
CAP_STALL_S = 0.02
CAP_POLL_S = 0.005
READ_WAIT_S = 1.0  # how often the reader looks whether it is closed, between results
RECONNECT_S = 0.2  # the reader's pause before it subscribes again after losing Redis


def glob_escaped(text: str) -> str:
    """``text`` matched literally in a Redis glob pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


class PendingResult:
    """One task's result on its way: ``get`` it, then ``forget`` it (its stored result deleted) or ``cancel``."""

    __slots__ = ("id", "key", "sender", "arrived", "data")

    def __init__(self, sender: RedisSender, task_id: str, key: bytes) -> None:
        self.id, self.key, self.sender = task_id, key, sender
        self.arrived = threading.Event()
        self.data: bytes | None = None

    def get(self, timeout: float) -> Any:
        """The task's result within ``timeout`` s; its failure raised as Celery raises it; ``celery.exceptions.
        TimeoutError`` when none came."""
        deadline = time.monotonic() + timeout
        while self.arrived.wait(max(deadline - time.monotonic(), 0)):
            meta = self.sender.backend.decode_result(self.data)
            if meta["status"] in states.PROPAGATE_STATES:
                raise meta["result"]
            if meta["status"] == states.SUCCESS:
                return meta["result"]
            self.arrived.clear()  # a state before the result (STARTED, RETRY): the result comes later
        raise CeleryTimeoutError("The operation timed out.")

    def forget(self) -> None:
        """Stop waiting, and delete the stored result if one came (one that comes later, the reader deletes)."""
        self.sender.release(self, stored=True)

    def cancel(self) -> None:
        """Stop waiting (the result store is not reachable: a result stored later expires by itself)."""
        self.sender.release(self, stored=False)


class RedisSender:
    """Sends ``rerank.score`` tasks to a Redis broker and reads their results from a Redis result backend.

    ``app`` is the callers' Celery app (``worker.celery_app.create_app`` or ``broker.client_app``) under
    ``dispatch.caller_config``: its broker, result backend, key prefixes and serialisation are used, never its
    connections. ``socket_wait_s`` bounds each wait on a socket (a Redis that does not answer: stopped).
    Use ``for_app``, which says None where the broker or the result backend is not plain Redis.
    """

    def __init__(self, app: Any, socket_wait_s: float) -> None:
        conf = app.conf
        self.backend = app.backend
        self.socket_wait_s = socket_wait_s
        self.queue_prefix = (conf.broker_transport_options or {}).get("global_keyprefix", "")
        prefix = self.backend.task_keyprefix  # with the backend's global key prefix
        self.key_prefix = prefix if isinstance(prefix, bytes) else prefix.encode()
        self.origin, self.reply_to = anon_nodename(), str(app.thread_oid)
        self.broker = self._client(conf.broker_url)
        same = conf.result_backend == conf.broker_url
        self.results = self.broker if same else self._client(conf.result_backend)
        self._push = self.broker.register_script(PUSH_UNDER_CAP)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._fork_state()

    @classmethod
    def for_app(cls, app: Any, socket_wait_s: float) -> RedisSender | None:
        """A sender for ``app``'s broker and result backend when both are plain Redis (``redis://``); else None."""
        from celery.backends.redis import RedisBackend

        urls = (app.conf.broker_url, app.conf.result_backend)
        if not all(isinstance(url, str) and urlparse(url).scheme == "redis" and ";" not in url for url in urls):
            return None  # RabbitMQ, rpc://, TLS, Sentinel, fail-over lists: Celery's own path
        if type(app.backend) is not RedisBackend:
            return None
        return cls(app, socket_wait_s)

    def _client(self, url: str) -> redis.Redis:
        # No retries: a caller with a deadline gives up at the first failure (as dispatch.caller_config tells Celery).
        timeout = self.socket_wait_s
        return redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )

    def _fork_state(self) -> None:
        """The state of this process's reader: none yet (a forked process starts its own)."""
        self._pid = os.getpid()
        token = str(uuid.uuid4())
        self._token = token[:19]  # xxxxxxxx-xxxx-4xxx-: the task ids of this process's sender start so
        self._waiting: dict[bytes, PendingResult] = {}
        self._ready = threading.Event()  # subscribed: results reach their waiters
        self._settled = threading.Event()  # subscribed, or the last try failed (``_broken`` says why)
        self._broken = ""
        self._reader: threading.Thread | None = None

    def pending(self) -> PendingResult:
        """A new task id, its result awaited from now on (before the task is sent: a fast result is not missed)."""
        self._start()
        task_id = self._token + str(uuid.uuid4())[19:]
        pending = PendingResult(self, task_id, self.key_prefix + task_id.encode())
        with self._lock:
            self._waiting[pending.key] = pending
        return pending

    def send(self, payload: dict[str, Any], task: TaskHeaders, cap: int | None, deadline: float) -> int | None:
        """Push the task unless ``cap`` tasks wait on its queue: None when sent, else how many wait.

        ``redis.exceptions.RedisError`` when Redis cannot be reached, or its results are not subscribed to by
        ``deadline`` (``time.monotonic``) or within one socket wait.
        """
        self._settled.wait(max(min(deadline - time.monotonic(), self.socket_wait_s), 0))
        if not self._ready.is_set():
            raise redis.exceptions.ConnectionError(self._broken or "the result channel was not subscribed in time")
        message = task_message(payload, message_fields(task))
        queue = self.queue_prefix + task.queue
        if cap is None:
            self.broker.lpush(queue, message)
            return None
        queued = int(self._push(keys=[queue], args=[cap, message]))
        if queued >= 0:
            queued = self._push_once_taken(queue, cap, message, queued, deadline)
        return None if queued < 0 else queued

    def _push_once_taken(self, queue: str, cap: int, message: bytes, queued: int, deadline: float) -> int:
        """At the cap: push once a worker has taken tasks off below it; -1 then, else how many still wait.

        A burst of searches can push faster than a busy worker pops (one at a time), as sends that took turns
        through Celery could not: wait while the queue goes down, up to ``CAP_GRACE_S`` (a quarter of what is left
        of the deadline at most); a queue that does not go down for ``CAP_STALL_S`` has no worker taking from it.
        """
        now = time.monotonic()
        grace_end, last_taken = now + min(CAP_GRACE_S, max(deadline - now, 0) / 4), now
        while queued >= 0 and time.monotonic() < min(grace_end, last_taken + CAP_STALL_S):
            time.sleep(CAP_POLL_S)
            waiting = int(self.broker.llen(queue))
            if waiting < queued:
                last_taken = time.monotonic()
            queued = waiting
            if waiting < cap:  # the script looks again, and pushes if it still may
                queued = int(self._push(keys=[queue], args=[cap, message]))
        return queued

    def headers(self, task_id: str, name: str, queue: str, expires_s: float, argsrepr: str) -> TaskHeaders:
        """The headers of one send of task ``name`` from this process."""
        return TaskHeaders(task_id, name, queue, expires_s, argsrepr, self.origin, self.reply_to)

    def release(self, pending: PendingResult, stored: bool) -> None:
        """Stop waiting for ``pending``; ``stored``: delete its result too, if one came (``RedisError`` if that fails).

        A result that comes after this, the reader deletes: a search that waited out its deadline on a Redis that
        stopped answering does not wait once more for a ``DEL``.
        """
        with self._lock:
            self._waiting.pop(pending.key, None)
            came = pending.data is not None
        if stored and came:
            self.results.delete(pending.key)

    def _start(self) -> None:
        """Start this process's reader, once (again in a forked child)."""
        if self._reader is not None and self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                self._fork_state()
            if self._reader is None:
                self._reader = threading.Thread(target=self._read, name="esrr-results", daemon=True)
                self._reader.start()

    def _read(self) -> None:
        """The reader: subscribe, hand each result to its waiter; subscribe again after losing Redis; until closed."""
        pattern = glob_escaped(self.key_prefix.decode()) + glob_escaped(self._token) + "*"
        while not self._closed.is_set():
            pubsub = self.results.pubsub()
            try:
                self._subscribe(pubsub, pattern)
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=READ_WAIT_S)
                    if message is not None and message["type"] == "pmessage":
                        self._deliver(message["channel"], message["data"])
            except (RedisError, OSError, ValueError) as error:  # ValueError: its socket closed under it (close)
                if not self._closed.is_set():  # said once an outage; its retries, every RECONNECT_S, at debug
                    level = logging.WARNING if self._ready.is_set() else logging.DEBUG
                    log.log(level, "the result channel %s* broke (%s): subscribing again", self._token, error)
                self._broken = str(error)
                self._ready.clear()
                self._settled.set()
            finally:
                self._ready.clear()
                pubsub.close()
            self._closed.wait(RECONNECT_S)

    def _subscribe(self, pubsub: Any, pattern: str) -> None:
        """Subscribe to ``pattern``; once Redis confirms, read the results stored meanwhile, and say ready."""
        pubsub.psubscribe(pattern)
        while not self._closed.is_set():
            message = pubsub.get_message(timeout=READ_WAIT_S)
            if message is not None and message["type"] == "psubscribe":
                break
        with self._lock:
            keys = list(self._waiting)
        if keys:  # stored while this process was not subscribed (Redis restarted under a waiting search)
            for key, data in zip(keys, self.results.mget(keys)):
                if isinstance(data, bytes):
                    self._deliver(key, data)
        self._ready.set()
        self._settled.set()

    def _deliver(self, key: bytes, data: bytes) -> None:
        """Hand ``data``, the result stored at ``key``, to its waiter; a result nobody waits for is deleted."""
        with self._lock:  # with ``release``'s look at ``data``: either it deletes the result, or this does
            pending = self._waiting.get(key)
            if pending is not None:
                pending.data = data
        if pending is None:
            self.results.delete(key)  # its caller gave up: nobody reads it
            return
        pending.arrived.set()

    def close(self) -> None:
        """Close the connections; the reader ends at its next look (within ``READ_WAIT_S``), its socket closed."""
        self._closed.set()
        self.broker.close()
        self.results.close()
