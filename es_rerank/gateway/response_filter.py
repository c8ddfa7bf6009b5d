"""Elasticsearch's ``filter_path`` URL parameter: which parts of a JSON answer are kept (pure).

Elasticsearch's semantics (its "Response filtering" common option): a comma-separated
list of dotted paths, each segment a field name in which ``*`` matches any characters
(``hits.hits._sou*``); a ``**`` segment matches any number of levels
(``aggregations.**.key``); arrays are passed through, a path applying to each of their
items; a path starting with ``-`` excludes what it matches. Exclusions apply first, then
the inclusions keep what they match, and the objects and arrays left holding nothing
that was included are dropped (``hits.hits._id`` on a search with no hits answers
``{}``). Error answers are never filtered, as in Elasticsearch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from es_rerank.gateway.errors import BadSearchRequest, excerpt

MAX_PATHS = 64  # a filter_path lists a few fields; this many keeps its cost per value small
_ANY_DEPTH = "**"


@dataclass(frozen=True)
class FilterPath:
    """A parsed ``filter_path``: the paths kept and the paths excluded, each a tuple of segments."""

    includes: tuple[tuple[str, ...], ...]
    excludes: tuple[tuple[str, ...], ...]


def read_filter_path(value: str) -> FilterPath:
    """``filter_path``'s value as paths to keep and to exclude; a 400 when it lists none or too many."""
    paths = [path.strip() for path in value.split(",") if path.strip()]
    if not paths:
        raise BadSearchRequest(
            "[filter_path] names no field; send dotted paths such as filter_path=hits.hits._id,hits.total"
        )
    if len(paths) > MAX_PATHS:
        raise BadSearchRequest(
            f"[filter_path] lists {len(paths)} paths, over the {MAX_PATHS} the gateway reads; "
            "use * and ** wildcards to name many fields with one path"
        )
    includes: list[tuple[str, ...]] = []
    excludes: list[tuple[str, ...]] = []
    for path in paths:
        wanted = excludes if path.startswith("-") else includes
        segments = tuple(path.lstrip("-").split("."))
        if not all(segments):
            raise BadSearchRequest(
                f"[filter_path] path {excerpt(path)} has an empty segment; write dotted field "
                "names such as hits.hits._id"
            )
        wanted.append(segments)
    return FilterPath(tuple(includes), tuple(excludes))


def filtered(value: Any, spec: FilterPath) -> Any:
    """``value`` (a decoded JSON answer) with ``spec``'s exclusions removed, then only its inclusions kept."""
    if spec.excludes:
        value = _excluded(value, [(path, 0) for path in spec.excludes])
    if spec.includes:
        kept = _included(value, [(path, 0) for path in spec.includes])
        value = kept if kept is not _NOTHING else {}
    return value


_NOTHING = object()  # what an inclusion keeps of a value that holds nothing it names


def _advance(states: list[tuple[tuple[str, ...], int]], key: str) -> tuple[list, bool]:
    """The path positions reached by stepping into field ``key``, and whether a path ends there (matched whole)."""
    reached: list[tuple[tuple[str, ...], int]] = []
    done = False
    pending = list(states)
    while pending:
        path, at = pending.pop()
        if at == len(path):
            continue
        segment = path[at]
        if segment == _ANY_DEPTH:
            if at + 1 == len(path):  # a trailing ** names everything below
                done = True
                continue
            pending.append((path, at + 1))  # ** may match no level at all
            reached.append((path, at))  # ... or this one, and stay to match deeper ones
            continue
        if _segment(segment).fullmatch(key):
            if at + 1 == len(path):
                done = True
            else:
                reached.append((path, at + 1))
    return reached, done


def _included(value: Any, states: list) -> Any:
    if isinstance(value, list):
        items = [kept for kept in (_included(item, states) for item in value) if kept is not _NOTHING]
        return items if items else _NOTHING
    if not isinstance(value, dict):
        return _NOTHING  # a scalar whose field was not named whole
    kept: dict[str, Any] = {}
    for key, item in value.items():
        reached, done = _advance(states, key)
        if done:
            kept[key] = item
        elif reached:
            inner = _included(item, reached)
            if inner is not _NOTHING:
                kept[key] = inner
    return kept if kept else _NOTHING


def _excluded(value: Any, states: list) -> Any:
    if isinstance(value, list):
        return [_excluded(item, states) for item in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, item in value.items():
        reached, done = _advance(states, key)
        if done:
            continue
        kept[key] = _excluded(item, reached) if reached else item
    return kept


@lru_cache(maxsize=256)
def _segment(segment: str) -> re.Pattern[str]:
    """A field-name segment as a pattern: ``*`` any characters, the rest literal."""
    return re.compile(".*".join(re.escape(part) for part in segment.split("*")), re.DOTALL)
