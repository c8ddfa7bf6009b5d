"""Where events are kept: an SQLite file in WAL mode (the default, under ``ESRR_HOME``), or PostgreSQL
(``store_postgres``) for gateways on several machines.

Compact on purpose (1 M events within 200 MB, ``benchmarks/events_store.py``; the rows are
``tables.TableStore``'s): the documents table is bounded by the corpus and kept by
retention (an id says nothing of who searched). No index but the keys: retention deletes
by a scan of the time column, which runs once an hour at most. One writer thread per gateway process writes
(``recorder``); WAL lets several processes write one file, each waiting up to ``busy_timeout_s``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from es_rerank.learning.tables import EventStore, EventStoreError, TableStore

__all__ = [
    "EventStore",
    "EventStoreError",
    "SqliteEventStore",
    "TableStore",
    "is_postgres",
    "open_store",
    "sqlite_path",
]

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
    positions TEXT,                  -- JSON list of their positions, only when they are not a run from first_position
    teams TEXT                       -- interleaved: each result's team, s(erved) c(andidate) or -, in order
);
CREATE TABLE IF NOT EXISTS clicks (
    at INTEGER NOT NULL,
    session TEXT NOT NULL,
    impression INTEGER NOT NULL,     -- an impressions.id, which may have been dropped or not arrived yet
    doc INTEGER NOT NULL REFERENCES documents(id),
    position INTEGER NOT NULL
);
"""


def sqlite_path(url: str) -> Path:
    """The file an ``ESRR_EVENTS_URL`` names: a plain path, or ``sqlite:///relative`` / ``sqlite:////absolute``."""
    if url.startswith("sqlite:"):
        parts = urlsplit(url)
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise EventStoreError(
                f"{url!r} is no SQLite URL; write sqlite:///relative/events.sqlite3 or "
                "sqlite:////absolute/events.sqlite3, or a plain path"
            )
        return Path(parts.path[1:])
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise EventStoreError(
            f"the event store {scheme}:// is not one this version opens: give a path, a "
            "sqlite:/// URL or a postgresql:// URL (docs/learning.md)"
        )
    return Path(url)


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server (``postgresql://`` or ``postgres://``)."""
    return "://" in url and url.split("://", 1)[0].lower() in ("postgresql", "postgres")


class SqliteEventStore(TableStore):
    """Events in one SQLite file in WAL mode; the connection belongs to the thread that opened the store."""

    errors = (sqlite3.Error,)

    def __init__(self, path: Path, busy_timeout_s: float = 1.0) -> None:
        self.path = path
        self.where = str(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: a power cut may lose the last batches, never the file
            db.executescript(SCHEMA)
            if "teams" not in {row[1] for row in db.execute("PRAGMA table_info(impressions)")}:  # a store of before
                db.execute("ALTER TABLE impressions ADD COLUMN teams TEXT")
        except (OSError, sqlite3.Error) as error:
            raise EventStoreError(
                f"cannot open the event store {path}: {error}; make its folder writable, point "
                "ESRR_EVENTS_URL elsewhere, or turn logging off with ESRR_EVENTS=false"
            ) from None
        super().__init__(db)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _insert_number(self, table: str, column: str, value: str) -> int:
        return self._run(f"INSERT INTO {table} ({column}) VALUES (?)", (value,)).lastrowid


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on an error (the connection is in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type | None, *_: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


def open_store(url: str, busy_timeout_s: float = 1.0) -> TableStore:
    """The event store ``url`` names (a path, a sqlite:/// URL or a postgresql:// URL); ``EventStoreError`` when it
    cannot be opened."""
    if is_postgres(url):
        from es_rerank.learning.store_postgres import PostgresEventStore  # psycopg only where it is used

        return PostgresEventStore(url, connect_timeout_s=max(busy_timeout_s, 5.0))
    return SqliteEventStore(sqlite_path(url), busy_timeout_s)
