"""The events a search page or an API client reports, validated: what a search showed, and what was clicked.

An **impression** is one page of results as a person saw it: the query text, the shown
document ids with their positions (1 = first), the ranker that ordered them, an optional
experiment arm, the browser tab's random session id and the impression's own random id.
A **click** names the impression it was made on, the document and its position. The
server sets each event's time on receipt; nothing else about the person is taken (no
IP address, no user agent): docs/learning.md has the JSON and what is stored.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

MAX_RESULTS = 100  # shown on one page; the site shows 10
MAX_POSITION = 10_000
MAX_QUERY_CHARS = 1000
MAX_NAME_CHARS = 200  # a ranker's or an arm's name
MAX_DOC_ID_BYTES = 512  # Elasticsearch's limit on an _id
_EXCERPT_CHARS = 40
_PATTERNS = {
    "session_id": "takes 16 to 64 letters, digits, '-' or '_' (a random id per browser tab)",
    "impression_id": "takes 16 hex digits (0-9, a-f): the id of the page the results were shown on",
}

ImpressionId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
SessionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{16,64}$")]
DocumentId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_DOC_ID_BYTES)]
Position = Annotated[int, Field(ge=1, le=MAX_POSITION, strict=True)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_CHARS)]


class _Event(BaseModel):
    # Unknown fields are refused by name, so a misspelt one (or a client's own clock, "at") is not silently lost.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class Shown(_Event):
    """One result of an impression: the document's id, its position on the ranked list (1 = first) and, on an
    interleaved page (``ESRR_EXPERIMENT``), the team that picked it."""

    id: DocumentId
    position: Position
    team: Literal["served", "candidate"] | None = None


class Impression(_Event):
    """What one search showed to one browser tab (or API client's session)."""

    type: Literal["impression"]
    impression_id: ImpressionId
    session_id: SessionId
    query: Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]
    ranker: Name
    arm: Name | None = None
    results: Annotated[list[Shown], Field(max_length=MAX_RESULTS)]

    @field_validator("query")
    @classmethod
    def _one_space_between_words(cls, query: str) -> str:
        words = " ".join(query.split())
        if not words:
            raise ValueError("holds no words; send the text that was searched")
        return words

    @model_validator(mode="after")
    def _each_once(self) -> Impression:
        positions = [shown.position for shown in self.results]
        if len(set(positions)) != len(positions):
            raise ValueError("results: two results share a position; each position is shown once")
        ids = [shown.id for shown in self.results]
        if len(set(ids)) != len(ids):
            raise ValueError("results: a document id is listed twice; each document is shown once")
        return self


class Click(_Event):
    """A click on result ``id``, shown at ``position`` by impression ``impression_id``."""

    type: Literal["click"]
    impression_id: ImpressionId
    session_id: SessionId
    id: DocumentId
    position: Position


Event = Annotated[Impression | Click, Field(discriminator="type")]
_ONE = TypeAdapter(Event)


class EventError(ValueError):
    """A reported event that is not one of the documented shapes; the message names the event and the field."""


@dataclass(frozen=True)
class Received:
    """An event and the time the server received it (milliseconds since the Unix epoch)."""

    event: Impression | Click
    at_ms: int


def read_events(
    payload: Any, max_events: int, setting: str = "ESRR_EVENTS_MAX_PER_REQUEST"
) -> list[Impression | Click]:
    """The events of a decoded JSON ``payload`` (one event object, or a list of them); ``EventError`` names the first
    bad event and field, or a list longer than ``max_events`` (the ``setting`` that bounds it)."""
    if isinstance(payload, dict):
        payload = [payload]
    if not isinstance(payload, list):
        raise EventError(
            f"the body is {_json_kind(payload)}; send one event object or a list of them, such as "
            '{"type": "click", "impression_id": "...", "session_id": "...", "id": "...", "position": 1}'
        )
    if not payload:
        raise EventError("the body is an empty list; send at least one event")
    if len(payload) > max_events:
        raise EventError(
            f"{len(payload)} events in one request, over the gateway's limit of {max_events} "
            f"({setting}={max_events}); send them in several requests"
        )
    events = []
    for number, item in enumerate(payload):
        try:
            events.append(_ONE.validate_python(item))
        except ValidationError as error:
            raise EventError(_first_problem(error, number, len(payload))) from None
    return events


def _first_problem(error: ValidationError, number: int, count: int) -> str:
    """The first problem pydantic found, as ``event N: field.path: message (got value)``."""
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"] if part not in ("impression", "click"))
    what = f"event {number}" if count > 1 else "the event"
    if problem["type"] == "union_tag_invalid" or problem["type"] == "union_tag_not_found":
        return (
            f"{what}: type is {_excerpt(problem['input'].get('type') if isinstance(problem['input'], dict) else None)}"
            '; an event\'s type is "impression" or "click" (docs/learning.md)'
        )
    if problem["type"] == "extra_forbidden":
        extra = "; the server sets each event's time itself" if where.endswith("at") or where.endswith("time") else ""
        return f"{what}: {where} is not a field of this event{extra} (docs/learning.md lists the fields)"
    message = _PATTERNS.get(where, problem["msg"]) if problem["type"] == "string_pattern_mismatch" else problem["msg"]
    message = message.removeprefix("Value error, ")
    if not where:  # a rule over several fields: the message names them
        return f"{what}: {message} (docs/learning.md)"
    got = "" if problem["type"] == "missing" else f" (got {_excerpt(problem['input'])})"
    return f"{what}: {where}: {message}{got} (docs/learning.md)"


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "..."


def _json_kind(value: Any) -> str:
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def new_impression_id() -> str:
    """A fresh random impression id: 16 hex digits (64 bits, the store's integer key)."""
    return secrets.token_hex(8)


def impression_key(impression_id: str) -> int:
    """An impression id (16 hex digits) as the signed 64-bit integer the store keys it by."""
    return int.from_bytes(bytes.fromhex(impression_id), "big", signed=True)


def impression_id_of(key: int) -> str:
    """The 16 hex digits of a stored impression key (the inverse of ``impression_key``)."""
    return key.to_bytes(8, "big", signed=True).hex()


def positions_are_a_run(results: Sequence[Shown]) -> bool:
    """Whether the results sit at consecutive positions in list order (a page of results), so the first is enough."""
    return all(shown.position == results[0].position + offset for offset, shown in enumerate(results))
