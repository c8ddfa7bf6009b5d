"""Where events are kept: an SQLite file in WAL mode (the default, under ``ESRR_HOME``).

Compact on purpose (1 M events within 200 MB, ``benchmarks/events_store.py``): an
impression's id is its integer primary key; query texts, ranker/arm names and document
ids are stored once each and referred to by number (the documents table is bounded by the
corpus, and kept by retention: an id says nothing of who searched); a page of results is
its first position and its documents' numbers packed as 32-bit integers. No index but the keys: retention deletes by a scan of the time column, which
runs once an hour at most. One writer thread per gateway process writes (``recorder``);
WAL lets several processes write one file, each waiting up to ``busy_timeout_s``.
"""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path
from typing import Iterator, Protocol, Sequence
from urllib.parse import urlsplit

from es_rerank.learning.events import Click, Impression, Received, Shown, impression_id_of, impression_key, \
    positions_are_a_run

SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS documents (id INTEGER PRIMARY KEY, doc TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS impressions (
    id INTEGER PRIMARY KEY,          -- the impression id's 64 bits
    at INTEGER NOT NULL,             -- ms since the Unix epoch, set by the server
    session TEXT NOT NULL,
    query INTEGER NOT NULL REFERENCES queries(id),
    ranker INTEGER NOT NULL REFERENCES names(id),
    arm INTEGER REFERENCES names(id),
    first_position INTEGER NOT NULL,
    docs BLOB NOT NULL,              -- the shown documents' numbers (documents.id), int32 little-endian, in order
    positions TEXT                   -- JSON list of their positions, only when they are not a run from first_position
);
CREATE TABLE IF NOT EXISTS clicks (
    at INTEGER NOT NULL,
    session TEXT NOT NULL,
    impression INTEGER NOT NULL,     -- an impressions.id, which may have been dropped or not arrived yet
    doc INTEGER NOT NULL REFERENCES documents(id),
    position INTEGER NOT NULL
);
"""


class EventStoreError(RuntimeError):
    """The event store cannot be opened or written; the message names the file and the fix."""


class EventStore(Protocol):
    """Somewhere events are appended in batches and old ones deleted."""

    def write(self, batch: Sequence[Received]) -> None:
        """Append ``batch`` in one transaction (an impression id seen before is kept as it was)."""

    def _forget_numbers(self) -> None:
        """Drop the cached numbers: those handed out in a rolled-back transaction are gone."""
        self._queries.clear()
        self._names.clear()
        self._documents.clear()

    def delete_before(self, at_ms: int) -> int:
        """Delete the events received before ``at_ms``; how many were deleted."""

    def close(self) -> None:
        """Release the connection."""


def sqlite_path(url: str) -> Path:
    """The file an ``ESRR_EVENTS_URL`` names: a plain path, or ``sqlite:///relative`` / ``sqlite:////absolute``."""
    if url.startswith("sqlite:"):
        parts = urlsplit(url)
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise EventStoreError(f"{url!r} is no SQLite URL; write sqlite:///relative/events.sqlite3 or "
                                  "sqlite:////absolute/events.sqlite3, or a plain path")
        return Path(parts.path[1:])
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise EventStoreError(f"the event store {scheme}:// is not supported by this version: give a path or a "
                              "sqlite:/// URL (PostgreSQL for several gateways is planned, docs/learning.md)")
    return Path(url)


class SqliteEventStore:
    """Events in one SQLite file in WAL mode; the connection belongs to the thread that opened the store."""

    def __init__(self, path: Path, busy_timeout_s: float = 1.0) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: a power cut may lose the last batches, never the file
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as error:
            raise EventStoreError(f"cannot open the event store {path}: {error}; make its folder writable, point "
                                  "ESRR_EVENTS_URL elsewhere, or turn logging off with ESRR_EVENTS=false") from None
        self._queries: dict[str, int] = {}
        self._names: dict[str, int] = {}
        self._documents: dict[str, int] = {}

    def write(self, batch: Sequence[Received]) -> None:
        """Append ``batch`` in one transaction."""
        impressions, clicks = [], []
        try:
            with self._transaction():
                for received in batch:
                    event = received.event
                    if isinstance(event, Impression):
                        impressions.append(self._impression_row(event, received.at_ms))
                    else:
                        clicks.append((received.at_ms, event.session_id, impression_key(event.impression_id),
                                       self._number("documents", "doc", event.id, self._documents),
                                       event.position))
                self._db.executemany("INSERT OR IGNORE INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                     impressions)
                self._db.executemany("INSERT INTO clicks VALUES (?, ?, ?, ?, ?)", clicks)
        except sqlite3.Error as error:
            self._forget_numbers()
            raise EventStoreError(f"cannot write {len(batch)} events to {self.path}: {error}") from None

    def _impression_row(self, event: Impression, at_ms: int) -> tuple:
        results = event.results
        first = results[0].position if results else 1
        positions = None if positions_are_a_run(results) else json.dumps([shown.position for shown in results])
        return (impression_key(event.impression_id), at_ms, event.session_id, self._number("queries", "text",
                event.query, self._queries), self._number("names", "name", event.ranker, self._names),
                None if event.arm is None else self._number("names", "name", event.arm, self._names), first,
                _packed([self._number("documents", "doc", shown.id, self._documents) for shown in results]), positions)

    def _number(self, table: str, column: str, value: str, known: dict[str, int]) -> int:
        """The row number of ``value`` in ``table``, added when new; cached, as texts repeat."""
        number = known.get(value)
        if number is None:
            row = self._db.execute(f"SELECT id FROM {table} WHERE {column} = ?", (value,)).fetchone()
            number = row[0] if row else self._db.execute(f"INSERT INTO {table} ({column}) VALUES (?)",
                                                         (value,)).lastrowid
            if len(known) > 100_000:  # a bound on the cache, not on the table
                known.clear()
            known[value] = number
        return number

    def _forget_numbers(self) -> None:
        """Drop the cached numbers: those handed out in a rolled-back transaction are gone."""
        self._queries.clear()
        self._names.clear()
        self._documents.clear()

    def delete_before(self, at_ms: int) -> int:
        """Delete events received before ``at_ms``, then the query texts no impression refers to any more."""
        try:
            with self._transaction():
                deleted = self._db.execute("DELETE FROM impressions WHERE at < ?", (at_ms,)).rowcount
                deleted += self._db.execute("DELETE FROM clicks WHERE at < ?", (at_ms,)).rowcount
                if deleted:
                    self._db.execute("DELETE FROM queries WHERE id NOT IN (SELECT query FROM impressions)")
                    self._queries.clear()
            return deleted
        except sqlite3.Error as error:
            raise EventStoreError(f"cannot delete old events from {self.path}: {error}") from None

    def _transaction(self) -> "_Transaction":
        return _Transaction(self._db)

    def impressions(self) -> Iterator[tuple[Impression, int]]:
        """Every stored impression and the time it was received (ms), oldest first."""
        rows = self._db.execute(
            "SELECT i.id, i.at, i.session, q.text, r.name, a.name, i.first_position, i.docs, i.positions "
            "FROM impressions i JOIN queries q ON q.id = i.query JOIN names r ON r.id = i.ranker "
            "LEFT JOIN names a ON a.id = i.arm ORDER BY i.at")
        documents = dict(self._db.execute("SELECT id, doc FROM documents").fetchall())
        for key, at, session, query, ranker, arm, first, docs, positions in rows:
            ids = [documents[number] for number in _unpacked(docs)]
            places = json.loads(positions) if positions else range(first, first + len(ids))
            yield Impression(type="impression", impression_id=impression_id_of(key), session_id=session, query=query,
                             ranker=ranker, arm=arm,
                             results=[Shown(id=doc, position=place) for doc, place in zip(ids, places)]), at

    def clicks(self) -> Iterator[tuple[Click, int]]:
        """Every stored click and the time it was received (ms), oldest first."""
        for at, session, key, doc, position in self._db.execute(
                "SELECT c.at, c.session, c.impression, d.doc, c.position FROM clicks c "
                "JOIN documents d ON d.id = c.doc ORDER BY c.at"):
            yield Click(type="click", impression_id=impression_id_of(key), session_id=session, id=doc,
                        position=position), at

    def counts(self) -> dict[str, int]:
        """How many impressions and clicks are stored."""
        return {table: self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("impressions", "clicks")}

    def close(self) -> None:
        """Close the connection (the WAL is folded into the file when it is the last one)."""
        self._db.close()


def _packed(numbers: list[int]) -> bytes:
    """Row numbers as int32 little-endian bytes."""
    return struct.pack(f"<{len(numbers)}i", *numbers)


def _unpacked(data: bytes) -> tuple[int, ...]:
    """The row numbers ``_packed`` wrote."""
    return struct.unpack(f"<{len(data) // 4}i", data)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on an error (the connection is in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type | None, *_: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


def open_store(url: str, busy_timeout_s: float = 1.0) -> SqliteEventStore:
    """The event store ``url`` names (a path or a sqlite:/// URL); ``EventStoreError`` when it cannot be opened."""
    return SqliteEventStore(sqlite_path(url), busy_timeout_s)
