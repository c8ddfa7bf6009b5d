"""The options every Query DSL clause reader checks the same way, and the bound on clauses per request (pure)."""

from __future__ import annotations

import math
import re
from typing import Any

from es_rerank.backends.query_tree import MAX_CLAUSES, MAX_DEPTH, ON_ELASTICSEARCH, UnsupportedQuery, shortened


class ClauseBudget:
    """Counts clauses read, refusing more than ``MAX_CLAUSES``."""

    def __init__(self) -> None:
        self.clauses = 0

    def spend(self, depth: int) -> None:
        """Count one clause read at ``depth``: ``UnsupportedQuery`` past ``MAX_CLAUSES`` or ``MAX_DEPTH``."""
        self.clauses += 1
        if self.clauses > MAX_CLAUSES:
            raise UnsupportedQuery(
                f"the query has more than {MAX_CLAUSES} clauses; this gateway reads at most "
                f"{MAX_CLAUSES} per request: split it"
            )
        if depth > MAX_DEPTH:
            raise UnsupportedQuery(f"the query nests more than {MAX_DEPTH} levels deep; flatten it")


def one_clause(query: Any, where: str) -> tuple[str, Any]:
    """The one (kind, clause) pair of a query object."""
    if not isinstance(query, dict) or len(query) != 1:
        raise UnsupportedQuery(
            f'[{where}] must be an object with one query clause, e.g. {{"match": {{"text": "green tea"}}}}'
        )
    return next(iter(query.items()))


def allowed(kind: str, clause: dict, keys: tuple[str, ...]) -> None:
    """Refuse an option of ``clause`` that is not among ``keys``, naming those read."""
    unknown = next((key for key in clause if key not in keys), None)
    if unknown is not None:
        raise UnsupportedQuery(
            f"[{kind}] option [{shortened(unknown)}] is not served by the embedded backend "
            f"(it reads {', '.join(keys)}); it is {ON_ELASTICSEARCH}"
        )


def boost_of(kind: str, clause: dict) -> float:
    """The clause's ``boost`` (1 by default), a finite number of at least 0."""
    boost = clause.get("boost", 1.0)
    if isinstance(boost, bool) or not isinstance(boost, (int, float)) or not math.isfinite(boost) or boost < 0:
        raise UnsupportedQuery(f"[{kind}] boost must be a number of at least 0, got {shortened(boost)}")
    return float(boost)


def minimum_should_match(kind: str, value: Any, optional: int, default: int) -> int:
    """Elasticsearch's ``minimum_should_match`` of ``optional`` clauses: 3, -2, "75%", "-25%" (combinations
    such as "3<90%" are not read)."""
    if value is None:
        return default
    text = str(value).strip() if not isinstance(value, bool) else ""
    found = re.fullmatch(r"(-?)([0-9]{1,6})(%?)", text)
    if found is None:
        raise UnsupportedQuery(
            f"[{kind}] minimum_should_match {shortened(value)} is not served by the embedded "
            'backend, which reads a whole number or a percentage (3, -1, "75%", "-25%"); '
            f"other forms are {ON_ELASTICSEARCH}"
        )
    negative, number, percent = found.group(1) == "-", int(found.group(2)), bool(found.group(3))
    count = math.floor(optional * number / 100) if percent else number  # Elasticsearch rounds down
    required = optional - count if negative else count
    return max(0, min(optional, required))


def one_field(kind: str, clause: dict) -> tuple[str, Any]:
    """The one (field, value) pair of a field-level clause."""
    if len(clause) != 1:
        raise UnsupportedQuery(f"[{kind}] takes one field, got {len(clause)}")
    return next(iter(clause.items()))


def search_text(kind: str, value: Any) -> str:
    """The search text of a clause, which must be a string."""
    if not isinstance(value, str):
        raise UnsupportedQuery(f"[{kind}] needs the search text as a string, got {shortened(value)}")
    return value


def slop_of(kind: str, value: Any) -> int:
    """A phrase's ``slop``: a whole number from 0 to 100."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise UnsupportedQuery(f"[{kind}] slop must be a whole number from 0 to 100, got {shortened(value)}")
    return value
