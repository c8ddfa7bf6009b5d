"""Heavy searches take a lane of few slots; light ones never wait for it (issue 32's probe floor).

The weighing is pure and tested on its own; the lane through the real app over a real
embedded index: with its one slot held, a heavy search is a 429 in Elasticsearch's shape
naming the settings, and a light search is answered.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest
from flask import Flask
from werkzeug.test import Client

from benchmarks.gateway_process import children
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.highlight import read_highlight
from es_rerank.backends.query_tree import Pattern, QueryCost, QueryLimits, check_cost
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.errors import TooManyHeavySearches
from es_rerank.gateway.heavy_lane import HeavyLane, is_heavy
from es_rerank.gateway.heavy_process import HeavyProcesses
from es_rerank.gateway.heavy_refusal import RefuseKnownHeavy, weighed_heavy
from es_rerank.gateway.state import gateway_state
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import esrr_serve

BOTH_FIELDS = read_highlight({"fields": {"title": {}, "abstract": {}}})


def test_a_default_search_is_light() -> None:
    assert not is_heavy(10, (), QueryCost(terms=5))
    assert not is_heavy(10, BOTH_FIELDS, QueryCost(terms=5))  # the site page's search: 10 hits, both highlighted
    assert not is_heavy(100, (), QueryCost(terms=256, phrase_cost=100))


@pytest.mark.parametrize(
    ("hits", "highlight", "cost"),
    [
        (101, (), QueryCost()),  # many hits rendered
        (30, BOTH_FIELDS, QueryCost()),  # 30 x 2 x 5 x 100 characters highlighted
        (11, read_highlight({"fields": {"abstract": {"number_of_fragments": 0}}}), QueryCost()),  # whole abstracts
        (10, (), QueryCost(phrase_cost=101)),  # a sloppy phrase
        (10, (), QueryCost(wildcards=1)),
        (10, (), QueryCost(wildcards=2, light_prefixes=1)),  # a prefix, and a wildcard that is not one
        (10, (), QueryCost(terms=257)),
    ],
)
def test_what_makes_a_search_heavy(hits, highlight, cost) -> None:
    assert is_heavy(hits, highlight, cost)


def test_a_full_lane_refuses_a_heavy_search_after_its_wait_and_lets_a_light_one_through() -> None:
    lane = HeavyLane(1, 1, 0.05)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lane.taken(True):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(TooManyHeavySearches, match="ESRR_GATEWAY_HEAVY_SLOTS=1"):
            with lane.taken(True):
                pass
        with lane.taken(False):  # light: no slot needed
            pass
    finally:
        release.set()
        holder.join()
    with lane.taken(True):  # the slot is free again
        pass


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("heavy-lane")
    docs = [
        Document(f"D{n}", f"Green tea and bone number {n}", "Green tea and bone density in women " * 20)
        for n in range(300)
    ]
    build_embedded_index(docs, home / "indexes" / "embedded", version="v1", progress=False)
    return home


@pytest.fixture(scope="module")
def app(home: Path):
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    return create_app(
        ServedSearch(SearchPipeline(backend, 0), 3600),
        GatewaySettings(home=home, gateway_heavy_slots=1, gateway_heavy_queue=1, gateway_heavy_wait_s=0.05),
    )


def test_with_the_lane_held_a_heavy_search_is_a_429_and_a_light_one_answers(app) -> None:
    client = app.test_client()
    lane: HeavyLane = gateway_state(app).heavy_lane
    with lane.taken(True):  # another heavy search is running
        refused = client.post("/_search", json={"query": {"match": {"text": "green tea"}}, "size": 200})
        light = client.get("/_search?q=green+tea&size=10")
        wildcard = client.get("/_search?q=gr*n")
        prefix = client.get("/_search?q=gree*")  # a light prefix: as dear as a word or two
    assert refused.status_code == 429
    assert refused.get_json()["error"]["type"] == "es_rejected_execution_exception"
    assert "ESRR_GATEWAY_HEAVY_WAIT_S" in refused.get_json()["error"]["reason"]
    assert wildcard.status_code == 429 and prefix.status_code == 200
    assert light.status_code == 200 and light.get_json()["hits"]["hits"]
    assert client.post("/_search", json={"query": {"match": {"text": "green tea"}}, "size": 200}).status_code == 200


def test_beyond_its_queue_a_heavy_search_is_refused_at_once_whatever_the_wait() -> None:
    lane = HeavyLane(1, 0, 600.0)  # no queue: a second heavy search would otherwise wait ten minutes
    with lane.taken(True):
        with pytest.raises(TooManyHeavySearches, match="ESRR_GATEWAY_HEAVY_QUEUE=0"):
            with lane.taken(True):
                pass
    with lane.taken(True):  # admitted again once the first is done
        pass


# Heavy searches in a process of their own (heavy_process.py): the same answers, a clear 503 when it dies or hangs.

HEAVY_BODY = {
    "query": {"query_string": {"query": 'green tea bone gree* "tea bone"~30'}},
    "size": 150,
    "highlight": {"fields": {"title": {}, "abstract": {}}},
}


def served_index(index_home: str, check_every_s: float = 3600) -> ServedSearch:
    """The index under ``index_home`` served as the ``app`` fixture serves it."""
    return ServedSearch(
        SearchPipeline(EmbeddedBackend.open_current(Path(index_home) / "indexes" / "embedded"), 0), check_every_s
    )


def heavy_app(index_home: str, settings: GatewaySettings, check_every_s: float = 3600) -> Flask:
    """The app of the heavy searches' process (module-level: the spawned child imports it by name)."""
    return create_app(served_index(index_home, check_every_s), settings)


@pytest.fixture(scope="module")
def apart_app(home: Path):
    settings = GatewaySettings(
        home=home,
        gateway_heavy_slots=1,
        gateway_heavy_queue=1,
        gateway_heavy_wait_s=30,
        gateway_heavy_timeout_s=5,
        gateway_heavy_nice=0,
    )
    apart = create_app(served_index(str(home)), settings, heavy_app=partial(heavy_app, str(home), settings))
    yield apart
    gateway_state(apart).heavy_lane.close()


def _without_took(answer: dict) -> dict:
    return {key: value for key, value in answer.items() if key != "took"}


def _child_pid(app) -> int:
    processes: HeavyProcesses = gateway_state(app).heavy_lane.apart
    deadline = time.monotonic() + 60
    while not processes.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid,) = processes.pids()
    return pid


def test_the_heavy_searches_process_answers_as_this_one_would(app, apart_app) -> None:
    here = app.test_client().post("/_search", json=HEAVY_BODY)
    there = apart_app.test_client().post("/_search", json=HEAVY_BODY)
    assert here.status_code == there.status_code == 200
    assert len(there.get_json()["hits"]["hits"]) == 150
    assert _without_took(there.get_json()) == _without_took(here.get_json())
    assert _child_pid(apart_app) != os.getpid()
    bad = apart_app.test_client().post(
        "/_search", json={**HEAVY_BODY, "highlight": {"fields": {"title": {"number_of_fragments": -1}}}}
    )
    assert (
        bad.status_code
        == app.test_client()
        .post("/_search", json={**HEAVY_BODY, "highlight": {"fields": {"title": {"number_of_fragments": -1}}}})
        .status_code
    )


def test_the_heavy_searches_process_follows_a_reindex_as_the_gateway_does(tmp_path: Path) -> None:
    def corpus(prefix: str) -> list[Document]:
        return [
            Document(f"{prefix}{n}", f"Green tea and bone {n}", "Green tea and bone density " * 10) for n in range(200)
        ]

    root = tmp_path / "indexes" / "embedded"
    build_embedded_index(corpus("old"), root, version="v1", progress=False)
    settings = GatewaySettings(home=tmp_path, gateway_heavy_wait_s=60, gateway_heavy_nice=0)
    app = create_app(served_index(str(tmp_path), 0), settings, heavy_app=partial(heavy_app, str(tmp_path), settings, 0))
    try:
        client = app.test_client()
        before = client.post("/_search", json=HEAVY_BODY).get_json()
        build_embedded_index(corpus("new"), root, version="v2", progress=False)  # esrr index build's swap
        after = client.post("/_search", json=HEAVY_BODY).get_json()
    finally:
        gateway_state(app).heavy_lane.close()
    assert {hit["_id"][:3] for hit in before["hits"]["hits"]} == {"old"}
    assert {hit["_id"][:3] for hit in after["hits"]["hits"]} == {"new"}
    assert len(after["hits"]["hits"]) == 150


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_a_killed_heavy_process_costs_its_search_a_503_and_is_started_again(apart_app) -> None:
    client = apart_app.test_client()
    assert client.post("/_search", json=HEAVY_BODY).status_code == 200
    pid = _child_pid(apart_app)
    os.kill(pid, signal.SIGSTOP)  # held still, so that the search is surely under way when it is killed
    answers: list = []
    searching = threading.Thread(target=lambda: answers.append(client.post("/_search", json=HEAVY_BODY)))
    searching.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    searching.join(30)
    (died,) = answers
    assert died.status_code == 503
    assert "died (signal 9)" in died.get_json()["error"]["reason"]
    assert client.get("/_search?q=green+tea").status_code == 200  # light searches never needed it
    again = client.post("/_search", json=HEAVY_BODY)  # waits for the new process (ESRR_GATEWAY_HEAVY_WAIT_S)
    assert again.status_code == 200
    assert _child_pid(apart_app) != pid


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_a_hung_heavy_process_is_a_503_after_its_timeout_then_replaced(apart_app) -> None:
    client = apart_app.test_client()
    pid = _child_pid(apart_app)
    os.kill(pid, signal.SIGSTOP)
    hung = client.post("/_search", json=HEAVY_BODY)
    assert hung.status_code == 503
    assert "ESRR_GATEWAY_HEAVY_TIMEOUT_S=5" in hung.get_json()["error"]["reason"]
    assert client.post("/_search", json=HEAVY_BODY).status_code == 200
    assert _child_pid(apart_app) != pid


# A heavy search repeated against a full lane is refused before it is read (heavy_refusal.py).


def test_a_known_heavy_search_is_refused_before_the_app_reads_it_while_the_lane_is_full() -> None:
    lane = HeavyLane(1, 0, 0.05)
    reached: list[bytes] = []

    def search(environ, start_response):  # weighs every POST heavy, as the gateway's _ranked would this body
        reached.append(environ["wsgi.input"].read())
        if environ["REQUEST_METHOD"] == "POST":
            weighed_heavy()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]

    refused: list[int] = []
    client = Client(RefuseKnownHeavy(search, lane, on_refused=lambda: refused.append(1)))
    heavy = json.dumps(HEAVY_BODY)
    assert client.post("/_search", data=heavy).status_code == 200
    assert reached == [heavy.encode()]  # the body reaches the app whole after being hashed
    with lane.taken(True):  # the lane is full
        again = client.post("/_search", data=heavy)
        other = client.post("/_search", data=heavy + " ")  # not the same bytes: read and weighed as usual
        light = client.get("/_search?q=tea")
        msearch = client.post("/_msearch", data=heavy)
    assert again.status_code == 429 and refused == [1]
    assert again.get_json()["error"]["reason"] == lane.refusal_when_full().reason
    assert again.headers["X-Elastic-Product"] == "Elasticsearch"
    assert (other.status_code, light.status_code, msearch.status_code) == (200, 200, 200)
    assert len(reached) == 4  # all but the known one
    assert client.post("/_search", data=heavy).status_code == 200  # room in the lane: read again


def test_through_the_app_a_repeated_heavy_search_gets_the_same_429_before_and_after_it_is_known(home) -> None:
    app = create_app(served_index(str(home)), GatewaySettings(home=home, gateway_heavy_slots=1, gateway_heavy_queue=0))
    client = app.test_client()
    lane: HeavyLane = gateway_state(app).heavy_lane
    body = {**HEAVY_BODY, "size": 120}
    assert client.post("/_search", json=body).status_code == 200  # weighed heavy: now known
    with lane.taken(True):  # the one slot taken, no queue
        known = client.post("/_search", json=body)
        unknown = client.post("/_search", json={**body, "size": 121})  # refused after it is weighed
        light = client.get("/_search?q=green+tea")
    assert known.status_code == unknown.status_code == 429
    assert known.get_json() == unknown.get_json()
    assert light.status_code == 200


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads child processes from /proc")
@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_esrr_serve_runs_heavy_searches_in_a_child_that_ends_with_it(home, free_port) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
    }
    with esrr_serve(env, port) as (url, process):

        def search(body: dict) -> tuple[int, dict]:
            request = urllib.request.Request(
                f"{url}/_search", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        def answered() -> dict:
            deadline = time.monotonic() + 90
            while (found := search(HEAVY_BODY))[0] != 200 and time.monotonic() < deadline:
                assert found[0] == 503, found  # the child died, or is not ready within ESRR_GATEWAY_HEAVY_WAIT_S
            assert found[0] == 200, found
            return found[1]

        assert len(answered()["hits"]["hits"]) == 150
        (child,) = _spawned(process.pid)  # the heavy searches' process (ESRR_GATEWAY_HEAVY_SLOTS=1)
        os.kill(child, signal.SIGKILL)
        answered()
        (replacement,) = _spawned(process.pid)
        assert replacement != child
    deadline = time.monotonic() + 30
    while Path(f"/proc/{replacement}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{replacement}").exists()  # it ended with the gateway


def _spawned(pid: int) -> set[int]:
    """The children of ``pid`` that multiprocessing spawned to run a function (not its resource tracker)."""
    return {child for child in children(pid) if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()}


@pytest.mark.parametrize(
    ("wildcard", "light"),
    [
        ("can*", True),
        ("ca*", True),  # search-as-you-type's last word: a range of the term dictionary
        ("c*", False),
        ("te?a*", False),
        ("t*a", False),
        ("can**", False),
    ],
)
def test_a_prefix_of_two_letters_or_more_is_a_light_search(wildcard, light):
    cost = check_cost(Pattern("x", wildcard), QueryLimits())
    assert (cost.wildcards, cost.light_prefixes, cost.heavy_wildcards) == (1, int(light), int(not light))
    assert is_heavy(10, (), cost) is not light
