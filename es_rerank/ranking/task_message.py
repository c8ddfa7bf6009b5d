"""A scoring task as Celery's ``send_task`` lays it on a Redis list: protocol 2 inside kombu's Redis envelope.

The worker reads what kombu's Redis transport pushes: a JSON object whose ``body`` is the task's own
JSON (``[args, kwargs, embed]``, sent as it is: ``body_encoding`` None), with Celery's protocol-2
``headers`` (``celery.app.amqp.AMQP.as_task_v2``: the task's name and id, ``expires``, ``argsrepr``...) and
the ``properties`` kombu and Celery add (``delivery_info``, ``delivery_tag``, ``expiration``...).
``tests/ranking/test_task_message.py`` checks the layout against a message that ``send_task`` pushed.

Why not ``json.dumps`` twice, as kombu does: the payload's arrays are ~140 KB of base64, and each pass
scans them for characters to escape, the second one inside the body's string: 0.5 ms of the gateway's CPU
each (reports/profile/micro_broker.py). base64 has none, so the message is dumped with a placeholder for
each array and the arrays' text put in its place: the same bytes, without either scan of them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

# What Celery puts after a task's args and kwargs: no callbacks, errbacks, chain or chord.
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
# A string no payload holds (the header fields are checked to hold it once each): it marks where an array goes.
PLACEHOLDER = f"esrr-array-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class TaskHeaders:
    """What varies between two sends of a task, besides its payload: who sends it and what a monitor shows."""

    task_id: str
    name: str
    queue: str
    expires_s: float  # from now: Celery's ``expires`` (a worker drops the task later) and kombu's ``expiration``
    argsrepr: str
    origin: str  # ``celery.utils.nodenames.anon_nodename()`` of the sending process
    reply_to: str


def message_fields(task: TaskHeaders, now: datetime | None = None) -> dict[str, Any]:
    """The envelope's fields but its ``body``: Celery's protocol-2 headers and the kombu Redis properties."""
    expires = ((now or datetime.now(timezone.utc)) + timedelta(seconds=task.expires_s)).isoformat()
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task.name,
        "id": task.task_id,
        "shadow": None,
        "eta": None,
        "expires": expires,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task.task_id,
        "parent_id": None,
        "argsrepr": task.argsrepr,
        "kwargsrepr": "{}",
        "origin": task.origin,
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties = {
        "correlation_id": task.task_id,
        "reply_to": task.reply_to,
        "argsrepr": task.argsrepr,
        "kwargsrepr": "{}",
        "delivery_mode": 2,
        "expiration": str(int(task.expires_s * 1000)),
        "delivery_info": {"exchange": "", "routing_key": task.queue},
        "priority": 0,
        "body_encoding": None,
        "delivery_tag": str(uuid.uuid4()),
    }
    return {
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": properties,
    }


def plain_message(payload: Mapping[str, Any], fields: Mapping[str, Any]) -> bytes:
    """The message as kombu writes it: the body dumped, then the envelope around it (the reference for the test)."""
    body = json.dumps([[payload], {}, EMBED])
    return json.dumps({"body": body, **fields}).encode("ascii")


def task_message(payload: Mapping[str, Any], fields: Mapping[str, Any]) -> bytes:
    """The bytes kombu's Redis transport pushes for ``send_task(name, args=[payload], ...)``, ``fields`` its
    ``message_fields``: ``plain_message``'s, byte for byte.

    ``payload`` is ``es_rerank.payload.encode``'s: its arrays' ``b64`` (base64 text, which JSON does not escape)
    goes in without a scan.
    """
    arrays = {key: value["b64"] for key, value in payload.items() if isinstance(value, dict) and "b64" in value}
    marked = {key: f"{PLACEHOLDER}-{key}" for key in arrays}
    skeleton = {key: {**value, "b64": marked[key]} if key in marked else value for key, value in payload.items()}
    text = json.dumps({"body": json.dumps([[skeleton], {}, EMBED]), **fields})
    if any(text.count(mark) != 1 for mark in marked.values()):
        return plain_message(payload, fields)  # never seen: a field that holds a placeholder
    for key, mark in marked.items():
        before, after = text.split(mark)
        text = before + arrays[key] + after
    return text.encode("ascii")
