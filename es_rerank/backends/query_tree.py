"""The tree a search body's query is read into for the embedded backend, and the checks its readers share (pure).

``query_dsl`` reads the Query DSL into it, ``lucene_syntax`` the text of ``query_string``
queries; ``EmbeddedBackend`` translates it to tantivy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

TEXT_FIELDS = ("text", "title", "abstract")  # `text` is title and abstract together
WHOLE_TEXT = ({"text"}, {"title", "abstract"}, {"text", "title", "abstract"}, {"*"}, {"_all"})
KEYWORD_FIELDS = ("doc_id", "journal", "mesh", "publication_types", "doi")
NUMBER_FIELDS = ("year",)
AGGREGATABLE = ("year", "publication_types", "journal")
MAX_CLAUSES = 1024  # Elasticsearch's own limit is 4096 (indices.query.bool.max_clause_count)
MAX_DEPTH = 20
MAX_SHOULD_EXPANSION = 64  # conjunctions tried for a minimum_should_match between 1 and all (see _at_least)
ON_ELASTICSEARCH = "served by the Elasticsearch backend (ESRR_BACKEND=elasticsearch)"


class UnsupportedQuery(ValueError):
    """A query the embedded backend cannot answer as Elasticsearch would; the message says what and who can."""


@dataclass(frozen=True)
class Words:
    """Documents holding at least ``required`` of the distinct ``tokens`` in ``text`` (1: any, all: AND)."""

    tokens: tuple[str, ...]
    required: int
    boost: float = 1.0


@dataclass(frozen=True)
class Phrase:
    """Documents holding ``tokens`` in order in ``text``, at most ``slop`` moves apart."""

    tokens: tuple[str, ...]
    slop: int = 0
    boost: float = 1.0


@dataclass(frozen=True)
class Pattern:
    """Documents holding a ``text`` token that the regular expression ``regex`` matches whole (a wildcard); scored
    1, as Elasticsearch's constant-score rewrite of a wildcard."""

    regex: str


@dataclass(frozen=True)
class Keyword:
    """Documents whose keyword (or year) ``field`` holds one of ``values``; scores nothing."""

    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Range:
    """Documents whose ``field`` (year) lies within the bounds; scores nothing."""

    field: str
    lower: int | None
    upper: int | None  # both inclusive: gt/lt on whole numbers are moved by one


@dataclass(frozen=True)
class Bool:
    """Elasticsearch's bool: ``should`` needs ``required_should`` matches (the rest optional, scored)."""

    must: tuple["Node", ...] = ()
    should: tuple["Node", ...] = ()
    filter: tuple["Node", ...] = ()
    must_not: tuple["Node", ...] = ()
    required_should: int = 0
    boost: float = 1.0


@dataclass(frozen=True)
class MatchAll:
    """Every document (score 1, as Elasticsearch's ``match_all``)."""


@dataclass(frozen=True)
class MatchNone:
    """No document (e.g. a match whose text has no words)."""


Node = Union[Words, Phrase, Pattern, Keyword, Range, Bool, MatchAll, MatchNone]


def shortened(value: Any) -> str:
    """``value`` as at most 40 characters of text, for an error message."""
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:40] + "..."


def phrase_node(tokens: list[str], slop: int, boost: float) -> Node:
    """A phrase of ``tokens``; one token is a word, none matches nothing (as Elasticsearch)."""
    if not tokens:
        return MatchNone()
    if len(tokens) == 1:
        return Words((tokens[0],), 1, boost)
    return Phrase(tuple(tokens), slop, boost)


def keyword_node(kind: str, field: Any, values: list[Any]) -> Node:
    """A filter of ``field`` on ``values``, or ``UnsupportedQuery`` when the field cannot be filtered here."""
    if field in NUMBER_FIELDS:
        numbers = [whole_number(kind, field, value) for value in values]
        return Keyword(field, tuple(numbers))
    if field not in KEYWORD_FIELDS:
        raise UnsupportedQuery(f"[{kind}] on field [{shortened(field)}] is not served by the embedded backend, which "
                               f"filters on {', '.join(KEYWORD_FIELDS + NUMBER_FIELDS)}; a filter on another field "
                               f"is {ON_ELASTICSEARCH}")
    if not all(isinstance(value, (str, int)) and not isinstance(value, bool) for value in values):
        raise UnsupportedQuery(f"[{kind}] on [{field}] takes strings, got {shortened(values)}")
    return Keyword(field, tuple(str(value) for value in values))


def whole_number(kind: str, field: str, value: Any) -> int:
    """``value`` (a number or its digits) as a whole number, or ``UnsupportedQuery``."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,9}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnsupportedQuery(f"[{kind}] on [{field}] takes whole numbers (years), got {shortened(value)}")
    return value
