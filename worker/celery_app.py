"""The Celery application of the scoring worker: ``celery -A worker.celery_app worker``.

Configured from ``WorkerSettings`` (``ESRR_*``); nothing here imports torch, so
``celery_config`` can also configure a sending-only client. The choices:

- Broker: Redis by default; RabbitMQ by changing only ``ESRR_BROKER_URL`` to
  ``amqp://guest:guest@127.0.0.1:5672//``.
- Result backend: the Redis broker itself, whose results reach a waiting
  ``AsyncResult.get`` through pub/sub (no polling); with an AMQP broker ``rpc://``,
  which sends the result back as a message to the caller's reply queue.
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a task is acknowledged
  after it ran, so a worker killed mid-task does not lose it. On Redis the
  unacknowledged message comes back after ``visibility_timeout`` (checked every
  ``unacked_restore_interval``, at most one interval later if the worker died
  inside a sweep); on RabbitMQ as soon as the connection drops;
  with the prefork pool a dead child's task is requeued at once. A payload that
  kills a worker would come back again and again, which is why ``decode`` caps
  the request size; the gateway should also send with ``expires`` = its deadline
  so a redelivered task nobody waits for any more is dropped unrun.
- ``worker_prefetch_multiplier = 1``: a worker reserves only as many tasks as it
  runs at once (``concurrency``), so a busy worker does not sit on tasks that an
  idle one could take (``optimizing.rst``).
- ``worker_pool = threads`` with ``concurrency`` > 1: see ``worker.batching``;
  tasks overlap in one process so their forward passes can be coalesced, and the
  model and its GPU memory exist once per process. The threads pool does not
  enforce time limits (only prefork does); the gateway's deadline and ``expires``
  bound the wait instead.
- JSON for tasks and results, matching ``es_rerank.payload``.
- ``worker_consumer``: ``worker.consumer.WorkerConsumer``, so that a message on the
  queue that is not a task is logged, kept in a capped list and dropped instead of
  ending the worker (celery/celery#7975, ``worker.poison``), and so that a Redis killed
  and restarted under the worker is reconnected to instead of ending it (Celery 5.7,
  ``worker.consumer``).
- ``broker_connection_max_retries`` None: a worker whose broker is gone retries (every 2
  s, growing to 30 s, kombu's steps) for as long as the outage lasts, instead of exiting
  after Celery's 100 tries.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from pydantic import ValidationError

from es_rerank.ranking.broker import broker_config
from es_rerank.settings import settings_problems
from worker.settings import WorkerSettings


def celery_config(settings: WorkerSettings) -> dict[str, Any]:
    """Celery settings for ``settings``: the broker's shared ones plus the worker's (acks, pool, limits)."""
    config: dict[str, Any] = {
        **broker_config(settings),
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,  # a bad payload is answered once, not redelivered
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_pool": settings.pool,
        "worker_concurrency": settings.concurrency,
        "task_soft_time_limit": settings.soft_time_limit_s,
        "task_time_limit": settings.time_limit_s,
        "task_track_started": False,
        "worker_send_task_events": False,
        "worker_disable_rate_limits": True,
        # Survives messages that are not tasks (a non-JSON string pushed on the queue ends Celery's own)
        # and a Redis restarted under it (Celery 5.7's reconnect ends the worker otherwise).
        "worker_consumer": "worker.consumer:WorkerConsumer",
        "broker_connection_max_retries": None,
    }
    if settings.is_redis:
        config["broker_transport_options"] = {
            **config.get("broker_transport_options", {}),
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": settings.restore_interval_s,
            "unacked_restore_throttle": 1,  # the interval alone sets the redelivery sweep
            # kombu holds a Redis lock while it sweeps; a worker killed mid-sweep leaves it held for
            # this long (kombu's default: 300 s), and no task comes back until it expires. A sweep
            # takes milliseconds and restores each message in its own WATCH transaction, so two
            # overlapping sweeps cannot deliver a task twice: one interval is long enough.
            "unacked_mutex_expire": settings.restore_interval_s,
        }
    return config


def _settings_from_environment() -> WorkerSettings:
    try:
        return WorkerSettings()
    except ValidationError as error:  # `celery -A worker.celery_app` would print a traceback
        raise SystemExit(f"esrr worker cannot start: {settings_problems(error)}") from None


class WorkerApp(Celery):
    """The worker's Celery app, with the validated settings its task and the CLI read."""

    esrr_settings: WorkerSettings


def create_app(settings: WorkerSettings | None = None) -> WorkerApp:
    """A Celery app for ``settings`` (default: read from the environment; a bad value exits, named)."""
    settings = settings or _settings_from_environment()
    app = WorkerApp("esrr-worker", include=["worker.tasks"])
    app.conf.update(celery_config(settings))
    app.esrr_settings = settings  # the validated settings, for the task and the CLI
    return app


app = create_app()
