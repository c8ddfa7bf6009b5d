"""The event shapes (``es_rerank.learning.events``): what is taken, and a refusal naming the event and field."""

from __future__ import annotations

import re

import pytest

from es_rerank.learning.events import (
    MAX_RESULTS,
    Click,
    EventError,
    Impression,
    impression_id_of,
    impression_key,
    new_impression_id,
    read_events,
)

SESSION = "0123456789abcdef0123456789abcdef"


def impression(**changes) -> dict:
    event = {
        "type": "impression",
        "impression_id": "00ff00ff00ff00ff",
        "session_id": SESSION,
        "query": "  vitamin   d ",
        "ranker": "BM25",
        "results": [{"id": "MED-1", "position": 1}, {"id": "MED-2", "position": 2}],
    }
    return {**event, **changes}


def click(**changes) -> dict:
    return {
        "type": "click",
        "impression_id": "00ff00ff00ff00ff",
        "session_id": SESSION,
        "id": "MED-2",
        "position": 2,
        **changes,
    }


def test_one_event_or_a_list_of_them_is_read():
    [shown] = read_events(impression(), 10)
    assert isinstance(shown, Impression) and shown.query == "vitamin d" and shown.arm is None
    assert [result.position for result in shown.results] == [1, 2]
    both = read_events([impression(arm="candidate"), click()], 10)
    assert isinstance(both[1], Click) and both[0].arm == "candidate"


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (impression(session_id="short"), "session_id"),
        (impression(impression_id="XYZ"), "impression_id"),
        (impression(query="   "), "query: holds no words"),
        (impression(results=[{"id": "a", "position": 0}]), "results.0.position"),
        (impression(results=[{"id": "a", "position": "1"}]), "results.0.position"),
        (impression(results=[{"id": "a", "position": 1}, {"id": "b", "position": 1}]), "share a position"),
        (impression(results=[{"id": "a", "position": 1}, {"id": "a", "position": 2}]), "listed twice"),
        (impression(results=[{"id": str(n), "position": n + 1} for n in range(MAX_RESULTS + 1)]), "results"),
        (impression(at=1700000000), "at is not a field of this event; the server sets each event's time"),
        (impression(ip="10.0.0.1"), "ip is not a field"),
        (click(position=None), "position"),
        (click(id=""), "id"),
        ({"type": "purchase"}, 'type is \'purchase\'; an event\'s type is "impression" or "click"'),
        ({"impression_id": "00ff00ff00ff00ff"}, "type is None"),
    ],
)
def test_a_bad_event_is_refused_naming_the_field(event, named):
    with pytest.raises(EventError, match="^the event: ") as refused:
        read_events(event, 10)
    assert named in str(refused.value)


def test_a_bad_event_in_a_list_is_named_by_its_number():
    with pytest.raises(EventError, match=r"^event 1: session_id"):
        read_events([click(), click(session_id="x")], 10)


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        ("click", "the body is a string"),
        ([], "empty list"),
        ([click()] * 11, "11 events in one request, over the gateway's limit of 10 (ESRR_EVENTS_MAX_PER_REQUEST=10)"),
    ],
)
def test_a_body_that_is_no_event_or_too_many_is_refused(payload, said):
    with pytest.raises(EventError, match=re.escape(said)):
        read_events(payload, 10)


def test_an_impression_id_is_the_stores_64_bit_integer_and_back():
    for text in ("0000000000000000", "ffffffffffffffff", "8000000000000000", "7fffffffffffffff", new_impression_id()):
        key = impression_key(text)
        assert -(1 << 63) <= key < (1 << 63) and impression_id_of(key) == text
