"""The worker's Celery consumer (the ``worker_consumer`` setting): poison screened, a lost Redis survived.

Celery 5.7 ends a worker whose Redis connection is lost while it holds unacknowledged
tasks (``tests/worker/test_reconnect.py``: Redis killed and started again under a worker
running ``task_acks_late`` tasks; two of three ``esrr bench chaos`` runs before this).
``Consumer.on_connection_error_after_connected`` first ``collect()``s the connection, which
detaches kombu's transport from it (``transport.client = None``) but does not close the
task channel (its BRPOP read fails on the dead socket), then ``close()``s the connection.
Two errors follow that are neither connection nor channel errors, so they pass
``ignore_errors`` and the event loop, and Celery stops ("Unrecoverable error"):

1. the channel's close restores the unacknowledged tasks (``QoS.restore_unacked_once``)
   over a new pool built from ``transport.client``, which is gone:
   ``AttributeError: 'NoneType' object has no attribute 'hostname'``;
2. a task that was running finishes later (the threads pool cannot cancel it) and
   acknowledges its message on the closed channel:
   ``AttributeError: 'NoneType' object has no attribute 'client'``.

Celery 5.6 only collected; both then failed as connection errors, quietly. The fix
keeps both off the dead connection: its channels skip the restore (kombu's
``Channel.do_restore``), and the tasks received over it are marked acknowledged, which
is what Celery's own warning says they can no longer be. Nothing is lost: over a dead
connection neither could reach Redis; a Redis that lived keeps their messages in its
unacknowledged set, which a worker's visibility-timeout sweep (``ESRR_VISIBILITY_TIMEOUT_S``,
every ``ESRR_RESTORE_INTERVAL_S``) puts back on the queue as for a killed worker (a task
may then run twice: scoring is idempotent, and ``expires`` drops one nobody waits for),
and a Redis that restarted empty has none.

What this gives up: marked acknowledged, those tasks are no longer cancelled by Celery's
``worker_cancel_long_running_tasks_on_connection_loss``; the threads pool (the default)
cannot cancel a running task anyway (Celery logged "Failed to cancel" with each task's
whole payload), and under prefork they now run to their end. An acknowledgement already
scheduled on the event loop in the instant before the connection dropped is not covered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker import state
from vine import promise

from worker.poison import PoisonProofConsumer
from worker.redis_channel import copy_items, share_client

log = logging.getLogger(__name__)


class WorkerConsumer(PoisonProofConsumer):
    """Celery's consumer with poison screened off (``worker.poison``), a lost Redis reconnected, not fatal, and
    the tasks' bookkeeping on one Redis client, their unacknowledged copies unparsed (``worker.redis_channel``)."""

    def create_task_handler(self, promise: type[promise] = promise) -> Callable[[Any], Any]:
        """The poison-proof handler, on a task channel that shares its Redis client and copies items as they are
        (at each consumer start)."""
        handler = super().create_task_handler(promise)
        channel = getattr(self.task_consumer, "channel", None)  # type: ignore[attr-defined]  # not in celery-types
        share_client(channel)
        copy_items(channel, self.screen)
        return handler

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        """Celery's handling of a lost broker connection, without the two calls that end the worker on Redis."""
        channels = _redis_channels(self.connection)
        for channel in channels:
            channel.do_restore = False  # the restore over the dead connection (1. in the module's docstring)
        orphans = {
            request
            for request in (*state.active_requests, *state.reserved_requests)  # a set: one
            if not request.acknowledged and getattr(request.message, "channel", None) in channels
        }  # in both
        for request in orphans:
            request.acknowledged = True  # their ack on the closed channel (2.)
        if orphans:
            log.warning(
                "the broker connection was lost under %d tasks; they will not be acknowledged, and "
                "Redis redelivers them after ESRR_VISIBILITY_TIMEOUT_S if it kept them",
                len(orphans),
            )
        super().on_connection_error_after_connected(exc)


def _redis_channels(connection: Any) -> list[Any]:
    """The channels of ``connection``'s kombu Redis transport (none for another transport, or no connection)."""
    transport = getattr(connection, "_transport", None) if connection is not None else None
    if transport is None or getattr(transport, "driver_type", None) != "redis":
        return []
    return list(getattr(transport, "channels", []))
