"""The event store on PostgreSQL (``es_rerank.learning.store_postgres``) against a real server from Debian's
packages (``tests/learning/conftest.py``): the same rows as SQLite, writers that agree, and a gateway whose store is
unreachable still answering its searches."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.state import gateway_state
from es_rerank.learning.events import Click, Impression, Received, Shown
from es_rerank.learning.store import EventStoreError, open_store
from es_rerank.learning.store_postgres import public_url
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

pytestmark = pytest.mark.postgres
pytest.importorskip("psycopg", reason="needs psycopg: pip install 'es-rerank[postgres]'")
SESSION = "0123456789abcdef0123456789abcdef"


def impression(key: int, query: str = "bone loss", *pairs) -> Impression:
    return Impression(
        type="impression",
        impression_id=f"{key:016x}",
        session_id=SESSION,
        query=query,
        ranker="BM25",
        results=[Shown(id=doc, position=place) for doc, place in (pairs or (("a", 1), ("b", 2)))],
    )


def test_events_read_back_as_they_were_written(postgres_url):
    store = open_store(postgres_url)
    picked = Impression(
        type="impression",
        impression_id="ffffffffffffffff",
        session_id=SESSION,
        query="bone loss",
        ranker="team draft",
        arm="candidate",
        results=[Shown(id="a", position=3, team="served"), Shown(id="b", position=1, team="candidate")],
    )
    hit = Click(type="click", impression_id="0000000000000001", session_id=SESSION, id="b", position=2)
    store.write([Received(impression(1), 1000), Received(picked, 1001), Received(hit, 1002)])
    store.write([Received(impression(1, "other words"), 1003)])  # the same impression id again: kept as it was
    assert list(store.impressions()) == [(impression(1), 1000), (picked, 1001)]
    assert list(store.clicks()) == [(hit, 1002)]
    assert store.delete_before(1002) == 2 and store.counts() == {"impressions": 0, "clicks": 1}
    store.close()
    assert list(open_store(postgres_url).impressions()) == []  # opened again: the teams column is added once


def test_writers_on_several_connections_agree_on_the_numbers_of_new_texts(postgres_url):
    stores = [open_store(postgres_url) for _ in range(4)]
    failures: list[BaseException] = []

    def write(number: int, store) -> None:
        try:
            for batch in range(10):  # the same new query texts and documents, from every writer at once
                store.write(
                    [
                        Received(
                            impression(number * 1000 + batch * 10 + n, f"query {n}", (f"d{n}", 1), (f"d{n + 1}", 2)),
                            batch,
                        )
                        for n in range(10)
                    ]
                )
        except BaseException as error:  # reported below, with the writer's number
            failures.append(error)

    threads = [threading.Thread(target=write, args=(number, store)) for number, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    events = [event for event, _ in stores[0].impressions()]
    assert len(events) == 400 and {event.query for event in events} == {f"query {n}" for n in range(10)}
    assert all(event.results[0].id == f"d{event.query.split()[1]}" for event in events)


def test_a_server_that_cannot_be_reached_is_named_without_the_password(free_port):
    url = f"postgresql://esrr:s3cret@127.0.0.1:{free_port()}/events"
    with pytest.raises(
        EventStoreError, match=r"cannot open the event store postgresql://127\.0\.0\.1:\d+/events"
    ) as refused:
        open_store(url)
    assert "s3cret" not in str(refused.value) and "s3cret" not in public_url(url)


def _app(home: Path, url: str):
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(home / "indexes" / "embedded"), 10), 5.0)
    return create_app(served, GatewaySettings(home=home, events_url=url))


def test_a_gateway_records_to_postgresql(tmp_path, postgres_url):
    app = _app(tmp_path, postgres_url)
    client = app.test_client()
    event = impression(7).model_dump(exclude_none=True)
    assert client.post("/_esrr/events", json=event).status_code == 202
    assert gateway_state(app).events.flush(30)
    assert [found.model_dump(exclude_none=True) for found, _ in open_store(postgres_url).impressions()] == [event]
    assert not (tmp_path / "events").exists()


def test_a_gateway_whose_postgresql_is_gone_still_answers_its_searches(tmp_path, free_port):
    app = _app(tmp_path, f"postgresql://esrr@127.0.0.1:{free_port()}/events")
    client = app.test_client()
    assert client.post("/_esrr/events", json=impression(8).model_dump(exclude_none=True)).status_code == 202
    answer = client.get("/_search?q=vitamin")
    assert answer.status_code == 200 and answer.get_json()["hits"]["hits"]
    assert gateway_state(app).events.flush(30)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'esrr_events_dropped_total{reason="store_unavailable"} 1.0' in metrics


def test_bench_events_measures_an_empty_postgresql_database_only(tmp_path, postgres_url):
    from click.testing import CliRunner

    from es_rerank.cli import main
    from tests.learning.test_simulation import _beir_folder

    data, figures = _beir_folder(tmp_path / "beir"), tmp_path / "figures.json"
    command = ["bench", "events", "--events", "500", "--requests", "50", "--data", str(data), "--url", postgres_url]
    result = CliRunner().invoke(main, [*command, "--json-out", str(figures)])
    assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    counts = open_store(postgres_url).counts()
    assert report["store"] == "postgresql" and report["bytes"] > 0 and sum(counts.values()) == 500
    again = CliRunner().invoke(main, command)
    assert again.exit_code == 1 and "holds events already; give an empty one" in again.output


def test_a_database_made_before_teams_gains_the_column(postgres_url):
    import psycopg

    from es_rerank.learning.store_postgres import SCHEMA

    with psycopg.connect(postgres_url, autocommit=True) as db:  # the tables as they were before teams
        db.execute(SCHEMA.replace(", teams TEXT", "").split("ALTER TABLE")[0])
    store = open_store(postgres_url)
    picked = Impression(
        type="impression",
        impression_id="00000000000000a2",
        session_id=SESSION,
        query="bone loss",
        ranker="BM25",
        arm="bm25",
        results=[Shown(id="a", position=1, team="candidate")],
    )
    store.write([Received(impression(1), 1000), Received(picked, 1001)])
    assert list(store.impressions()) == [(impression(1), 1000), (picked, 1001)]
