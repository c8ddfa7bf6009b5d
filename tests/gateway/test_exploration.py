"""``ESRR_EXPLORE`` in the gateway (``es_rerank.gateway.exploration``): on its share of scored first pages, the last
``ESRR_EXPLORE_SLOTS`` places show documents drawn from the served ranking's places below the page down to
``ESRR_EXPLORE_DEPTH``, said in ``esrr.explored``; the page's top is the served one; other searches, and a gateway
running an experiment, are answered as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index

# Twelve documents about vitamins, BM25 ordering them by how often they say it: d00 first, d11 last.
DOCS = [
    Document(f"d{n:02d}", f"Study {n}", " ".join(["vitamin"] * (12 - n) + ["calcium"] * (n + 4))) for n in range(12)
]
QUERY = {"query": {"match": {"text": "vitamin"}}, "size": 4, "_source": False}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_embedded_index(DOCS, tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return tmp_path


def _client(home: Path, **settings):
    """A gateway serving BM25 with votes that lift d09, so that its window of 12 is scored (a pipeline with no
    stage reads only the page, and has nothing below it to explore)."""
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    votes = JudgedNeighbours({"q1": "vitamin"}, {"q1": {"d09": 2}}, corpus=CorpusIdentity.of(backend.stats))
    served = ServedSearch(SearchPipeline(backend, 12, neighbours=votes), 5.0)
    return create_app(served, GatewaySettings(home=home, events=False, **settings)).test_client()


def _ids(answer: dict) -> list[str]:
    return [hit["_id"] for hit in answer["hits"]["hits"]]


def test_an_exploring_page_keeps_its_top_and_draws_its_last_places_from_below_it(home):
    served = _ids(_client(home).post("/_search", json={**QUERY, "size": 12}).get_json())
    client = _client(home, explore=1.0, explore_slots=2, explore_depth=8)
    drawn = set()
    for _ in range(30):
        answer = client.post("/_search", json=QUERY).get_json()
        ids = _ids(answer)
        assert answer["esrr"]["explored"] == [3, 4]
        assert ids[:2] == served[:2]  # the top of the page is the served one
        assert set(ids[2:]) <= set(served[4:8]) and len(set(ids)) == 4  # places 5 to 8, each once
        assert all(hit["_score"] is not None for hit in answer["hits"]["hits"])
        drawn.update(ids[2:])
    assert drawn == set(served[4:8])  # every document within the depth gets its turn


def test_a_share_explores_some_pages_and_others_are_served_as_before(home):
    served = _ids(_client(home).post("/_search", json=QUERY).get_json())
    client = _client(home, explore=0.5)
    explored = 0
    for _ in range(60):
        answer = client.post("/_search", json=QUERY).get_json()
        if "explored" in answer["esrr"]:
            explored += 1
            assert answer["esrr"]["explored"] == [2, 3, 4] and _ids(answer)[0] == served[0]
        else:
            assert _ids(answer) == served
    assert 10 < explored < 50  # about half, by each search's draw


def test_searches_that_take_no_part_and_an_experiment_explore_nothing(home):
    client = _client(home, explore=1.0)
    for body in ({**QUERY, "from": 1}, {**QUERY, "size": 0}, {**QUERY, "sort": [{"year": "desc"}]}):
        response = client.post("/_search", json=body)
        assert response.status_code == 200 and "explored" not in response.get_json()["esrr"]
    answer = _client(home, explore=1.0, experiment="bm25").post("/_search", json=QUERY).get_json()
    assert "explored" not in answer["esrr"] and answer["esrr"]["experiment"]["name"] == "bm25"
    whole = client.post("/_search", json={**QUERY, "size": 12}).get_json()  # nothing below the page: as served
    assert "explored" not in whole["esrr"]


@pytest.mark.parametrize(("name", "value"), [("explore", 1.5), ("explore_slots", 0), ("explore_depth", 1)])
def test_a_bad_exploration_setting_is_refused_naming_it(home, name, value):
    with pytest.raises(ValidationError, match=name):
        GatewaySettings(home=home, **{name: value})
