"""The event store on PostgreSQL (``ESRR_EVENTS_URL=postgresql://...``), for gateways on several machines.

The same tables and rows as the SQLite store (``tables.TableStore``), in PostgreSQL's
types; each gateway process's writer holds one connection (psycopg 3, installed with
``pip install 'es-rerank[postgres]'``). Query texts, names and document ids are added with
``ON CONFLICT DO NOTHING``, so writers on several machines agree on their numbers; an
impression id sent twice is kept once. Retention deletes by the time column, indexed here
since the tables are shared and large: a BRIN index, a few pages for millions of rows, as
rows arrive in time order (a B-tree took some 30 MB per million). A query text another gateway's retention deleted
while this writer still had its number cached fails one batch (dropped and counted, the
cache cleared), not the next.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import urlsplit

from es_rerank.learning.tables import EventStoreError, TableStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS names (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS documents (id BIGSERIAL PRIMARY KEY, doc TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS impressions (
    id BIGINT PRIMARY KEY, at BIGINT NOT NULL, session TEXT NOT NULL, query BIGINT NOT NULL REFERENCES queries(id),
    ranker BIGINT NOT NULL REFERENCES names(id), arm BIGINT REFERENCES names(id), first_position INTEGER NOT NULL,
    docs BYTEA NOT NULL, positions TEXT, teams TEXT
);
ALTER TABLE impressions ADD COLUMN IF NOT EXISTS teams TEXT;
CREATE TABLE IF NOT EXISTS clicks (
    at BIGINT NOT NULL, session TEXT NOT NULL, impression BIGINT NOT NULL,
    doc BIGINT NOT NULL REFERENCES documents(id), position INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS impressions_at ON impressions USING brin (at);
CREATE INDEX IF NOT EXISTS clicks_at ON clicks USING brin (at);
"""
SCHEMES = ("postgresql", "postgres")
# One writer waits this long for a lock another holds, then drops its batch (the recorder retries later).
LOCK_TIMEOUT_MS = 1000


def public_url(url: str) -> str:
    """``url`` without its user and password: what a log line or an error may show."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class PostgresEventStore(TableStore):
    """Events in a PostgreSQL database; the connection belongs to the thread that opened the store."""

    IGNORED_IMPRESSION = "INSERT INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"

    def __init__(self, url: str, connect_timeout_s: float = 5.0) -> None:
        try:
            import psycopg
        except ImportError:
            raise EventStoreError(
                "ESRR_EVENTS_URL names PostgreSQL, and psycopg is not installed: pip install 'es-rerank[postgres]'"
            ) from None
        self.errors = (psycopg.Error,)
        self.where = public_url(url)
        try:
            db = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=max(1, round(connect_timeout_s)),
                options=f"-c lock_timeout={LOCK_TIMEOUT_MS}",
            )
            with db.transaction():
                db.execute(SCHEMA)
        except psycopg.Error as error:
            raise EventStoreError(
                f"cannot open the event store {self.where}: {' '.join(str(error).split())}; check that the "
                "server runs and the user may create tables there, or turn logging off with "
                "ESRR_EVENTS=false"
            ) from None
        super().__init__(db)

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _transaction(self) -> AbstractContextManager[Any]:
        return self._db.transaction()

    def _insert_number(self, table: str, column: str, value: str) -> int:
        row = self._run(
            f"INSERT INTO {table} ({column}) VALUES (?) ON CONFLICT ({column}) DO NOTHING RETURNING id", (value,)
        ).fetchone()
        if row is None:  # another writer added it meanwhile
            row = self._run(f"SELECT id FROM {table} WHERE {column} = ?", (value,)).fetchone()
        return row[0]

    def size_bytes(self) -> int:
        """The bytes the event tables take on the server, with their indexes and TOAST."""
        tables = ("queries", "names", "documents", "impressions", "clicks")
        return int(
            self._run(
                "SELECT sum(pg_total_relation_size(name::regclass)) FROM unnest(?::text[]) AS name", (list(tables),)
            ).fetchone()[0]
        )
