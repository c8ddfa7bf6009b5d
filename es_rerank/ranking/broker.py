"""The broker settings a caller and a worker share, and a Celery app that only sends.

A caller (the gateway, ``esrr search --worker``) must serialise, route and read results
exactly as the workers do; ``worker.celery_app`` builds the workers' configuration on top
of ``broker_config``. Nothing here imports the worker's code or torch.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from es_rerank.payload import TASK_NAME
from es_rerank.settings import BrokerSettings


def broker_config(settings: BrokerSettings) -> dict[str, Any]:
    """Celery settings both ends of the queue must agree on: broker, result backend, serialisation, routing."""
    config: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend_url,
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_default_queue": settings.queue,
        "task_routes": {TASK_NAME: {"queue": settings.queue}},
        "result_expires": settings.result_expires_s,
        "enable_utc": True,
    }
    if settings.is_redis and settings.broker_key_prefix:
        config["broker_transport_options"] = {"global_keyprefix": settings.broker_key_prefix}
        if settings.result_backend_url.startswith("redis"):
            config["result_backend_transport_options"] = {"global_keyprefix": settings.broker_key_prefix}
    return config


def client_app(settings: BrokerSettings) -> Celery:
    """A Celery app that sends ``rerank.score`` tasks by name to the workers on ``settings``' broker."""
    app = Celery("esrr-caller")
    app.conf.update(broker_config(settings))
    return app
