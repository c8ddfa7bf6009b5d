"""``POST /_esrr/events`` and the site page's report (``es_rerank.gateway.events``), over a real embedded index and
a real SQLite store: what is stored, what is refused, and that a missing or locked store never fails a search."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
import urllib.request
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.state import gateway_state
from es_rerank.learning.store import open_store
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import esrr_serve
from tests.gateway.test_site import ARTICLES, BROWSER

SESSION = "0123456789abcdef0123456789abcdef"
IMPRESSION = {
    "type": "impression",
    "impression_id": "1234567890abcdef",
    "session_id": SESSION,
    "query": "vitamin",
    "ranker": "BM25",
    "results": [{"id": "1", "position": 1}, {"id": "MED-3", "position": 2}],
}
CLICK = {"type": "click", "impression_id": "1234567890abcdef", "session_id": SESSION, "id": "MED-3", "position": 2}
PAGE_SCRIPT_RUNNER = Path(__file__).with_name("run_page_script.js")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_embedded_index(list(ARTICLES), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return tmp_path


def _app(home: Path, **settings):
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(home / "indexes" / "embedded"), 10), 5.0)
    return create_app(served, GatewaySettings(home=home, **settings))


def _metric(client, line: str) -> float:
    found = re.search(rf"^{re.escape(line)} (\S+)$", client.get("/metrics").get_data(as_text=True), re.M)
    return float(found.group(1)) if found else 0.0


def test_an_impression_and_a_click_are_stored_with_the_servers_time_only(home):
    app = _app(home)
    client = app.test_client()
    response = client.post(
        "/_esrr/events", json=[IMPRESSION, CLICK], headers={"User-Agent": "secret-agent", "X-Forwarded-For": "10.1.2.3"}
    )
    assert response.status_code == 202 and response.get_json() == {"queued": 2, "dropped": 0}
    assert client.post("/_esrr/events", data=json.dumps(CLICK), content_type="text/plain").status_code == 202
    recorder = gateway_state(app).events
    assert recorder.flush(30)
    store = open_store(str(home / "events" / "events.sqlite3"))
    [(impression, at)] = list(store.impressions())
    assert impression.model_dump(exclude_none=True) == IMPRESSION and at > 1.7e12
    assert [click.model_dump() for click, _ in store.clicks()] == [CLICK, CLICK]
    dump = b"".join(path.read_bytes() for path in (home / "events").iterdir())
    assert b"secret-agent" not in dump and b"10.1.2.3" not in dump
    assert _metric(client, 'esrr_events_received_total{type="click"}') == 2
    assert _metric(client, "esrr_events_stored_total") == 3


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        ({**CLICK, "position": 0}, 400, "the event: position: Input should be greater than or equal to 1 (got 0)"),
        ([CLICK, {**IMPRESSION, "results": "MED-3"}], 400, "event 1: results"),
        ({**CLICK, "ip": "10.0.0.1"}, 400, "ip is not a field of this event"),
        ([CLICK] * 3, 400, "3 events in one request, over the gateway's limit of 2 (ESRR_EVENTS_MAX_PER_REQUEST=2)"),
        ("not json", 400, "the events request is not JSON"),
        ('{"type": "click", "id": "\\ud800"}', 400, "lone UTF-16 surrogate"),
        (
            [{**CLICK, "id": "x" * 500}] * 2,
            413,
            "over the gateway's limit of 1,024 bytes (ESRR_EVENTS_MAX_BODY_BYTES=1024)",
        ),
    ],
)
def test_a_bad_or_too_large_request_is_refused_naming_the_problem(home, body, status, said):
    client = _app(home, events_max_per_request=2, events_max_body_bytes=1024).test_client()
    data = body if isinstance(body, str) else json.dumps(body)
    response = client.post("/_esrr/events", data=data, content_type="application/json")
    error = response.get_json()["error"]
    assert response.status_code == status and said in error["reason"], error
    assert error["root_cause"][0]["type"] == error["type"]
    assert not (home / "events").exists()  # nothing was queued


def test_events_off_means_no_route_no_store_and_no_script(home):
    client = _app(home, events=False).test_client()
    response = client.post("/_esrr/events", json=CLICK)
    assert response.status_code == 404 and "ESRR_EVENTS=false" in response.get_json()["error"]["reason"]
    page = client.get("/?q=vitamin", headers=BROWSER).get_data(as_text=True)
    assert "<script" not in page and "esrr-results" not in page
    assert not (home / "events").exists()


def _page_list(page: str) -> dict[str, str]:
    """The data attributes of the results list the page's script reads."""
    found = re.search(r'<ol start="(\d+)" id="esrr-results"(.*?)>', page, re.S)
    assert found, page
    attributes = dict(re.findall(r'(data-esrr-[a-z]+)="([^"]*)"', found.group(2)))
    return {"start": found.group(1), **{name: html.unescape(value) for name, value in attributes.items()}}


def test_the_page_carries_its_impression_and_a_script_its_policy_allows(home):
    client = _app(home).test_client()
    response = client.get("/?q=vitamin", headers=BROWSER)
    page = response.get_data(as_text=True)
    listed = _page_list(page)
    assert re.fullmatch(r"[0-9a-f]{16}", listed["data-esrr-impression"])
    assert sorted(json.loads(listed["data-esrr-ids"])) == ["1", "2", "MED-3"]  # all three mention vitamin
    assert listed["data-esrr-query"] == "vitamin" and listed["data-esrr-events"] == "/_esrr/events"
    [script] = re.findall(r"<script>(.*?)</script>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = response.headers["Content-Security-Policy"]
    assert f"script-src 'sha256-{digest}'" in policy and "connect-src 'self'" in policy
    again = _page_list(client.get("/?q=vitamin", headers=BROWSER).get_data(as_text=True))
    assert again["data-esrr-impression"] != listed["data-esrr-impression"]  # one id per page shown


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's script")
@pytest.mark.parametrize("experiment", ["", "bm25"])
def test_the_pages_script_reports_what_the_server_stores(home, experiment):
    """The page's own script, run by Node over the page's real attributes (a browser's DOM calls stubbed by
    ``run_page_script.js``); its beacons, posted as a browser would, are stored as the page showed them, with the
    experiment's arm and each result's team on an interleaved page."""
    app = _app(home, experiment=experiment)
    client = app.test_client()
    page = client.get("/?q=vitamin&page=1", headers=BROWSER).get_data(as_text=True)
    [script] = re.findall(r"<script>(.*?)</script>", page, re.S)
    listed = _page_list(page)
    run = subprocess.run(
        ["node", str(PAGE_SCRIPT_RUNNER)],
        input=json.dumps({"script": script, "list": listed, "click": 1}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    beacons = json.loads(run.stdout)
    assert [url for url, _ in beacons] == ["/_esrr/events"] * 2
    for _, body in beacons:  # sendBeacon with a string sends text/plain
        assert client.post("/_esrr/events", data=body, content_type="text/plain;charset=UTF-8").status_code == 202
    assert gateway_state(app).events.flush(30)
    store = open_store(str(home / "events" / "events.sqlite3"))
    [(impression, _)] = list(store.impressions())
    [(click, _)] = list(store.clicks())
    ids = json.loads(listed["data-esrr-ids"])
    assert impression.query == "vitamin" and [shown.id for shown in impression.results] == ids
    assert [shown.position for shown in impression.results] == [1, 2, 3]
    assert (click.id, click.position, click.impression_id) == (ids[1], 2, listed["data-esrr-impression"])
    assert click.session_id == impression.session_id and re.fullmatch("[0-9a-f]{32}", click.session_id)
    if experiment:
        assert impression.arm == "bm25" == listed["data-esrr-arm"]
        assert [shown.team for shown in impression.results] == json.loads(listed["data-esrr-teams"])
        assert {shown.team for shown in impression.results} <= {"served", "candidate"}
    else:
        assert impression.arm is None and "data-esrr-arm" not in listed
        assert all(shown.team is None for shown in impression.results)


def _searches(client) -> list:
    """The ids a few searches answer, through the JSON API and the page."""
    answers = [client.get(f"/_search?q={words}").get_json() for words in ("vitamin", "bone", "colds")]
    page = client.get("/?q=vitamin", headers=BROWSER)
    assert page.status_code == 200
    return [[hit["_id"] for hit in answer["hits"]["hits"]] for answer in answers]


def test_a_store_that_cannot_be_made_never_fails_a_search(home):
    (home / "blocked").write_text("a file where the store's folder should be")
    app = _app(home, events_url=str(home / "blocked" / "events.sqlite3"))
    client = app.test_client()
    expected = _searches(_app(home, events=False).test_client())
    for _ in range(3):
        assert client.post("/_esrr/events", json=[IMPRESSION, CLICK]).status_code == 202
        assert _searches(client) == expected
    assert gateway_state(app).events.flush(30)
    dropped = sum(
        _metric(client, f'esrr_events_dropped_total{{reason="{reason}"}}')
        for reason in ("store_error", "store_unavailable")
    )
    assert dropped == 6 and _metric(client, "esrr_events_stored_total") == 0


def test_a_locked_store_never_fails_a_search_and_its_events_wait_or_drop(home):
    app = _app(home, events_queue=5)
    client = app.test_client()
    assert client.post("/_esrr/events", json=IMPRESSION).status_code == 202
    assert gateway_state(app).events.flush(30)
    locker = sqlite3.connect(home / "events" / "events.sqlite3", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    expected = _searches(_app(home, events=False).test_client())
    answers = [client.post("/_esrr/events", json=[CLICK] * 3).get_json() for _ in range(4)]
    assert _searches(client) == expected
    queued = sum(answer["queued"] for answer in answers)
    assert sum(answer["dropped"] for answer in answers) == 12 - queued > 0  # the queue of 5 filled up
    locker.execute("ROLLBACK")
    assert gateway_state(app).events.flush(30)
    lost = sum(
        _metric(client, f'esrr_events_dropped_total{{reason="{reason}"}}')
        for reason in ("store_error", "store_unavailable")
    )
    # Each queued event was written, or dropped when the lock outlasted the writer's wait.
    assert _metric(client, "esrr_events_stored_total") + lost == 1 + queued


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_several_gateway_processes_write_one_store_and_flush_when_stopped(home, free_port):
    """``esrr serve --processes 2``: a forked process starts its own writer on its first event, the processes share
    the one SQLite file (WAL), and what they queued is written when they are stopped."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
    }
    sessions = [f"{n:032x}" for n in range(40)]
    with esrr_serve(env, port, "--processes", "2") as (url, _):
        for number, session in enumerate(sessions):  # a new connection each: either process may take it
            event = {**CLICK, "session_id": session, "position": number + 1}
            request = urllib.request.Request(f"{url}/_esrr/events", json.dumps(event).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 202
    stored = {click.session_id for click, _ in open_store(str(home / "events" / "events.sqlite3")).clicks()}
    assert stored == set(sessions)
