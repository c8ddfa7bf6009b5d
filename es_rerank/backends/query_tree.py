"""The tree a search body's query is read into for the embedded backend, and the checks its readers share (pure).

``query_dsl`` reads the Query DSL into it, ``lucene_syntax`` the text of ``query_string``
queries; ``EmbeddedBackend`` translates it to tantivy, once ``check_cost`` has found it
within the ``QueryLimits`` in force: the gateway binds its settings' limits to each
request (``bind_limits``), the defaults hold elsewhere.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Iterator, Union

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
    1, as Elasticsearch's constant-score rewrite of a wildcard. ``wildcard`` is the word as written."""

    regex: str
    wildcard: str = ""

    @property
    def marks(self) -> int:
        """How many ``?`` and ``*`` the wildcard holds (each widens the automaton tantivy compiles)."""
        return len(re.findall(r"(?<!\\)[?*]", self.wildcard))

    @property
    def leading(self) -> bool:
        """Whether the wildcard starts with ``?`` or ``*``: every term of the index is then tried and may match."""
        return self.wildcard[:1] in ("?", "*")


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


@dataclass(frozen=True)
class QueryLimits:
    """What one search may cost, checked on its tree before tantivy runs (``check_cost``); each is the gateway's
    setting ``ESRR_GATEWAY_<NAME>`` (docs/operations.md has the measurements behind the defaults)."""

    max_query_terms: int = 1024  # words and phrase words searched, over the whole query
    max_phrase_cost: int = 400  # each sloppy phrase's words times its slop, summed over the query
    max_wildcard_terms: int = 3  # wildcard words (gree*, tumo?r)
    max_wildcard_marks: int = 8  # `?` and `*` in one wildcard word
    max_leading_wildcards: int = 0  # wildcard words starting with `?` or `*` (each tries every term of the index)


DEFAULT_LIMITS = QueryLimits()
UNLIMITED = QueryLimits(2**62, 2**62, 2**62, 2**62, 2**62)  # for measuring what a search costs without them
_ACTIVE_LIMITS: ContextVar[QueryLimits] = ContextVar("esrr_query_limits", default=DEFAULT_LIMITS)


def bind_limits(limits: QueryLimits) -> Token[QueryLimits]:
    """Check the searches prepared from now on in this context (a request's thread) against ``limits``, until
    ``unbind_limits`` with the token returned."""
    return _ACTIVE_LIMITS.set(limits)


def unbind_limits(token: Token[QueryLimits]) -> None:
    """The limits in force before the ``bind_limits`` that returned ``token``."""
    _ACTIVE_LIMITS.reset(token)


@contextmanager
def using_limits(limits: QueryLimits) -> Iterator[None]:
    """The searches prepared in this block are checked against ``limits``."""
    token = bind_limits(limits)
    try:
        yield
    finally:
        unbind_limits(token)


def active_limits() -> QueryLimits:
    """The limits searches prepared here are checked against (``using_limits``, else the defaults)."""
    return _ACTIVE_LIMITS.get()


@dataclass(frozen=True)
class QueryCost:
    """What a query asks of the index: words looked up, sloppy phrase work (words x slop) and wildcard words."""

    terms: int = 0
    phrase_cost: int = 0
    wildcards: int = 0


def check_cost(node: Node, limits: QueryLimits) -> QueryCost:
    """The cost of the query of ``node``, or ``UnsupportedQuery`` naming the first of ``limits`` that it passes, its
    setting and the query's value; checked before any search, so a refused query costs nothing."""
    terms = phrase_cost = leading = 0
    patterns: list[Pattern] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Words):
            terms += len(item.tokens)
        elif isinstance(item, Phrase):
            terms += len(item.tokens)
            phrase_cost += len(item.tokens) * item.slop
        elif isinstance(item, Pattern):
            patterns.append(item)
            leading += item.leading
        elif isinstance(item, Bool):
            stack.extend((*item.must, *item.should, *item.filter, *item.must_not))
    widest = max(patterns, key=lambda pattern: pattern.marks, default=None)
    _within("words searched", terms, limits.max_query_terms, "MAX_QUERY_TERMS", "search fewer words")
    _within("phrase words times slop (summed over its phrases)", phrase_cost, limits.max_phrase_cost,
            "MAX_PHRASE_COST", "lower the slop (~N) or shorten the phrase")
    _within("wildcard words", len(patterns), limits.max_wildcard_terms, "MAX_WILDCARD_TERMS",
            "search fewer wildcard words, or escape a literal ? or * as \\? or \\*")
    if widest is not None:
        _within(f"'?' and '*' in the wildcard {shortened(widest.wildcard)!r}", widest.marks, limits.max_wildcard_marks,
                "MAX_WILDCARD_MARKS", "use fewer wildcards in one word", per="per wildcard word")
    _within("wildcard words starting with ? or * (each tries every word of the index)", leading,
            limits.max_leading_wildcards, "MAX_LEADING_WILDCARDS", "start each wildcard word with a letter "
            "(gree*, not *ree*), or escape a lone ? as \\?")
    return QueryCost(terms, phrase_cost, len(patterns))


def _within(what: str, value: int, limit: int, setting: str, fix: str, per: str = "per search") -> None:
    if value > limit:
        raise UnsupportedQuery(f"the query has {value} {what}; this gateway reads at most {limit} {per} "
                               f"(ESRR_GATEWAY_{setting}): {fix}")
