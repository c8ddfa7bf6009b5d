"""Which index names a request may search: the served index, its alias, all, or a wildcard of them (pure).

Elasticsearch's index expressions take ``*`` as their only wildcard. Matching one is a
prefix, a suffix and the parts between found in order, each with ``str.find``: linear in
the name, where ``fnmatch`` compiled a regular expression per pattern (cached, up to
32,768 of them) that backtracked for seconds on ``a*a*a*...``.
"""

from __future__ import annotations

from collections.abc import Iterable

ANY_INDEX = ("_all", "*")
MAX_NAME_BYTES = 255  # Elasticsearch's limit on an index name


def wildcard_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches ``pattern``, where ``*`` is any run of characters (nothing else is special)."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == name
    first, *middle, last = parts
    if len(first) + len(last) > len(name) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for part in middle:  # leftmost placement of each part leaves the most room for the next
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def unserved_name(named: str, served: Iterable[str]) -> str | None:
    """The first of the comma-separated index ``named`` that is none of ``served`` nor matches one (None: all do)."""
    served = tuple(served)
    for name in named.split(","):
        if name in ANY_INDEX:
            continue
        if (
            not name
            or len(name.encode()) > MAX_NAME_BYTES
            or not any(wildcard_matches(name, index) for index in served)
        ):
            return name
    return None
