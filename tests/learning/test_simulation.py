"""Simulated users (``es_rerank.learning.simulation``): the cascade models click as their parameters say, and
sessions played through a real gateway (Flask's test client over a real index) land in the event store."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.state import gateway_state
from es_rerank.learning.simulation import CLICK_MODELS, CascadeClickModel, GatewayRefused, run_sessions
from es_rerank.learning.store import open_store
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

DRAWS = 20_000


def rate(model: CascadeClickModel, grades: list[int], rank: int, seed: int = 0) -> float:
    """How often ``model`` clicks ``rank`` on a page of ``grades``, over ``DRAWS`` pages."""
    rng = random.Random(seed)
    return sum(rank in model.clicks(grades, rng) for _ in range(DRAWS)) / DRAWS


@pytest.mark.parametrize("name", sorted(CLICK_MODELS))
def test_each_model_clicks_a_result_as_often_as_its_grade_says(name):
    model = CLICK_MODELS[name]
    for grade in (0, 1, 2):
        assert rate(model, [grade], 0) == pytest.approx(model.click[grade], abs=0.015)


@pytest.mark.parametrize("name", sorted(CLICK_MODELS))
def test_after_a_click_the_user_stops_as_often_as_the_model_says(name):
    model = CLICK_MODELS[name]
    for grade in (1, 2):  # the second result, grade 2, is reached unless the user stopped after the first
        reached = model.click[grade] * (1 - model.stop[grade]) + (1 - model.click[grade])
        assert rate(model, [grade, 2], 1) == pytest.approx(reached * model.click[2], abs=0.015)


def test_the_perfect_user_never_clicks_a_bad_result_and_never_stops():
    rng = random.Random(1)
    pages = [CLICK_MODELS["perfect"].clicks([0, 2, 0, 2, 1, 0, 0, 0, 0, 2], rng) for _ in range(1000)]
    assert all({1, 3, 9} <= set(clicked) and not {0, 2, 5, 6, 7, 8} & set(clicked) for clicked in pages)


def test_a_seed_replays_the_same_clicks():
    grades = [1, 0, 2, 1, 0, 2, 0, 1, 0, 0]
    model = CLICK_MODELS["informational"]
    first = [model.clicks(grades, rng) for rng in [random.Random(7)] for _ in range(50)]
    again = [model.clicks(grades, rng) for rng in [random.Random(7)] for _ in range(50)]
    assert first == again


def _post_to(client):
    def post(path: str, body):
        response = client.post(path, data=json.dumps(body), content_type="application/json")
        return response.status_code, response.get_json()

    return post


@pytest.fixture
def gateway(tmp_path: Path):
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(tmp_path / "indexes" / "embedded"), 10), 5.0)
    return create_app(served, GatewaySettings(home=tmp_path)), tmp_path


def test_sessions_through_the_gateway_are_stored_as_the_page_would_report_them(gateway):
    app, home = gateway
    queries = {"q1": "vitamin d", "q2": "bone health", "q3": "breast cancer"}
    qrels = {"q1": {"a": 2, "b": 1}, "q2": {"b": 2}, "q3": {"c": 1}}
    tally = run_sessions(_post_to(app.test_client()), queries, qrels, CLICK_MODELS["perfect"], 30, seed=3)
    assert gateway_state(app).events.flush(30)
    store = open_store(str(home / "events" / "events.sqlite3"))
    impressions = [event for event, _ in store.impressions()]
    clicks = [event for event, _ in store.clicks()]
    assert tally.sessions == len(impressions) == 30 and tally.clicks == len(clicks)
    shown = {event.impression_id: event for event in impressions}
    for click in clicks:  # the perfect user clicks only judged documents, where its impression showed them
        impression = shown[click.impression_id]
        assert click.session_id == impression.session_id
        assert click.id in qrels[next(q for q, text in queries.items() if text == impression.query)]
        assert {"id": click.id, "position": click.position} in [
            r.model_dump(exclude_none=True) for r in impression.results
        ]
    assert tally.clicks_by_grade[0] == 0 and tally.clicks_by_grade[2] > 0
    replay = run_sessions(_post_to(app.test_client()), queries, qrels, CLICK_MODELS["perfect"], 30, seed=3)
    assert replay.as_dict() == tally.as_dict()


def test_an_interleaved_answers_arm_and_teams_go_into_the_impression(tmp_path):
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(tmp_path / "indexes" / "embedded"), 10), 5.0)
    app = create_app(served, GatewaySettings(home=tmp_path, experiment="bm25"))
    run_sessions(_post_to(app.test_client()), {"q1": "vitamin d"}, {"q1": {"a": 2}}, CLICK_MODELS["perfect"], 5, seed=1)
    assert gateway_state(app).events.flush(30)
    impressions = [event for event, _ in open_store(str(tmp_path / "events" / "events.sqlite3")).impressions()]
    assert len(impressions) == 5 and {impression.arm for impression in impressions} == {"bm25"}
    for impression in impressions:
        assert impression.results and all(shown.team in ("served", "candidate") for shown in impression.results)


def test_a_gateway_that_records_no_events_stops_the_simulation_saying_so(tmp_path):
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(tmp_path / "indexes" / "embedded"), 10), 5.0)
    client = create_app(served, GatewaySettings(home=tmp_path, events=False)).test_client()
    with pytest.raises(GatewayRefused, match="HTTP 404: this gateway records no events"):
        run_sessions(_post_to(client), {"q": "bone"}, {"q": {"b": 1}}, CLICK_MODELS["perfect"], 1, seed=0)


def _beir_folder(root: Path) -> Path:
    """A BEIR folder over the tiny corpus: three judged train queries (and the dev and test files BEIR has)."""
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for doc in TINY_DOCS:
            corpus.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.abstract}) + "\n")
    queries = {"q1": "vitamin d", "q2": "bone health", "q3": "breast cancer", "q4": "calcium"}
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t2\nq1\tb\t1\nq2\tb\t2\nq3\tc\t1\n")
    for split in ("dev", "test"):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq4\tb\t1\n")
    return root


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_esrr_simulate_drives_a_served_gateway_and_its_events_are_stored(tmp_path, free_port):
    from click.testing import CliRunner

    from es_rerank.cli import main
    from tests.conftest import esrr_serve

    home = tmp_path / "home"
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    data = _beir_folder(tmp_path / "beir")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
    }
    figures = tmp_path / "tally.json"
    with esrr_serve(env, free_port()) as (url, _):
        result = CliRunner().invoke(
            main,
            [
                "simulate",
                "--url",
                url,
                "--data",
                str(data),
                "--model",
                "perfect",
                "--sessions",
                "40",
                "--seed",
                "5",
                "--json-out",
                str(figures),
            ],
        )
        assert result.exit_code == 0, result.output
    tally = json.loads(figures.read_text())
    assert "40 sessions (perfect, seed 5) over 3 train queries" in result.output
    assert tally["sessions"] == 40 and tally["clicks_by_grade"]["0"] == 0 and tally["clicks"] > 0
    store = open_store(str(home / "events" / "events.sqlite3"))  # written before the gateway stopped
    assert store.counts() == {"impressions": 40, "clicks": tally["clicks"]}
    assert {event.query for event, _ in store.impressions()} <= {"vitamin d", "bone health", "breast cancer"}


def test_esrr_simulate_names_a_gateway_it_cannot_reach(tmp_path, free_port):
    from click.testing import CliRunner

    from es_rerank.cli import main

    data = _beir_folder(tmp_path / "beir")
    result = CliRunner().invoke(
        main, ["simulate", "--url", f"http://127.0.0.1:{free_port()}", "--data", str(data), "--sessions", "1"]
    )
    assert result.exit_code == 1 and "cannot reach the gateway at" in result.output and "esrr serve" in result.output
