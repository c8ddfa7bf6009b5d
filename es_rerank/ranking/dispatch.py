"""The model's scores from a running worker: one ``rerank.score`` task per query, sent by name.

A ``pipeline.Reranker`` for a process that does not hold the model: it builds the
request here (Lex features, first tokens; ``es_rerank.payload``), sends it through the
broker to the task named ``TASK_NAME`` and waits for the scores. Torch-free, and it
never imports the worker's code: the Celery app it sends with is configuration only.

Deadline: the task is sent with ``expires`` = the deadline, so a worker that reaches it
late drops it instead of scoring for nobody, and the caller stops waiting then.
No answer in time, or no broker, raises ``ScoringUnavailable``: the pipeline keeps
BM25's order for that query and says why. A worker that refuses the request
(``PayloadError``, ``WorkerSetupError``) would refuse every query the same way, so that
passes through with its fix. A result once read (or given up on) is deleted from the result
backend (``AsyncResult.forget``): nobody reads it again, and each kept 6.5 KB in Redis for
``ESRR_RESULT_EXPIRES_S``; only a worker's answer that comes after its caller gave up stays
that long.

Sending: on a Redis broker with a Redis result backend (the default), through ``redis_sender.RedisSender``,
which publishes Celery's own message and reads Celery's own result with two round trips a search (a scoring
call 0.57 of Celery's CPU, reports/profile/README.md); anywhere else (RabbitMQ, ``rpc://``) through
``send_task`` and ``AsyncResult``. Both keep what follows.

Outages: a ``breaker.CircuitBreaker`` stops sending after repeated failures (searches
then fall back at once, before any request is built). And a task nobody waits for must
not stay on the broker for ever: where the transport honours a message TTL (RabbitMQ)
each task carries the deadline as one; on Redis, which does not, the queue's length is
looked at before each send (``LLEN``) and no task is sent while ``max_queued`` wait there,
so an outage leaves at most ``max_queued`` tasks behind. ``RedisSender`` looks and pushes in one
script, atomically; through Celery, sends of one process take turns, and one per other process
that sends to the queue may come between a look and its send.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url

from es_rerank.backends.base import Hit
from es_rerank.lex import LEX3, UnknownFeatureError
from es_rerank.payload import TASK_NAME, LexFeaturesMismatch, PayloadError, build_request, encode, result_scores
from es_rerank.ranking.breaker import CLOSED, CircuitBreaker
from es_rerank.ranking.pipeline import ScoringUnavailable, StageClock, no_clock
from es_rerank.ranking.redis_sender import PendingResult, RedisSender
from es_rerank.settings import MAX_GATEWAY_THREADS
from es_rerank.stats import CorpusStats

log = logging.getLogger(__name__)
UNANSWERED_NAME = "worker"  # the ranker's name until a worker has said which model it serves
try:  # a Redis that answers wrongly (another protocol on the port, a database number it lacks)
    from redis.exceptions import RedisError

    REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError,)
except ImportError:  # RabbitMQ only
    REDIS_ERRORS = ()


# The socket waits that can time out one after another in one call to a Redis that accepts
# connections but never answers (seen with SIGSTOP): the result backend's subscribe on a new
# connection, then its one reconnect, which first reads the pending results. A send only follows a
# subscribe that worked, and fails at its first wait.
SOCKET_WAITS = 2
# kombu's virtual transports (Redis) base64 the task's body inside their JSON envelope by default: 140 KB of JSON
# once more, which the worker decodes by the message's own ``body_encoding``. Sent as it is, a scoring call costs
# the gateway 0.93 of the CPU (reports/profile/README.md); the worker reads both.
SEND_BODY_AS_IS = {"body_encoding": None}


def caller_config(conf: Any, deadline_s: float) -> dict[str, Any]:
    """Celery settings that bound a caller's waits on the broker and result backend by ``deadline_s``.

    Celery's defaults suit a worker, which should ride out a broker restart: 20
    reconnects a second apart, sockets without timeouts. A caller with a deadline
    gives up at the first failure instead, and each socket wait gets
    1/``SOCKET_WAITS`` of the deadline: a Redis that accepts connections but never
    answers (a stopped process) costs about the deadline, not one per wait, and the
    broker connection pool has room for every thread of a gateway.
    ``conf`` is the app's configuration, whose transport options are kept. The result
    backend's retry policy applies to Redis (not to ``rpc://``).
    """
    give_up = {"max_retries": 0, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
    socket_s = deadline_s / SOCKET_WAITS
    # Celery's pool of 10 broker connections made an eleventh send at once wait for a connection, a
    # wait no deadline bounds; connections open only as sends overlap. No limit (None, 0) means no
    # pool, where nothing waits.
    pool = conf.broker_pool_limit
    sockets = {"socket_timeout": socket_s, "socket_connect_timeout": socket_s}
    return {
        "broker_transport_options": {
            **(conf.broker_transport_options or {}),
            **give_up,
            **sockets,
            **SEND_BODY_AS_IS,
        },
        "broker_connection_timeout": socket_s,
        "broker_pool_limit": max(pool, MAX_GATEWAY_THREADS) if pool else pool,
        "result_backend_transport_options": {**(conf.result_backend_transport_options or {}), "retry_policy": give_up},
        "redis_socket_timeout": socket_s,
        "redis_socket_connect_timeout": socket_s,
    }


def queued_tasks(channel: Any, queue: str) -> int | None:
    """Tasks waiting on ``queue`` (Redis: the length of its list); None where the transport counts none cheaply.

    kombu's Redis channel client adds the key prefix (``ESRR_BROKER_KEY_PREFIX``); tasks
    sent without a priority wait on the queue's own list.
    """
    if getattr(channel.connection, "driver_type", None) != "redis":
        return None
    return int(channel.client.llen(queue))


def payload_summary(payload: dict[str, Any]) -> str:
    """A short description of a scoring payload, shown for its arguments by a broker monitor."""
    return (
        f"[<{payload.get('n')} documents of index {payload.get('stats_version')!r}, query "
        f"{payload.get('query_tokens')!r}>]"
    )


class WorkerReranker:
    """Scores from whichever worker consumes ``queue``, each query within ``deadline_s`` (a ``pipeline.Reranker``).

    ``client`` is a Celery app with the workers' broker and result backend
    (``worker.celery_app.create_app``), not yet used: it only sends, under
    ``caller_config``. ``lex_names`` is the first guess at the served model's Lex features:
    a worker whose model reads others says which, and the reranker follows it (a model
    trained after the gateway started). Through Celery, whose result consumer drains once a
    second, a wait past the deadline ends at the next whole second; through ``RedisSender``, at
    the deadline. ``breaker``, when given, skips the workers during an outage; ``max_queued``
    (Redis) is the most tasks left waiting on the queue before a send is refused. ``direct``
    False sends through Celery on Redis too (the sender's measure and test compare the two).
    Safe to share between threads.
    """

    def __init__(
        self,
        client: Any,
        queue: str,
        deadline_s: float,
        lex_names: Sequence[str] = LEX3,
        breaker: CircuitBreaker | None = None,
        max_queued: int | None = None,
        *,
        direct: bool = True,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be above 0, got {deadline_s}")
        if max_queued is not None and max_queued < 1:
            raise ValueError(f"max_queued must be at least 1 (or None), got {max_queued}")
        client.conf.update(caller_config(client.conf, deadline_s))
        self.client = client
        # Redis broker and results: our own sender (two round trips a search); RabbitMQ, rpc://: Celery's path.
        self._sender = RedisSender.for_app(client, deadline_s / SOCKET_WAITS) if direct else None
        self.broker = maybe_sanitize_url(client.conf.broker_url)  # for messages: no password
        self.queue = queue
        self.deadline_s = deadline_s
        self.lex_names = tuple(lex_names)
        self.breaker = breaker
        self.max_queued = max_queued
        self._sending = threading.Lock()  # one look-then-send at a time, so the queue's cap holds in this process
        self._answered = threading.local()  # which model answered this thread's last query

    @property
    def name(self) -> str:
        """The model that answered this thread's last query, as the worker named it."""
        return getattr(self._answered, "model", UNANSWERED_NAME)

    @property
    def available(self) -> bool:
        """Whether searches are sent to the workers now (False while the breaker skips them)."""
        return self.breaker is None or self.breaker.state == CLOSED

    def skipping(self) -> str | None:
        """Why a query would skip the workers now (the breaker is open), without admitting one; None: it would not."""
        return self.breaker.skipping() if self.breaker is not None else None

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        """float32 [len(hits)] scores from a worker; ``ScoringUnavailable`` when none answers in time."""
        started = time.monotonic()
        skipped = self.breaker.admit() if self.breaker is not None else None
        if skipped is not None:  # before the request is built: an outage costs the searches nothing
            raise ScoringUnavailable(skipped)
        try:
            with clock("features"):
                payload = encode(build_request(query, [h.terms for h in hits], stats, self.lex_names))
        except BaseException:
            if self.breaker is not None:
                self.breaker.abandoned()
            raise
        with clock("model"):
            try:
                result = self.answer(payload, started + self.deadline_s)
            except LexFeaturesMismatch as mismatch:
                result = self._follow(mismatch, query, hits, stats, started + self.deadline_s)
        scores = result_scores(result, len(hits))
        self._answered.model = str(result.get("model") or UNANSWERED_NAME)
        return scores

    def _follow(
        self, mismatch: LexFeaturesMismatch, query: str, hits: Sequence[Hit], stats: CorpusStats, deadline: float
    ) -> Any:
        """The worker's answer to the request built again with the Lex features its model reads, which later
        searches use too; ``ScoringUnavailable`` (BM25's order, with why) when they cannot be built here."""
        followed = mismatch.served
        try:
            payload = encode(build_request(query, [h.terms for h in hits], stats, followed))
        except (PayloadError, UnknownFeatureError) as error:  # a model newer than this gateway's code
            raise ScoringUnavailable(f"{mismatch}; this gateway cannot compute them ({error}): upgrade it") from None
        log.warning(
            "the worker's model reads the Lex features %s, not %s: following it (ESRR_LEX_FEATURES=%s "
            "makes that the first guess)",
            list(followed),
            list(self.lex_names),
            ",".join(followed),
        )
        try:
            result = self.answer(payload, deadline)
        except LexFeaturesMismatch as again:  # workers of two models on one queue
            raise ScoringUnavailable(
                f"the workers on queue {self.queue!r} serve models of different Lex features "
                f"({list(followed)}, then {list(again.served)}); serve one model per "
                "queue"
            ) from None
        self.lex_names = followed
        return result

    def answer(self, payload: dict[str, Any], deadline: float) -> Any:
        """The result for an encoded ``payload`` by ``deadline`` (``time.monotonic``), its outcome told to the
        breaker (a worker's refusal is an answer)."""
        if self.breaker is None:
            return self._answer(payload, deadline)
        try:
            result = self._answer(payload, deadline)
        except ScoringUnavailable as error:
            self.breaker.failed(str(error))
            raise
        except BaseException:
            self.breaker.succeeded()  # the worker's own failure: it is there
            raise
        self.breaker.succeeded()
        return result

    def _capped(self, queued: int) -> ScoringUnavailable:
        """Why a task was not sent: ``queued`` tasks wait on the queue, its cap."""
        return ScoringUnavailable(
            f"{queued} tasks wait on queue {self.queue!r} at {self.broker}, its cap "
            f"(ESRR_QUEUE_MAX_TASKS={self.max_queued}): no worker is taking them; start one with "
            "`esrr worker start`, or raise the cap if the workers are only busy"
        )

    def _send(self, payload: dict[str, Any], task_id: str, deadline: float) -> None:
        """Send the task unless ``max_queued`` tasks wait already; ``ScoringUnavailable`` then, or past ``deadline``."""
        if self._sender is not None:  # the cap is looked at with the push, atomically: no turns to take
            left = max(deadline - time.monotonic(), 0.001)
            task = self._sender.headers(task_id, TASK_NAME, self.queue, left, payload_summary(payload))
            queued = self._sender.send(payload, task, self.max_queued, deadline)
            if queued is not None:
                raise self._capped(queued)
            return
        # A send waits at most one socket wait on a broker that does not answer: take a turn only while one fits.
        if not self._sending.acquire(timeout=max(deadline - time.monotonic() - self.deadline_s / SOCKET_WAITS, 0)):
            raise ScoringUnavailable(
                f"cannot reach the broker at {self.broker}: the send before this one waited "
                f"on it past this search's {self.deadline_s:g} s; check ESRR_BROKER_URL and that "
                "it runs"
            )
        try:
            with self.client.producer_or_acquire() as producer:
                cap = self.max_queued
                queued = queued_tasks(producer.channel, self.queue) if cap is not None else None
                if queued is not None and cap is not None and queued >= cap:
                    raise self._capped(queued)
                left = max(deadline - time.monotonic(), 0.001)
                # expires: a worker drops it late; expiration: a broker with message TTLs (RabbitMQ) drops it
                # unconsumed. retry=False: a broker that is down fails now, not after retries outlast the deadline.
                # argsrepr: what a broker monitor shows of the arguments; Celery's own, a repr of the 140 KB
                # payload cut to 1 KB, cost 0.3 ms of a search's CPU (reports/profile/micro.py).
                self.client.send_task(
                    TASK_NAME,
                    args=[payload],
                    queue=self.queue,
                    task_id=task_id,
                    expires=left,
                    expiration=left,
                    retry=False,
                    producer=producer,
                    argsrepr=payload_summary(payload),
                    kwargsrepr="{}",
                )
        finally:
            self._sending.release()

    def _answer(self, payload: dict[str, Any], deadline: float) -> Any:
        """The task's result, by ``deadline`` (a ``time.monotonic`` time); its stored result is deleted once read."""
        # Our own id: a send that fails half-way has subscribed to it, and must unsubscribe.
        pending = self._sender.pending() if self._sender is not None else self.client.AsyncResult(str(uuid.uuid4()))
        connection_errors = (OperationalError, *REDIS_ERRORS, *getattr(self.client.backend, "connection_errors", ()))
        # Celery gives up reconnecting to the result store with a RuntimeError raised from the last connection error.
        unreachable = (RuntimeError, *connection_errors)
        try:
            self._send(payload, pending.id, deadline)
            result = pending.get(timeout=max(deadline - time.monotonic(), 0.001))
        except CeleryTimeoutError:
            self._forget(pending, unreachable, stored=True)  # a result the worker stores later lives result_expires_s
            raise ScoringUnavailable(
                f"no worker answered on queue {self.queue!r} at {self.broker} within "
                f"{self.deadline_s:g} s; start one with `esrr worker start`, or raise "
                "ESRR_SCORE_DEADLINE_S"
            ) from None
        except ScoringUnavailable:  # refused before it was sent: Celery subscribed nothing; our sender stops waiting
            if isinstance(pending, PendingResult):
                pending.cancel()
            raise
        except TaskRevokedError:  # it expired in the queue: the workers were busy
            self._forget(pending, unreachable, stored=True)
            raise ScoringUnavailable(
                f"the task waited on queue {self.queue!r} past its {self.deadline_s:g} s: "
                "the workers are busy; add workers, or raise ESRR_SCORE_DEADLINE_S"
            ) from None
        except unreachable as error:
            if isinstance(error, RuntimeError) and not isinstance(error.__cause__, connection_errors):
                self._forget(pending, unreachable, stored=True)
                raise  # the worker's own failure (e.g. WorkerSetupError): every query would meet it
            self._forget(pending, unreachable)
            cause = "" if isinstance(error, RuntimeError) else f" ({error})"
            raise ScoringUnavailable(
                f"cannot reach the broker or its result backend at {self.broker}{cause}; check "
                "ESRR_BROKER_URL (and ESRR_RESULT_BACKEND) and that they run"
            ) from None
        self._forget(pending, unreachable, stored=True)
        return result

    def _forget(self, pending: Any, failing: tuple[type[BaseException], ...] = (), stored: bool = False) -> None:
        """Stop tracking a task (left to ``AsyncResult.__del__``, exit prints a traceback); ``stored``: delete its
        stored result too, which nobody reads again (a search each kept 6.5 KB in Redis for result_expires_s)."""
        try:
            if stored:
                pending.forget()
            elif isinstance(pending, PendingResult):
                pending.cancel()
            else:
                self.client.backend.remove_pending_result(pending)
        except failing:  # the result backend broke since: the result expires by itself; the caller reports the rest
            pass

    def close(self) -> None:
        """Close the app's connections to the broker and the result backend, and the sender's."""
        if self._sender is not None:
            self._sender.close()
        self.client.close()

    def __enter__(self) -> WorkerReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
