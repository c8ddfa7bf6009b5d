"""The stored events as a click log: one row per shown result, with whether it was clicked, as numpy arrays.

A click is joined to the result of its impression that shows the clicked document (the
impression's position counts, not the click's own report of it); a click whose impression
is not stored (deleted by retention, dropped when the queue was full, or not yet arrived)
is counted and left out, and clicking one result twice counts once. Results below
``max_position`` (the page of ten the site shows, by default) are left out: they are
rarely seen, and a click model needs each position it fits to be shown often.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from es_rerank.learning.tables import StoredRows

PAGE = 10


@dataclass(frozen=True)
class ClickLog:
    """Shown results (``rank``, ``clicked``, ``pair``, ``session``, ``impression``; one entry each) and the
    (query, document) pairs they show (``pair_query``, ``pair_doc``, numbers into ``queries`` and ``documents``)."""

    queries: list[str]
    documents: list[str]
    pair_query: np.ndarray  # int64 [pairs]
    pair_doc: np.ndarray  # int64 [pairs]
    pair: np.ndarray  # int64 [shown]
    rank: np.ndarray  # int64 [shown], 0 = first position
    clicked: np.ndarray  # bool [shown]
    impression: np.ndarray  # int64 [shown]: which impression showed it
    session: np.ndarray  # int64 [shown]: the session of that impression
    impressions: int
    sessions: int
    orphan_clicks: int  # clicks on no kept result: their impression is not stored, or the result is below max_position

    @property
    def clicks(self) -> int:
        """Clicked results (a result clicked twice counts once)."""
        return int(self.clicked.sum())


def click_log(rows: StoredRows, max_position: int = PAGE) -> ClickLog:
    """The click log of the stored ``rows``: results at positions 1 to ``max_position``, and their clicks."""
    sessions: dict[str, int] = {}
    impression_keys: list[int] = []
    query_numbers: list[np.ndarray] = []
    doc_numbers: list[np.ndarray] = []
    ranks: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    session_of: list[int] = []
    for index, (key, session_id, query, first, docs, positions) in enumerate(rows.impressions):
        numbers = np.frombuffer(bytes(docs), dtype="<i4")
        places = (
            np.asarray(json.loads(positions), dtype=np.int64)
            if positions
            else np.arange(first, first + len(numbers), dtype=np.int64)
        )
        keep = places <= max_position
        impression_keys.append(key)
        session_of.append(sessions.setdefault(session_id, len(sessions)))
        query_numbers.append(np.full(int(keep.sum()), query, dtype=np.int64))
        doc_numbers.append(numbers[keep].astype(np.int64))
        ranks.append(places[keep] - 1)
        owners.append(np.full(int(keep.sum()), index, dtype=np.int64))
    empty = np.zeros(0, dtype=np.int64)
    query_of = np.concatenate(query_numbers) if query_numbers else empty
    doc_of = np.concatenate(doc_numbers) if doc_numbers else empty
    rank = np.concatenate(ranks) if ranks else empty
    impression = np.concatenate(owners) if owners else empty
    session = np.asarray(session_of, dtype=np.int64)[impression] if len(impression) else empty

    clicked, orphans = _clicked(rows, np.asarray(impression_keys, dtype=np.int64), impression, doc_of)
    # Query texts and documents renumbered densely, in the store's order (a retention may leave gaps).
    query_ids, query_index = np.unique(query_of, return_inverse=True)
    doc_ids, doc_index = np.unique(doc_of, return_inverse=True)
    pairs, pair = np.unique(query_index * max(len(doc_ids), 1) + doc_index, return_inverse=True)
    width = max(len(doc_ids), 1)
    return ClickLog(
        queries=[rows.queries[int(number)] for number in query_ids],
        documents=[rows.documents[int(number)] for number in doc_ids],
        pair_query=pairs // width,
        pair_doc=pairs % width,
        pair=pair.astype(np.int64),
        rank=rank,
        clicked=clicked,
        impression=impression,
        session=session,
        impressions=len(rows.impressions),
        sessions=len(sessions),
        orphan_clicks=orphans,
    )


def _clicked(
    rows: StoredRows, impression_keys: np.ndarray, impression: np.ndarray, doc_of: np.ndarray
) -> tuple[np.ndarray, int]:
    """Whether each shown result was clicked, and how many clicks match no stored result."""
    clicked = np.zeros(len(doc_of), dtype=bool)
    if not rows.clicks:
        return clicked, 0
    clicks = np.asarray(rows.clicks, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(impression_keys, kind="stable")
    at = np.searchsorted(impression_keys[order], clicks[:, 0])
    at = np.minimum(at, max(len(order) - 1, 0))
    known = (
        (len(order) > 0) & (impression_keys[order][at] == clicks[:, 0])
        if len(order)
        else np.zeros(len(clicks), dtype=bool)
    )
    # One number per (impression, document): the shown results' and the clicks', matched by sorting.
    width = int(max(doc_of.max(initial=0), clicks[:, 1].max(initial=0))) + 1
    shown_keys = impression * width + doc_of
    click_keys = order[at[known]] * width + clicks[known, 1]
    sorted_shown = np.argsort(shown_keys, kind="stable")
    found = np.searchsorted(shown_keys[sorted_shown], click_keys)
    found = np.minimum(found, max(len(sorted_shown) - 1, 0))
    hit = (shown_keys[sorted_shown][found] == click_keys) if len(sorted_shown) else np.zeros(len(click_keys), bool)
    clicked[sorted_shown[found[hit]]] = True
    return clicked, int(len(clicks) - hit.sum())
