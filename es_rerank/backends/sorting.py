"""Elasticsearch's ``sort`` and ``search_after`` on the embedded index (pure): which keys, in which order.

Served keys: ``_score`` (descending by default), ``_doc`` (index order: the document's
row), ``_id`` and ``year`` (ascending by default), each as ``"year"``,
``{"year": "desc"}`` or ``{"year": {"order": "desc", "missing": "_first"}}``. As in
Elasticsearch, a document without a year sorts last unless ``missing`` says ``_first``,
and its sort value is the long's extreme that puts it there (``9223372036854775807``
ascending); ties are broken by index order; ``search_after`` takes one value per key, as
returned in each hit's ``sort``, and answers the hits strictly after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from es_rerank.backends.base import QueryRefused

SORTABLE = ("_score", "_doc", "_id", "year")
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)
MAX_KEYS = 4
EXAMPLE = '[{"year": "desc"}, "_score"]'
T = TypeVar("T")


@dataclass(frozen=True)
class SortKey:
    """One key of a sort: the field, its direction, and where a document without a value goes."""

    field: str
    descending: bool
    missing_first: bool = False


BY_SCORE = (SortKey("_score", True),)


def read_sort(sort: Any) -> tuple[SortKey, ...]:
    """A body's ``sort`` (a key, or a list of them) as keys; ``QueryRefused`` naming what is not served."""
    items = sort if isinstance(sort, list) else [sort]
    if not items or len(items) > MAX_KEYS:
        raise QueryRefused(f"[sort] must name 1 to {MAX_KEYS} keys, as in {EXAMPLE}")
    return tuple(_key(item) for item in items)


def by_score_alone(keys: Sequence[SortKey]) -> bool:
    """Whether ``keys`` is the default order, descending ``_score`` alone."""
    return tuple(keys) == BY_SCORE


def read_search_after(values: Any, keys: Sequence[SortKey]) -> tuple[Any, ...]:
    """``search_after`` as one value per sort key (a number, or a string for ``_id``)."""
    if not isinstance(values, list) or len(values) != len(keys):
        count = len(values) if isinstance(values, list) else 0
        raise QueryRefused(
            f"search_after has {count} value(s) but sort has {len(keys)}; send the sort values of the "
            "last hit of the page before, as its [sort] shows them"
        )
    read = []
    for value, key in zip(values, keys):
        if key.field == "_id":
            if not isinstance(value, str):
                raise QueryRefused(f"search_after's value for _id must be a string, got {str(value)[:40]}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise QueryRefused(f"search_after's value for {key.field} must be a number, got {str(value)[:40]}")
        read.append(value)
    return tuple(read)


def sort_values(keys: Sequence[SortKey], score: float, row: int, doc_id: str, year: int | None) -> list[Any]:
    """A hit's ``sort`` values, as Elasticsearch shows them (a missing year as the extreme that places it)."""
    values: list[Any] = []
    for key in keys:
        if key.field == "_score":
            values.append(score)
        elif key.field == "_doc":
            values.append(row)
        elif key.field == "_id":
            values.append(doc_id)
        elif year is not None:
            values.append(year)
        else:
            values.append(LONG_MIN if key.descending != key.missing_first else LONG_MAX)
    return values


def in_order(items: Sequence[tuple[list[Any], int, T]], keys: Sequence[SortKey]) -> list[tuple[list[Any], int, T]]:
    """``(sort values, row, payload)`` items in the keys' order, ties by row (index order)."""
    ordered = sorted(items, key=lambda item: item[1])
    for position in reversed(range(len(keys))):  # stable passes, the last key first
        ordered.sort(key=lambda item: item[0][position], reverse=keys[position].descending)
    return ordered


def after(values: Sequence[Any], cursor: Sequence[Any], keys: Sequence[SortKey]) -> bool:
    """Whether sort ``values`` come strictly after ``cursor`` in the keys' order."""
    for value, mark, key in zip(values, cursor, keys):
        if value != mark:
            return value < mark if key.descending else value > mark
    return False


def _key(item: Any) -> SortKey:
    if isinstance(item, str):
        name, _, order = item.partition(":")
        return _checked(name, {"order": order} if order else {})
    if isinstance(item, dict) and len(item) == 1:
        name, spec = next(iter(item.items()))
        if isinstance(spec, str):
            return _checked(name, {"order": spec})
        if isinstance(spec, dict):
            return _checked(name, spec)
    raise QueryRefused(f"[sort] key {str(item)[:60]} is not a field name or {{field: order}}; send {EXAMPLE}")


def _checked(name: Any, spec: dict[str, Any]) -> SortKey:
    if name not in SORTABLE:
        raise QueryRefused(
            f"[sort] on [{str(name)[:40]}]: the embedded backend sorts by {', '.join(SORTABLE)}; "
            "another field is served by the Elasticsearch backend (ESRR_BACKEND=elasticsearch)"
        )
    unknown = next((option for option in spec if option not in ("order", "missing", "unmapped_type")), None)
    if unknown is not None:
        raise QueryRefused(
            f"[sort] option [{str(unknown)[:40]}] of [{name}] is not served by the embedded backend, "
            "which reads order, missing, unmapped_type"
        )
    order = spec.get("order", "desc" if name == "_score" else "asc")
    if order not in ("asc", "desc"):
        raise QueryRefused(f"[sort] order of [{name}] must be asc or desc, got {str(order)[:40]}")
    missing = spec.get("missing", "_last")
    if missing not in ("_last", "_first"):
        raise QueryRefused(f"[sort] missing of [{name}] must be _last or _first here, got {str(missing)[:40]}")
    return SortKey(name, order == "desc", missing == "_first")
