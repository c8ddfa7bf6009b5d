"""``ESRR_EXPERIMENT`` in the gateway (``es_rerank.gateway.experiment``): a scored first page is team-draft
interleaved from the served ranking and the candidate's, each hit's team said in ``esrr.experiment``; other
searches are answered as before; a bad setting is a startup error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.experiment import Experiment, ExperimentError, parse_experiment
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours, NeighbourParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.gateway.test_site import ARTICLES

QUERY = {"query": {"match": {"text": "vitamin"}}, "size": 3, "_source": False}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_embedded_index(list(ARTICLES), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return tmp_path


def _votes(home: Path, name: str, judged: str) -> Path:
    """A votes file over the test index in which a query like ours judged document ``judged`` relevant."""
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    votes = JudgedNeighbours(
        {"q1": "vitamin", "q2": "bone"},
        {"q1": {judged: 2}, "q2": {"2": 1}},
        NeighbourParams(weight=50.0, confidence=0.0),
        CorpusIdentity.of(backend.stats),
    )
    path = home / name
    votes.save(path)
    return path


def _client(home: Path, served_votes: Path | None = None, **settings):
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    neighbours = JudgedNeighbours.load(served_votes) if served_votes else None
    served = ServedSearch(SearchPipeline(backend, 10, neighbours=neighbours), 5.0)
    return create_app(served, GatewaySettings(home=home, events=False, **settings)).test_client()


def _ids(answer: dict) -> list[str]:
    return [hit["_id"] for hit in answer["hits"]["hits"]]


def test_a_first_page_is_interleaved_and_says_each_hits_team(home):
    served_votes, candidate_votes = _votes(home, "served.json", "1"), _votes(home, "candidate.json", "MED-3")
    client = _client(home, served_votes, experiment=f"votes:{candidate_votes}")
    plain = _client(home, served_votes).post("/_search", json=QUERY).get_json()
    assert "experiment" not in plain["esrr"] and _ids(plain)[0] == "1"  # the served votes lift document 1
    firsts = set()
    for _ in range(40):
        answer = client.post("/_search", json=QUERY).get_json()
        experiment = answer["esrr"]["experiment"]
        assert experiment["name"] == "votes:candidate.json"
        assert len(experiment["teams"]) == len(answer["hits"]["hits"]) == 3
        assert set(experiment["teams"]) <= {"served", "candidate"}
        assert sorted(_ids(answer)) == sorted(_ids(plain))
        first, team = _ids(answer)[0], experiment["teams"][0]
        assert (first, team) in {("1", "served"), ("MED-3", "candidate")}  # each side's top pick, by a coin toss
        firsts.add(team)
    assert firsts == {"served", "candidate"}


def test_bm25_candidate_and_searches_that_take_no_part(home):
    client = _client(home, _votes(home, "served.json", "MED-3"), experiment="bm25")
    answer = client.post("/_search", json=QUERY).get_json()
    assert answer["esrr"]["experiment"]["name"] == "bm25"
    for body in (
        {**QUERY, "from": 1},
        {**QUERY, "size": 0},
        {**QUERY, "sort": [{"year": "desc"}]},
        {**QUERY, "sort": ["_score", {"year": "asc"}], "search_after": [1.0, 2000]},
    ):
        response = client.post("/_search", json=body)
        assert response.status_code == 200 and "experiment" not in response.get_json()["esrr"]
    scrolled = client.post("/_search?scroll=1m", json=QUERY)
    assert scrolled.status_code == 200 and "experiment" not in scrolled.get_json()["esrr"]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("bm26", "ESRR_EXPERIMENT='bm26' is no candidate this gateway serves; set bm25"),
        ("votes:/no/such.json", "names the votes file /no/such.json, which does not exist"),
    ],
)
def test_a_bad_experiment_is_a_settings_error_naming_the_fix(home, value, said):
    with pytest.raises(ValidationError, match="experiment") as error:
        GatewaySettings(home=home, experiment=value)
    assert said in str(error.value)


def test_votes_of_another_corpus_refuse_to_start_and_take_no_part_after_a_reindex(home, tmp_path):
    other = tmp_path / "other"
    build_embedded_index(list(ARTICLES[:2]), other / "indexes" / "embedded", version="v1", progress=False)
    votes = _votes(other, "votes.json", "1")
    with pytest.raises(ExperimentError, match="ESRR_EXPERIMENT names votes of another corpus"):
        _client(home, experiment=f"votes:{votes}")
    experiment = Experiment.load(
        parse_experiment(f"votes:{votes}"), EmbeddedBackend.open_current(other / "indexes" / "embedded").stats
    )
    assert experiment.applies(EmbeddedBackend.open_current(other / "indexes" / "embedded").stats)
    assert not experiment.applies(EmbeddedBackend.open_current(home / "indexes" / "embedded").stats)
