"""Messages on the task queue that are not tasks: logged in one line, kept in a capped Redis list, dropped.

Celery ends the worker ("Unrecoverable error") on a message it cannot turn into a task
request (celery/celery#7975, #4308; kombu#2421 is the same on SQS). Measured with a real
worker and Redis, two places let an error out:

1. kombu's Redis channel decodes each item that BRPOP pops as a JSON envelope and builds
   its ``Message`` with no guard (``Channel._brpop_read``, ``Message.__init__``,
   ``QoS.append``): ``redis-cli LPUSH rerank 'not json'``, ``'[1]'``, ``'{"properties": []}'``,
   a delivery tag that is a list, a body that is not base64. ``on_decode_error`` is never
   reached. The hook used here is redis-py's response callback of the channel's client
   (``Redis.set_response_callback``), which ``parse_response`` applies to the reply that
   ``_brpop_read`` (and ``_get``, RPOP) then decode: ``screen_reply`` checks the item the way
   kombu will read it and answers "nothing popped" for poison, which kombu already handles
   as an empty queue. The item has left the list and never enters the unacked set.
2. Celery's strategy builds the request (``celery.worker.request.Request``) outside the
   handlers it has for invalid tasks: a ``rerank.score`` envelope whose body is not
   ``[args, kwargs, embed]`` raises ``ValueError`` there, and the message, already unacked
   (``task_acks_late``), comes back after the visibility timeout to end the next worker.
   ``PoisonProofConsumer.create_task_handler`` (the consumer class is Celery's
   ``worker_consumer`` setting; the event loop asks it for the handler at each start)
   rejects those without requeueing, the way Celery's own ``on_invalid_task`` does.

Both log one WARNING line (queue, size, reason, the first bytes) and, on Redis, push a
record onto ``esrr.poison`` (under the broker's key prefix), trimmed to the last
``ESRR_POISON_KEPT`` records of at most ``KEPT_BYTES`` each: evidence for an operator
(``redis-cli LRANGE esrr.poison 0 -1``) that cannot grow without bound.
"""

from __future__ import annotations

import binascii
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from celery.worker.consumer import Consumer
from kombu.utils.json import loads as kombu_loads
from vine import promise

log = logging.getLogger(__name__)

POISON_LIST = "esrr.poison"
KEPT_BYTES = 64 << 10  # of each message kept: a record is evidence, not a copy to replay
# A rerank.score envelope is at most ~0.5 MB (1,000 documents' ids uncompressed, 18 Lex features each,
# base64 twice); anything far larger is not one, and is dropped before it is parsed.
MAX_ENVELOPE_BYTES = 4 << 20
# Raised while Celery turns a well-formed envelope into a request, by data of the wrong shape.
_MALFORMED_REQUEST = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def envelope_problem(item: bytes, codecs: dict[str, Any]) -> str | None:
    """What keeps kombu's Redis channel from delivering ``item`` as a message (None: nothing).

    ``codecs`` are the channel's body codecs (``{"base64": ...}``). Checks what kombu's
    ``Message`` and the Redis ``QoS`` read, with kombu's own JSON decoder.
    """
    if len(item) > MAX_ENVELOPE_BYTES:
        return f"{len(item)} bytes, more than the {MAX_ENVELOPE_BYTES} a task envelope of this service can be"
    try:
        envelope = kombu_loads(item.decode("utf-8"))
    except (ValueError, TypeError, KeyError, RecursionError) as error:  # a bad kombu type marker: Key/TypeError
        return f"not a JSON envelope ({type(error).__name__})"
    if not isinstance(envelope, dict):
        return f"a JSON {type(envelope).__name__}, not an envelope object"
    properties = envelope.get("properties")
    if not isinstance(properties, dict):
        return "no 'properties' object"
    if not isinstance(properties.get("delivery_tag"), str):
        return "no string 'properties.delivery_tag'"
    info = properties.get("delivery_info")
    if not (
        isinstance(info, dict) and isinstance(info.get("exchange"), str) and isinstance(info.get("routing_key"), str)
    ):
        return "no 'properties.delivery_info' with a string exchange and routing_key"
    headers = envelope.get("headers")
    if headers is not None and not isinstance(headers, dict):
        return "'headers' is not an object"
    if headers and "compression" in headers:
        return "a compressed body; this service sends none"  # kombu would inflate it, however large
    for key in ("content-type", "content-encoding"):
        if not isinstance(envelope.get(key), (str, type(None))):
            return f"'{key}' is not a string"
    body, encoding = envelope.get("body"), properties.get("body_encoding")
    if body is not None and not isinstance(body, str):
        return "'body' is not a string"
    if body and encoding is not None:
        codec = codecs.get(encoding) if isinstance(encoding, str) else None
        if codec is None:
            return f"body_encoding {encoding!r}, which kombu cannot decode"
        try:
            codec.decode(body)
        except (ValueError, binascii.Error, TypeError):
            return f"a body that is not valid {encoding}"
    return None


def keep(client: redis.Redis, key: str, record: dict[str, Any], kept: int) -> None:
    """Push ``record`` onto the list ``key``, trimmed to the last ``kept`` records (0: keep none)."""
    if kept <= 0:
        return
    with client.pipeline() as pipe:
        pipe.lpush(key, json.dumps(record))
        pipe.ltrim(key, 0, kept - 1)
        pipe.execute()


def poison_record(queue: str, problem: str, message: bytes) -> dict[str, Any]:
    """What is logged and kept of one poison message."""
    return {
        "queue": queue,
        "problem": problem,
        "bytes": len(message),
        "at": time.time(),
        "message": message[:KEPT_BYTES].decode("utf-8", "backslashreplace"),
    }


def _report(record: dict[str, Any]) -> None:
    log.warning(
        "dropped a message on queue %s that is not a task: %s (%d bytes, starting %r); kept in %s",
        record["queue"],
        record["problem"],
        record["bytes"],
        record["message"][:120],
        POISON_LIST,
    )


class BrokerScreen:
    """The response callbacks that keep poison from kombu's Redis channel, with where to keep what they drop."""

    def __init__(self, channel: Any, kept: int) -> None:
        self.channel, self.kept = channel, kept
        self.prefix = getattr(channel, "global_keyprefix", "") or ""
        self.passed: Callable[[bytes], None] | None = None  # told each item let through (worker.redis_channel)

    def install(self, client: redis.Redis) -> None:
        """Screen the replies of BRPOP (consuming) and RPOP (``basic_get``) that ``client`` parses."""
        client.set_response_callback("BRPOP", self.screen_brpop)
        client.set_response_callback("RPOP", self.screen_rpop)

    def screen_brpop(self, response: Any, **_: Any) -> tuple[bytes, bytes] | None:
        """BRPOP's reply as redis-py gives it (``(key, item)`` or None), None for poison."""
        if not response:
            return None
        key, item = response
        if self.is_poison(key, item):
            return None
        if self.passed is not None:
            self.passed(item)
        return key, item

    def screen_rpop(self, response: Any, **_: Any) -> Any:
        """RPOP's reply, None for poison (a list, from RPOP with a count, is kombu's business)."""
        if isinstance(response, bytes):
            if self.is_poison(b"", response):
                return None
            if self.passed is not None:
                self.passed(response)
        return response

    def is_poison(self, key: bytes, item: bytes) -> bool:
        """Whether ``item`` is poison; if so it is logged and kept."""
        problem = envelope_problem(item, self.channel.codecs)
        if problem is None:
            return False
        queue = key.decode("utf-8", "replace").removeprefix(self.prefix).split(self.channel.sep, 1)[0]
        record = poison_record(queue or "?", problem, item)
        _report(record)
        try:
            keep(redis.Redis(connection_pool=self.channel.pool), self.prefix + POISON_LIST, record, self.kept)
        except redis.RedisError as error:
            log.warning("could not keep the dropped message in %s: %s", POISON_LIST, error)
        return True


class PoisonProofConsumer(Consumer):
    """Celery's consumer, with poison screened off the Redis channel and malformed requests rejected."""

    screen: BrokerScreen | None = None  # the task channel's, on Redis

    def create_task_handler(self, promise: type[promise] = promise) -> Callable[[Any], Any]:
        """Celery's handler of task messages, for a consumer that survives the ones it cannot read."""
        self._screen_broker()
        receive = super().create_task_handler(promise)

        def on_task_received(message: Any) -> Any:
            try:
                return receive(message)
            except _MALFORMED_REQUEST as error:  # raised building the request: the task itself never ran
                self._reject_malformed(message, error)
                return None

        return on_task_received

    def _kept(self) -> int:
        settings = getattr(self.app, "esrr_settings", None)
        return settings.poison_kept if settings is not None else 100

    def _screen_broker(self) -> None:
        channel = getattr(self.task_consumer, "channel", None)  # type: ignore[attr-defined]  # not in celery-types
        client = getattr(channel, "client", None)  # kombu's Redis channel; AMQP parses no JSON envelope
        if isinstance(client, redis.Redis):
            self.screen = BrokerScreen(channel, self._kept())
            self.screen.install(client)

    def _reject_malformed(self, message: Any, error: Exception) -> None:
        info = message.delivery_info or {}
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode("utf-8", "replace")
        record = poison_record(
            str(info.get("routing_key", "?")),
            f"a task message Celery cannot read ({type(error).__name__}: {error})"[:300],
            body,
        )
        _report(record)
        # not requeued: it would fail again (connection_errors: Celery's, not in celery-types' Consumer)
        message.reject_log_error(log, self.connection_errors)  # type: ignore[attr-defined]
        channel = getattr(message, "channel", None)
        if channel is not None and isinstance(getattr(channel, "client", None), redis.Redis):
            prefix = getattr(channel, "global_keyprefix", "") or ""
            try:
                keep(redis.Redis(connection_pool=channel.pool), prefix + POISON_LIST, record, self._kept())
            except redis.RedisError as keep_error:
                log.warning("could not keep the rejected message in %s: %s", POISON_LIST, keep_error)
