"""Heavy searches take a lane of few slots; light ones never wait for it (issue 32's probe floor).

The weighing is pure and tested on its own; the lane through the real app over a real
embedded index: with its one slot held, a heavy search is a 429 in Elasticsearch's shape
naming the settings, and a light search is answered.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.highlight import read_highlight
from es_rerank.backends.query_tree import QueryCost
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.errors import TooManyHeavySearches
from es_rerank.gateway.heavy_lane import HeavyLane, is_heavy
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index

BOTH_FIELDS = read_highlight({"fields": {"title": {}, "abstract": {}}})


def test_a_default_search_is_light() -> None:
    assert not is_heavy(10, (), QueryCost(terms=5))
    assert not is_heavy(10, BOTH_FIELDS, QueryCost(terms=5))  # the site page's search: 10 hits, both highlighted
    assert not is_heavy(100, (), QueryCost(terms=256, phrase_cost=100))


@pytest.mark.parametrize(("hits", "highlight", "cost"), [
    (101, (), QueryCost()),  # many hits rendered
    (30, BOTH_FIELDS, QueryCost()),  # 30 x 2 x 5 x 100 characters highlighted
    (11, read_highlight({"fields": {"abstract": {"number_of_fragments": 0}}}), QueryCost()),  # whole abstracts
    (10, (), QueryCost(phrase_cost=101)),  # a sloppy phrase
    (10, (), QueryCost(wildcards=1)),
    (10, (), QueryCost(terms=257)),
])
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
def app(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("heavy-lane")
    docs = [Document(f"D{n}", f"Green tea and bone number {n}", "Green tea and bone density in women " * 20)
            for n in range(300)]
    build_embedded_index(docs, home / "indexes" / "embedded", version="v1", progress=False)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    return create_app(ServedSearch(SearchPipeline(backend, 0), 3600),
                      GatewaySettings(home=home, gateway_heavy_slots=1, gateway_heavy_queue=1,
                                      gateway_heavy_wait_s=0.05))


def test_with_the_lane_held_a_heavy_search_is_a_429_and_a_light_one_answers(app) -> None:
    client = app.test_client()
    lane: HeavyLane = app.extensions["esrr.heavy_lane"]
    with lane.taken(True):  # another heavy search is running
        refused = client.post("/_search", json={"query": {"match": {"text": "green tea"}}, "size": 200})
        light = client.get("/_search?q=green+tea&size=10")
        wildcard = client.get("/_search?q=gree*")
    assert refused.status_code == 429
    assert refused.get_json()["error"]["type"] == "es_rejected_execution_exception"
    assert "ESRR_GATEWAY_HEAVY_WAIT_S" in refused.get_json()["error"]["reason"]
    assert wildcard.status_code == 429
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
