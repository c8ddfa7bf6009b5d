"""The event store's tables and rows, shared by the SQLite store (``store``) and the PostgreSQL one
(``store_postgres``): an impression's id is its integer key; query texts, ranker/arm names and document ids are
numbered once each; a page of results is its first position and its documents' numbers packed as int32."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from es_rerank.learning.events import (
    Click,
    Impression,
    Received,
    Shown,
    impression_id_of,
    impression_key,
    positions_are_a_run,
)


class EventStoreError(RuntimeError):
    """The event store cannot be opened or written; the message names the file and the fix."""


class EventStore(Protocol):
    """Somewhere events are appended in batches and old ones deleted."""

    def write(self, batch: Sequence[Received]) -> None:
        """Append ``batch`` in one transaction (an impression id seen before is kept as it was)."""

    def delete_before(self, at_ms: int) -> int:
        """Delete the events received before ``at_ms``; how many were deleted."""

    def close(self) -> None:
        """Release the connection."""


class TableStore:
    """The tables and their rows, shared by the SQLite and the PostgreSQL stores; a subclass connects, opens its
    transactions and hands out new row numbers in its own SQL (``?`` placeholders here)."""

    IGNORED_IMPRESSION = "INSERT OR IGNORE INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    where = "the event store"
    errors: tuple[type[Exception], ...] = ()

    def __init__(self, db: Any) -> None:
        self._db = db
        self._queries: dict[str, int] = {}
        self._names: dict[str, int] = {}
        self._documents: dict[str, int] = {}

    def _sql(self, text: str) -> str:
        return text

    def _run(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        return self._db.execute(self._sql(sql), parameters)

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _insert_number(self, table: str, column: str, value: str) -> int:
        """Add ``value`` to ``table``; its row number."""
        raise NotImplementedError

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
                        clicks.append(
                            (
                                received.at_ms,
                                event.session_id,
                                impression_key(event.impression_id),
                                self._number("documents", "doc", event.id, self._documents),
                                event.position,
                            )
                        )
                cursor = self._db.cursor()
                if impressions:
                    cursor.executemany(self._sql(self.IGNORED_IMPRESSION), impressions)
                if clicks:
                    cursor.executemany(self._sql("INSERT INTO clicks VALUES (?, ?, ?, ?, ?)"), clicks)
        except self.errors as error:
            self._forget_numbers()
            raise EventStoreError(f"cannot write {len(batch)} events to {self.where}: {error}") from None

    def _impression_row(self, event: Impression, at_ms: int) -> tuple:
        results = event.results
        first = results[0].position if results else 1
        positions = None if positions_are_a_run(results) else json.dumps([shown.position for shown in results])
        return (
            impression_key(event.impression_id),
            at_ms,
            event.session_id,
            self._number("queries", "text", event.query, self._queries),
            self._number("names", "name", event.ranker, self._names),
            None if event.arm is None else self._number("names", "name", event.arm, self._names),
            first,
            _packed([self._number("documents", "doc", shown.id, self._documents) for shown in results]),
            positions,
            packed_teams(results),
        )

    def _number(self, table: str, column: str, value: str, known: dict[str, int]) -> int:
        """The row number of ``value`` in ``table``, added when new; cached, as texts repeat."""
        number = known.get(value)
        if number is None:
            row = self._run(f"SELECT id FROM {table} WHERE {column} = ?", (value,)).fetchone()
            number = row[0] if row else self._insert_number(table, column, value)
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
                deleted = self._run("DELETE FROM impressions WHERE at < ?", (at_ms,)).rowcount
                deleted += self._run("DELETE FROM clicks WHERE at < ?", (at_ms,)).rowcount
                if deleted:
                    self._run("DELETE FROM queries WHERE id NOT IN (SELECT query FROM impressions)")
                    self._queries.clear()
            return deleted
        except self.errors as error:
            raise EventStoreError(f"cannot delete old events from {self.where}: {error}") from None

    def impressions(self) -> Iterator[tuple[Impression, int]]:
        """Every stored impression and the time it was received (ms), oldest first."""
        documents = dict(self._run("SELECT id, doc FROM documents").fetchall())
        rows = self._run(
            "SELECT i.id, i.at, i.session, q.text, r.name, a.name, i.first_position, i.docs, i.positions, i.teams "
            "FROM impressions i JOIN queries q ON q.id = i.query JOIN names r ON r.id = i.ranker "
            "LEFT JOIN names a ON a.id = i.arm ORDER BY i.at"
        ).fetchall()
        for key, at, session, query, ranker, arm, first, docs, positions, teams in rows:
            ids = [documents[number] for number in _unpacked(bytes(docs))]
            places = json.loads(positions) if positions else range(first, first + len(ids))
            yield (
                Impression(
                    type="impression",
                    impression_id=impression_id_of(key),
                    session_id=session,
                    query=query,
                    ranker=ranker,
                    arm=arm,
                    results=[
                        Shown(id=doc, position=place, team=team)
                        for doc, place, team in zip(ids, places, unpacked_teams(teams, len(ids)))
                    ],
                ),
                at,
            )

    def clicks(self) -> Iterator[tuple[Click, int]]:
        """Every stored click and the time it was received (ms), oldest first."""
        for at, session, key, doc, position in self._run(
            "SELECT c.at, c.session, c.impression, d.doc, c.position FROM clicks c "
            "JOIN documents d ON d.id = c.doc ORDER BY c.at"
        ).fetchall():
            yield (
                Click(type="click", impression_id=impression_id_of(key), session_id=session, id=doc, position=position),
                at,
            )

    def learning_rows(self) -> StoredRows:
        """The stored impressions and clicks as row numbers, unvalidated and unjoined: what ``esrr learn`` reads
        (some 10x faster than ``impressions()`` and ``clicks()``, which rebuild each event)."""
        try:
            return StoredRows(
                queries=dict(self._run("SELECT id, text FROM queries").fetchall()),
                documents=dict(self._run("SELECT id, doc FROM documents").fetchall()),
                impressions=self._run(
                    "SELECT id, session, query, first_position, docs, positions FROM impressions"
                ).fetchall(),
                clicks=self._run("SELECT impression, doc FROM clicks").fetchall(),
            )
        except self.errors as error:
            raise EventStoreError(f"cannot read the events in {self.where}: {error}") from None

    def counts(self) -> dict[str, int]:
        """How many impressions and clicks are stored."""
        return {table: self._run(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("impressions", "clicks")}

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


@dataclass(frozen=True)
class StoredRows:
    """The rows of the event tables as stored: numbers for texts, a page's documents packed as int32."""

    queries: dict[int, str]
    documents: dict[int, str]
    impressions: list[
        tuple[int, str, int, int, bytes, str | None]
    ]  # id, session, query, first position, docs, positions
    clicks: list[tuple[int, int]]  # impression id, document number


def _packed(numbers: list[int]) -> bytes:
    """Row numbers as int32 little-endian bytes."""
    return struct.pack(f"<{len(numbers)}i", *numbers)


def _unpacked(data: bytes) -> tuple[int, ...]:
    """The row numbers ``_packed`` wrote."""
    return struct.unpack(f"<{len(data) // 4}i", data)


_TEAM_LETTERS: dict[Literal["served", "candidate"] | None, str] = {"served": "s", "candidate": "c", None: "-"}
_LETTER_TEAMS = {letter: team for team, letter in _TEAM_LETTERS.items()}


def packed_teams(results: Sequence[Shown]) -> str | None:
    """The results' teams as one letter each (``s``, ``c``, ``-`` for none); None when no result has a team."""
    if all(shown.team is None for shown in results):
        return None
    return "".join(_TEAM_LETTERS[shown.team] for shown in results)


def unpacked_teams(letters: str | None, count: int) -> list[Literal["served", "candidate"] | None]:
    """The ``count`` teams ``packed_teams`` wrote (all None for NULL)."""
    return [None] * count if letters is None else [_LETTER_TEAMS.get(letter) for letter in letters]
