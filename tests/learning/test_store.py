"""The SQLite event store (``es_rerank.learning.store``): what is written reads back the same, retention deletes."""

from __future__ import annotations

import sqlite3

import pytest

from es_rerank.learning.events import Click, Impression, Received, Shown
from es_rerank.learning.store import EventStoreError, open_store, sqlite_path

SESSION = "0123456789abcdef0123456789abcdef"


def shown(*pairs) -> Impression:
    return Impression(
        type="impression",
        impression_id="00000000000000a1",
        session_id=SESSION,
        query="bone loss",
        ranker="BM25",
        results=[Shown(id=doc, position=place) for doc, place in pairs],
    )


def test_events_read_back_as_they_were_written(tmp_path):
    store = open_store(str(tmp_path / "events" / "events.sqlite3"))
    page = shown(("MED-1", 11), ("MED-2", 12))
    picked = Impression(
        type="impression",
        impression_id="ffffffffffffffff",
        session_id=SESSION,
        query="bone loss",
        ranker="team draft",
        arm="candidate",
        results=[Shown(id="a", position=3), Shown(id="b", position=1)],
    )
    empty = Impression(
        type="impression",
        impression_id="0000000000000001",
        session_id=SESSION,
        query="nothing",
        ranker="BM25",
        results=[],
    )
    hit = Click(type="click", impression_id="00000000000000a1", session_id=SESSION, id="MED-2", position=12)
    store.write([Received(page, 1000), Received(picked, 1001), Received(empty, 1002), Received(hit, 1003)])
    assert [(event, at) for event, at in store.impressions()] == [(page, 1000), (picked, 1001), (empty, 1002)]
    assert list(store.clicks()) == [(hit, 1003)]
    assert store.counts() == {"impressions": 3, "clicks": 1}
    assert sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # A query text and a ranker name are stored once, however many impressions repeat them.
    assert sqlite3.connect(store.path).execute("SELECT count(*) FROM queries").fetchone()[0] == 2


def test_an_impression_sent_twice_is_kept_once(tmp_path):
    store = open_store(str(tmp_path / "events.sqlite3"))
    store.write([Received(shown(("a", 1)), 1)])
    store.write([Received(shown(("b", 1)), 2)])
    assert [event.results[0].id for event, _ in store.impressions()] == ["a"]


def test_retention_deletes_the_old_events_and_the_queries_only_they_used(tmp_path):
    store = open_store(str(tmp_path / "events.sqlite3"))
    old = shown(("a", 1))
    new = Impression(
        type="impression",
        impression_id="00000000000000b2",
        session_id=SESSION,
        query="new words",
        ranker="BM25",
        results=[Shown(id="b", position=1)],
    )
    hit = Click(type="click", impression_id="00000000000000a1", session_id=SESSION, id="a", position=1)
    store.write([Received(old, 100), Received(hit, 150), Received(new, 300)])
    assert store.delete_before(200) == 2
    assert [event for event, _ in store.impressions()] == [new] and list(store.clicks()) == []
    assert sqlite3.connect(store.path).execute("SELECT text FROM queries").fetchall() == [("new words",)]
    store.write([Received(old, 400)])  # the deleted query text is stored again
    assert {event.query for event, _ in store.impressions()} == {"bone loss", "new words"}


def test_a_store_that_cannot_be_created_says_so_and_how_to_fix_it(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(EventStoreError, match="cannot open the event store .* ESRR_EVENTS=false"):
        open_store(str(tmp_path / "a-file" / "events.sqlite3"))


def test_a_locked_store_fails_the_write_within_its_busy_timeout(tmp_path):
    store = open_store(str(tmp_path / "events.sqlite3"), busy_timeout_s=0.05)
    locker = sqlite3.connect(store.path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    with pytest.raises(EventStoreError, match="cannot write 1 events .* locked"):
        store.write([Received(shown(("a", 1)), 1)])
    locker.execute("ROLLBACK")
    store.write([Received(shown(("a", 1)), 1)])  # and works again once the lock is gone
    assert store.counts()["impressions"] == 1


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("events.db", "events.db"),
        ("/srv/e.db", "/srv/e.db"),
        ("sqlite:///rel/e.db", "rel/e.db"),
        ("sqlite:////abs/e.db", "/abs/e.db"),
    ],
)
def test_a_path_or_sqlite_url_names_the_file(url, path):
    assert str(sqlite_path(url)) == path


@pytest.mark.parametrize(
    ("url", "said"),
    [("sqlite://host/e.db", "no SQLite URL"), ("mysql://u@h/db", "mysql:// is not one this version opens")],
)
def test_other_urls_are_refused_by_name(url, said):
    with pytest.raises(EventStoreError, match=said):
        sqlite_path(url)


def test_the_settings_refuse_a_store_this_gateway_cannot_open():
    import importlib.util

    from pydantic import ValidationError

    from es_rerank.learning.settings import EventSettings

    with pytest.raises(ValidationError, match="is not one this version opens"):
        EventSettings(events_url="mysql://u@h/db")
    if importlib.util.find_spec("psycopg") is None:
        with pytest.raises(ValidationError, match=r"psycopg is not installed: pip install 'es-rerank\[postgres\]'"):
            EventSettings(events_url="postgresql://u@h/db")
    else:
        assert EventSettings(events_url="postgresql://u@h/db").events_store_url == "postgresql://u@h/db"
