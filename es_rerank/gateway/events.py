"""``POST /_esrr/events``: the impressions and clicks a site page (or an API client) reports, recorded fail-open.

Thin: the body is read within ``ESRR_EVENTS_MAX_BODY_BYTES``, validated by
``learning.events.read_events`` (a 400 naming the event and field) and handed to the
process's ``learning.recorder.EventRecorder``, which only queues it; the answer is a 202
saying how many were queued and how many dropped. No address, user agent or cookie is
read. ``install_events`` also gives the site page what it needs to report: the inline
script (``templates/site/events.js``, allowed by its hash in the page's
Content-Security-Policy) and a fresh impression id per page.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from markupsafe import Markup

from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.errors import BadSearchRequest, GatewayError
from es_rerank.gateway.metrics import GatewayMetrics
from es_rerank.gateway.request_parts import InvalidText, read_json
from es_rerank.gateway.state import gateway_state
from es_rerank.learning.events import EventError, Impression, new_impression_id, read_events
from es_rerank.learning.recorder import EventRecorder
from es_rerank.learning.store import open_store

events = Blueprint("events", __name__)
EVENTS_PATH = "/_esrr/events"
PAGE_SCRIPT = (Path(__file__).parent / "templates" / "site" / "events.js").read_text(encoding="utf-8")
# The page's only script, allowed by its hash: an injected one would not run.
PAGE_SCRIPT_SOURCE = "'sha256-" + base64.b64encode(hashlib.sha256(PAGE_SCRIPT.encode()).digest()).decode() + "'"


class BadEvent(GatewayError):
    """A reported event that is not one of the documented shapes."""

    status = 400
    error_type = "illegal_argument_exception"


class EventsTooLarge(GatewayError):
    """An events request over ``ESRR_EVENTS_MAX_BODY_BYTES``."""

    status = 413
    error_type = "content_too_long_exception"


class EventsOff(GatewayError):
    """Events sent to a gateway that records none (``ESRR_EVENTS=false``)."""

    status = 404
    error_type = "resource_not_found_exception"


def install_events(app: Flask, settings: GatewaySettings, metrics: GatewayMetrics) -> EventRecorder | None:
    """Register ``POST /_esrr/events`` on ``app`` and the site page's script; when ``settings.events``, the recorder
    writing to the store (opened by its writer thread on the first event), for the app's state."""
    app.register_blueprint(events)
    app.config.update(
        ESRR_EVENTS_MAX_PER_REQUEST=settings.events_max_per_request,
        ESRR_EVENTS_MAX_BODY_BYTES=settings.events_max_body_bytes,
    )
    app.jinja_env.globals.update(
        esrr_events=settings.events,
        esrr_events_path=EVENTS_PATH,
        esrr_events_script=Markup(PAGE_SCRIPT),
        esrr_new_impression_id=new_impression_id,
    )
    if not settings.events:
        return None
    url = settings.events_store_url
    return EventRecorder(
        lambda: open_store(url),
        settings.events_queue,
        settings.events_retention_ms,
        on_dropped=lambda reason, count: metrics.events_dropped.labels(reason).inc(count),
        on_stored=metrics.events_stored.inc,
    )


def close_events(app: Flask, timeout_s: float = 2.0) -> None:
    """Write what ``app``'s recorder has queued (for up to ``timeout_s``) and stop its writer; a gateway process
    calls it as it stops."""
    recorder = gateway_state(app).events
    if recorder is not None:
        recorder.close(timeout_s)


@events.post(EVENTS_PATH)
def record_events() -> tuple[Response, int]:
    """Queue one event or a list of them; 202 with how many were queued and dropped."""
    recorder = gateway_state().events
    if recorder is None:
        raise EventsOff(
            "this gateway records no events (ESRR_EVENTS=false); set ESRR_EVENTS=true to record them (docs/learning.md)"
        )
    limit = current_app.config["ESRR_EVENTS_MAX_BODY_BYTES"]
    data = request.stream.read(limit + 1)  # chunked bodies have no length to check first
    if len(data) > limit or (request.content_length or 0) > limit:
        size = f"{request.content_length:,} bytes" if request.content_length else f"over {limit:,} bytes"
        raise EventsTooLarge(
            f"the events request is {size}, over the gateway's limit of {limit:,} bytes "
            f"(ESRR_EVENTS_MAX_BODY_BYTES={limit}); send fewer events per request"
        )
    try:
        payload = read_json(data, "the events request")
    except InvalidText as error:
        raise BadEvent(error.reason) from None
    except BadSearchRequest:
        raise BadEvent(
            "the events request is not JSON; send one event object or a list of them (docs/learning.md)"
        ) from None
    try:
        reported = read_events(payload, current_app.config["ESRR_EVENTS_MAX_PER_REQUEST"])
    except EventError as error:
        raise BadEvent(str(error)) from None
    metrics = gateway_state().metrics
    for event in reported:
        metrics.events_received.labels("impression" if isinstance(event, Impression) else "click").inc()
    queued = recorder.record(reported)
    return jsonify({"queued": queued, "dropped": len(reported) - queued}), 202
