"""An interleaving experiment's events and verdict (``es_rerank.learning.experiment``, ``esrr experiment``): teams
recorded through the events API and read back, stores made before teams migrated, the report over a store, and
promotion that is explicit, refused without a win, and atomic."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.cli import main
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.state import gateway_state
from es_rerank.learning.events import Click, Impression, Received, Shown
from es_rerank.learning.experiment import replace_atomically
from es_rerank.learning.store import SCHEMA, open_store
from es_rerank.ranking.neighbours import JudgedNeighbours, NeighbourParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

SESSION = "0123456789abcdef0123456789abcdef"


def _impression(key: int, teams: tuple[str | None, ...], arm: str | None = "bm25") -> Impression:
    return Impression(
        type="impression",
        impression_id=f"{key:016x}",
        session_id=SESSION,
        query="bone loss",
        ranker="BM25 + judged neighbours",
        arm=arm,
        results=[Shown(id=f"d{i}", position=i + 1, team=team) for i, team in enumerate(teams)],
    )


def _click(key: int, position: int) -> Click:
    return Click(
        type="click", impression_id=f"{key:016x}", session_id=SESSION, id=f"d{position - 1}", position=position
    )


def test_teams_go_through_the_events_api_into_the_store_and_back(tmp_path):
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(tmp_path / "indexes" / "embedded"), 10), 5.0)
    app = create_app(served, GatewaySettings(home=tmp_path))
    sent = _impression(1, ("candidate", "served", "served"))
    response = app.test_client().post("/_esrr/events", json=[sent.model_dump(), _click(1, 1).model_dump()])
    assert response.status_code == 202
    refused = app.test_client().post(
        "/_esrr/events", json={**sent.model_dump(), "results": [{"id": "x", "position": 1, "team": "challenger"}]}
    )
    assert refused.status_code == 400 and "results.0.team" in refused.get_json()["error"]["reason"]
    assert gateway_state(app).events.flush(30)
    store = open_store(str(tmp_path / "events" / "events.sqlite3"))
    assert [event for event, _ in store.impressions()] == [sent]


def test_a_store_made_before_teams_gains_the_column_and_keeps_its_rows(tmp_path):
    path = tmp_path / "events.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(re.sub(r"\n    teams TEXT .*", "", SCHEMA.replace("positions TEXT,", "positions TEXT")))
    assert "teams" not in {row[1] for row in old.execute("PRAGMA table_info(impressions)")}
    old.close()
    store = open_store(str(path))
    before = _impression(1, (None, None), arm=None)
    store.write([Received(before, 1)])
    store.close()
    store = open_store(str(path))  # opened again: the column is there once
    after = _impression(2, ("served", None))
    store.write([Received(after, 2)])
    assert [event for event, _ in store.impressions()] == [before, after]


def _synthetic_store(path: Path, wins: int, losses: int, ties: int, unclicked: int) -> None:
    """A store of ``bm25`` impressions whose clicks make the candidate win, lose, tie or leave them unclicked,
    beside impressions of another arm and plain ones that must not count."""
    store = open_store(str(path))
    events, key = [], 0
    for outcome, count in (("win", wins), ("loss", losses), ("tie", ties), ("none", unclicked)):
        for _ in range(count):
            key += 1
            events.append(Received(_impression(key, ("served", "candidate", "served", "candidate")), key))
            clicked = {"win": [2], "loss": [1, 3], "tie": [1, 2], "none": []}[outcome]
            events += [Received(_click(key, position), key) for position in clicked]
    for _ in range(5):  # another experiment's wins, and a page without teams
        key += 1
        events += [
            Received(_impression(key, ("served", "candidate"), arm="votes:old.json"), key),
            Received(_click(key, 2), key),
        ]
    key += 1
    events += [Received(_impression(key, (None, None), arm=None), key), Received(_click(key, 1), key)]
    store.write(events)
    store.close()


def _esrr(home: Path, *args: str, **env: str):
    return CliRunner().invoke(main, list(args), env={"ESRR_HOME": str(home), "ESRR_EXPERIMENT": "", **env})


def test_the_report_counts_one_experiments_wins_ties_and_losses(tmp_path):
    _synthetic_store(tmp_path / "events" / "events.sqlite3", wins=3, losses=20, ties=4, unclicked=7)
    out = tmp_path / "report.json"
    result = _esrr(tmp_path, "experiment", "report", "--json-out", str(out), ESRR_EXPERIMENT="bm25")
    assert result.exit_code == 0, result.output
    assert "experiment bm25: 34 interleaved impressions, 7 unclicked" in result.output
    assert "candidate wins 3, ties 4, losses 20" in result.output
    assert "the served ranker won at p < 0.05" in result.output
    figures = json.loads(out.read_text())
    assert (figures["wins"], figures["losses"], figures["ties"], figures["promotable"]) == (3, 20, 4, False)
    # The sign test: two-sided, 3 or fewer of 23 decided impressions won at 1/2 each.
    assert figures["p_value"] == pytest.approx(2 * (1 + 23 + 253 + 1771) / 2**23)
    other = _esrr(tmp_path, "experiment", "report", "--name", "votes:old.json")
    assert "candidate wins 5, ties 0, losses 0" in other.output and "it may be promoted" not in other.output
    missing = _esrr(tmp_path, "experiment", "report", "--name", "votes:new.json")
    assert missing.exit_code == 1
    assert "no interleaved impression of experiment 'votes:new.json'" in missing.output
    assert "bm25 (34), votes:old.json (5)" in missing.output


def _votes(path: Path, query: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    JudgedNeighbours({"q": query, "r": "calcium"}, {"q": {"a": 1}, "r": {"b": 1}}, NeighbourParams()).save(path)
    return path


def test_promote_refuses_bm25_a_candidate_that_did_not_win_and_a_damaged_file(tmp_path):
    served = _votes(tmp_path / "models" / "judged-neighbours.json", "bone loss")
    candidate = _votes(tmp_path / "learned.json", "vitamin")
    before = served.read_bytes()
    bm25 = _esrr(tmp_path, "experiment", "promote", ESRR_EXPERIMENT="bm25")
    assert bm25.exit_code == 1 and "ESRR_GATEWAY_WINDOW=0" in bm25.output
    _synthetic_store(tmp_path / "events" / "events.sqlite3", wins=0, losses=0, ties=0, unclicked=1)
    lost = _esrr(tmp_path, "experiment", "promote", ESRR_EXPERIMENT=f"votes:{candidate}")
    assert lost.exit_code == 1 and "the report does not say votes:learned.json won" in lost.output
    candidate.write_text('{"kind": "judged-neighbours"')
    damaged = _esrr(tmp_path, "experiment", "promote", "--force", ESRR_EXPERIMENT=f"votes:{candidate}")
    assert damaged.exit_code == 1 and "cannot be read as judged neighbours" in damaged.output
    assert served.read_bytes() == before


def test_a_candidate_that_won_is_promoted_in_one_rename(tmp_path):
    served = _votes(tmp_path / "models" / "judged-neighbours.json", "bone loss")
    candidate = _votes(tmp_path / "learned.json", "vitamin")
    store = open_store(str(tmp_path / "events" / "events.sqlite3"))
    events = []
    for key in range(1, 11):  # ten wins of the candidate: p = 0.002
        events += [
            Received(_impression(key, ("served", "candidate"), arm="votes:learned.json"), key),
            Received(_click(key, 2), key),
        ]
    store.write(events)
    store.close()
    with open(served, "rb") as reader:  # a reader that opened the old file keeps reading it whole
        result = _esrr(tmp_path, "experiment", "promote", ESRR_EXPERIMENT=f"votes:{candidate}")
        assert result.exit_code == 0, result.output
        assert json.loads(reader.read())["queries"]["q"] == "bone loss"
    assert served.read_bytes() == candidate.read_bytes()
    assert "restart `esrr serve`" in result.output
    assert sorted(path.name for path in served.parent.iterdir()) == ["judged-neighbours.json"]  # no temporary left
    again = _esrr(tmp_path, "experiment", "promote", "--experiment", f"votes:{served}")
    assert again.exit_code == 1 and "is the served votes file already" in again.output


def test_replace_atomically_leaves_the_target_whole_when_the_copy_fails(tmp_path):
    target = tmp_path / "served.json"
    target.write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_atomically(tmp_path / "missing.json", target)
    assert target.read_text() == "old" and [path.name for path in tmp_path.iterdir()] == ["served.json"]
