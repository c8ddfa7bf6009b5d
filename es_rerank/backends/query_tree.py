"""The tree a search body's query is read into for the embedded backend, and the checks its readers share (pure).

``query_dsl`` reads the Query DSL into it, ``lucene_syntax`` the text of ``query_string``
queries; ``EmbeddedBackend`` translates it to tantivy, once ``check_cost`` has found it
within the ``QueryLimits`` in force: the gateway binds its settings' limits to each
request (``bind_limits``), the defaults hold elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

TEXT_FIELDS = ("text", "title", "abstract")  # `text` is title and abstract together; each is searched alone too
WHOLE_TEXT = ({"text"}, {"title", "abstract"}, {"text", "title", "abstract"}, {"*"}, {"_all"})
KEYWORD_FIELDS = ("doc_id", "journal", "mesh", "publication_types", "doi")
NUMBER_FIELDS = ("year",)
AGGREGATABLE = ("year", "publication_types", "journal", "mesh")  # fast fields of the index (aggregations)
MAX_CLAUSES = 1024  # Elasticsearch's own limit is 4096 (indices.query.bool.max_clause_count)
MAX_DEPTH = 20
MAX_SHOULD_EXPANSION = 64  # conjunctions tried for a minimum_should_match between 1 and all (tantivy_query)
DEFAULT_MAX_EXPANSIONS = 50  # Elasticsearch's default max_expansions of fuzzy and phrase prefix queries
MAX_EDITS = 2  # Lucene's Levenshtein automata go no further
ON_ELASTICSEARCH = "served by the Elasticsearch backend (ESRR_BACKEND=elasticsearch)"


class UnsupportedQuery(ValueError):
    """A query the embedded backend cannot answer as Elasticsearch would; the message says what and who can."""


@dataclass(frozen=True)
class Words:
    """Documents holding at least ``required`` of the distinct ``tokens`` in ``field`` (1: any, all: AND)."""

    tokens: tuple[str, ...]
    required: int
    boost: float = 1.0
    field: str = "text"  # one of TEXT_FIELDS


@dataclass(frozen=True)
class Phrase:
    """Documents holding ``tokens`` in order in ``field``, at most ``slop`` moves apart."""

    tokens: tuple[str, ...]
    slop: int = 0
    boost: float = 1.0
    field: str = "text"


# On NFCorpus (3.6k documents), a BM25 top-500 of "breast ca*" costs 14 ms of CPU, of "breast can*" 10.5, of
# "breast c*" 21, of the words "breast cancer" 8; a wildcard the heavy lane exists for, ~130 ms (heavy_lane.py).
LIGHT_PREFIX_CHARS = 2


@dataclass(frozen=True)
class Pattern:
    """Documents holding a token of ``field`` that the regular expression ``regex`` matches whole (a wildcard, a
    prefix); scored 1, as Elasticsearch's constant-score rewrite of a wildcard or prefix query. ``wildcard`` is the
    word as written (a prefix as ``prefix*``)."""

    regex: str
    wildcard: str = ""
    field: str = "text"

    @property
    def marks(self) -> int:
        """How many ``?`` and ``*`` the wildcard holds (each widens the automaton tantivy compiles)."""
        return len(re.findall(r"(?<!\\)[?*]", self.wildcard))

    @property
    def leading(self) -> bool:
        """Whether the wildcard starts with ``?`` or ``*``: every term of the index is then tried and may match."""
        return self.wildcard[:1] in ("?", "*")

    @property
    def light_prefix(self) -> bool:
        """Whether it is a prefix of ``LIGHT_PREFIX_CHARS`` letters or more (``tea*``): its terms are one range of
        the term dictionary, no dearer than a word or two (a search-as-you-type's last word)."""
        return self.marks == 1 and self.wildcard.endswith("*") and len(self.wildcard) > LIGHT_PREFIX_CHARS


@dataclass(frozen=True)
class Fuzzy:
    """Documents holding a token of ``field`` within ``edits`` edits of ``token`` (Lucene's fuzzy query, as
    Elasticsearch's ``fuzziness`` asks): the first ``prefix_length`` characters unchanged, a swap of two neighbours
    one edit when ``transpositions``, at most ``max_expansions`` tokens searched (the nearest, then the first in
    term order), each scored by BM25 times its similarity (1 - edits / the shorter length)."""

    token: str
    edits: int
    prefix_length: int = 0
    max_expansions: int = DEFAULT_MAX_EXPANSIONS
    transpositions: bool = True
    boost: float = 1.0
    field: str = "text"


@dataclass(frozen=True)
class PhrasePrefix:
    """Documents holding ``tokens`` in order in ``field``, the last one a prefix: Lucene's phrase prefix query, the
    prefix standing for the first ``max_expansions`` tokens of the index that start with it, in term order."""

    tokens: tuple[str, ...]
    slop: int = 0
    max_expansions: int = DEFAULT_MAX_EXPANSIONS
    boost: float = 1.0
    field: str = "text"


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

    must: tuple[Node, ...] = ()
    should: tuple[Node, ...] = ()
    filter: tuple[Node, ...] = ()
    must_not: tuple[Node, ...] = ()
    required_should: int = 0
    boost: float = 1.0


@dataclass(frozen=True)
class MatchAll:
    """Every document (score 1, as Elasticsearch's ``match_all``)."""


@dataclass(frozen=True)
class MatchNone:
    """No document (e.g. a match whose text has no words)."""


Node = Words | Phrase | Pattern | Fuzzy | PhrasePrefix | Keyword | Range | Bool | MatchAll | MatchNone


def shortened(value: Any) -> str:
    """``value`` as at most 40 characters of text, for an error message."""
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:40] + "..."


def phrase_node(tokens: list[str], slop: int, boost: float, field: str = "text") -> Node:
    """A phrase of ``tokens`` in ``field``; one token is a word, none matches nothing (as Elasticsearch)."""
    if not tokens:
        return MatchNone()
    if len(tokens) == 1:
        return Words((tokens[0],), 1, boost, field)
    return Phrase(tuple(tokens), slop, boost, field)


def keyword_node(kind: str, field: Any, values: list[Any]) -> Node:
    """A filter of ``field`` on ``values``, or ``UnsupportedQuery`` when the field cannot be filtered here."""
    if field in NUMBER_FIELDS:
        numbers = [whole_number(kind, field, value) for value in values]
        return Keyword(field, tuple(numbers))
    if field not in KEYWORD_FIELDS:
        raise UnsupportedQuery(
            f"[{kind}] on field [{shortened(field)}] is not served by the embedded backend, which "
            f"filters on {', '.join(KEYWORD_FIELDS + NUMBER_FIELDS)}; a filter on another field "
            f"is {ON_ELASTICSEARCH}"
        )
    if not all(isinstance(value, (str, int)) and not isinstance(value, bool) for value in values):
        raise UnsupportedQuery(f"[{kind}] on [{field}] takes strings, got {shortened(values)}")
    return Keyword(field, tuple(str(value) for value in values))


def edits_for(kind: str, fuzziness: Any, token: str) -> int:
    """The edits Elasticsearch's ``fuzziness`` allows ``token``: a number (0, 1, 2; more is 2, as in Elasticsearch),
    ``"AUTO"`` (0 edits below 3 characters, 1 below 6, else 2) or ``"AUTO:low,high"``."""
    text = str(fuzziness).strip() if not isinstance(fuzziness, bool) else ""
    auto = re.fullmatch(r"(?i)auto(?::([0-9]{1,4}),([0-9]{1,4}))?", text)
    if auto is not None:
        low, high = (int(auto.group(1)), int(auto.group(2))) if auto.group(1) else (3, 6)
        if low > high:
            raise UnsupportedQuery(
                f"[{kind}] fuzziness {shortened(fuzziness)}: AUTO's low length must not be over its "
                'high one, as in "AUTO:3,6"'
            )
        length = len(token)
        return 0 if length < low else 1 if length < high else 2
    if not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{0,6})?", text):
        raise UnsupportedQuery(
            f'[{kind}] fuzziness must be 0, 1, 2, "AUTO" or "AUTO:low,high", got {shortened(fuzziness)}'
        )
    return min(MAX_EDITS, int(float(text)))


@dataclass(frozen=True)
class Fuzziness:
    """A clause's fuzzy options, as Elasticsearch reads them (``fuzziness``, ``prefix_length``, ``max_expansions``,
    ``fuzzy_transpositions``); ``word`` makes one word's node."""

    setting: Any = "AUTO"
    prefix_length: int = 0
    max_expansions: int = DEFAULT_MAX_EXPANSIONS
    transpositions: bool = True

    def word(self, kind: str, token: str, boost: float = 1.0, field: str = "text") -> Node:
        """The node of ``token`` searched in ``field`` with these options: itself where no edit is allowed (a short
        word under AUTO, fuzziness 0, or a prefix_length covering it, which Lucene searches as the exact word)."""
        edits = edits_for(kind, self.setting, token)
        if edits == 0 or self.prefix_length >= len(token):
            return Words((token,), 1, boost, field)
        return Fuzzy(token, edits, self.prefix_length, self.max_expansions, self.transpositions, boost, field)


def read_fuzziness(kind: str, clause: Mapping[str, Any], names: tuple[str, str, str, str]) -> Fuzziness | None:
    """The fuzzy options of ``clause`` under its ``names`` (fuzziness, prefix length, max expansions,
    transpositions), or None when it sets no fuzziness."""
    if clause.get(names[0]) is None:
        return None
    return read_fuzziness_setting(kind, clause, names, clause[names[0]])


def read_fuzziness_setting(
    kind: str, clause: Mapping[str, Any], names: tuple[str, str, str, str], setting: Any
) -> Fuzziness:
    """The fuzzy options of ``clause`` under its ``names``, with ``setting`` as its fuzziness."""
    _, prefix_name, expansions_name, transpositions_name = names
    edits_for(kind, setting, "")  # the setting's form, checked once before any word
    prefix_length = clause.get(prefix_name, 0)
    if isinstance(prefix_length, bool) or not isinstance(prefix_length, int) or prefix_length < 0:
        raise UnsupportedQuery(
            f"[{kind}] {prefix_name} must be a whole number of at least 0, got {shortened(prefix_length)}"
        )
    return Fuzziness(
        setting,
        prefix_length,
        expansions(kind, clause, expansions_name),
        transpositions(kind, clause, transpositions_name),
    )


def expansions(kind: str, clause: Mapping[str, Any], name: str = "max_expansions") -> int:
    """``clause``'s ``max_expansions`` (Elasticsearch's default 50), a whole number of at least 1."""
    value = clause.get(name, DEFAULT_MAX_EXPANSIONS)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedQuery(f"[{kind}] {name} must be a whole number of at least 1, got {shortened(value)}")
    return value


def transpositions(kind: str, clause: Mapping[str, Any], name: str) -> bool:
    """``clause``'s transpositions flag (default true: a swap of two neighbours is one edit)."""
    value = clause.get(name, True)
    if not isinstance(value, bool):
        raise UnsupportedQuery(f"[{kind}] {name} must be true or false, got {shortened(value)}")
    return value


def regex_literal(text: str) -> str:
    """``text`` as a regular expression tantivy matches literally: letters and digits as they are, every other
    character by its code point (``\\x{2D}``), which Rust's regex syntax reads whatever the character."""
    return "".join(char if char.isalnum() else f"\\x{{{ord(char):X}}}" for char in text)


def prefix_pattern(prefix: str, field: str = "text", case_insensitive: bool = False) -> Pattern:
    """The tokens of ``field`` starting with ``prefix``, as a ``Pattern`` (a prefix is the wildcard ``prefix*``)."""
    regex = regex_literal(prefix) + ".*"
    written = re.sub(r"([\\?*])", r"\\\1", prefix) + "*"
    return Pattern(("(?i)" if case_insensitive else "") + regex, written, field)


def whole_number(kind: str, field: str, value: Any) -> int:
    """``value`` (a number or its digits) as a whole number, or ``UnsupportedQuery``."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,9}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnsupportedQuery(f"[{kind}] on [{field}] takes whole numbers (years), got {shortened(value)}")
    if not INTEGER_RANGE[0] <= value <= INTEGER_RANGE[1]:  # tantivy fails past i64; the mapping says integer
        raise UnsupportedQuery(
            f"[{kind}] on [{field}]: value [{shortened(value)}] is out of range for an integer "
            f"({INTEGER_RANGE[0]} to {INTEGER_RANGE[1]}, the field's type in the mapping)"
        )
    return value


INTEGER_RANGE = (-(2**31), 2**31 - 1)  # Elasticsearch's `integer`, the type `_mapping` gives year


@dataclass(frozen=True)
class QueryLimits:
    """What one search may cost, checked on its tree before tantivy runs (``check_cost``); each is the gateway's
    setting ``ESRR_GATEWAY_<NAME>`` (docs/operations.md has the measurements behind the defaults)."""

    max_query_terms: int = 1024  # words and phrase words searched, over the whole query
    max_phrase_cost: int = 400  # each sloppy phrase's words times its slop, summed over the query
    max_wildcard_terms: int = 3  # wildcard words (gree*, tumo?r)
    max_wildcard_marks: int = 8  # `?` and `*` in one wildcard word
    max_leading_wildcards: int = 0  # wildcard words starting with `?` or `*` (each tries every term of the index)
    max_buckets: int = 65_536  # aggregation buckets one search may make (Elasticsearch's search.max_buckets)


DEFAULT_LIMITS = QueryLimits()
UNLIMITED = QueryLimits(2**62, 2**62, 2**62, 2**62, 2**62, 2**62)  # for measuring what a search costs without them
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
    """What a query asks of the index: words looked up, sloppy phrase work (words x slop), wildcard words and the
    prefixes among them that are light (``Pattern.light_prefix``)."""

    terms: int = 0
    phrase_cost: int = 0
    wildcards: int = 0
    light_prefixes: int = 0

    @property
    def heavy_wildcards(self) -> int:
        """The wildcard words that are not light prefixes."""
        return self.wildcards - self.light_prefixes


def check_cost(node: Node, limits: QueryLimits) -> QueryCost:
    """The cost of the query of ``node``, or ``UnsupportedQuery`` naming the first of ``limits`` that it passes, its
    setting and the query's value; checked before any search, so a refused query costs nothing."""
    terms, phrase_cost, patterns = _tally(node)
    leading = sum(pattern.leading for pattern in patterns)
    widest = max(patterns, key=lambda pattern: pattern.marks, default=None)
    _within(
        "words searched (a fuzzy word, or a phrase's last word as a prefix, counting as its max_expansions)",
        terms,
        limits.max_query_terms,
        "MAX_QUERY_TERMS",
        "search fewer words, or lower max_expansions",
    )
    _within(
        "phrase words times slop (summed over its phrases)",
        phrase_cost,
        limits.max_phrase_cost,
        "MAX_PHRASE_COST",
        "lower the slop (~N) or shorten the phrase",
    )
    _within(
        "wildcard words",
        len(patterns),
        limits.max_wildcard_terms,
        "MAX_WILDCARD_TERMS",
        "search fewer wildcard words, or escape a literal ? or * as \\? or \\*",
    )
    if widest is not None:
        _within(
            f"'?' and '*' in the wildcard {shortened(widest.wildcard)!r}",
            widest.marks,
            limits.max_wildcard_marks,
            "MAX_WILDCARD_MARKS",
            "use fewer wildcards in one word",
            per="per wildcard word",
        )
    _within(
        "wildcard words starting with ? or * (each tries every word of the index)",
        leading,
        limits.max_leading_wildcards,
        "MAX_LEADING_WILDCARDS",
        "start each wildcard word with a letter (gree*, not *ree*), or escape a lone ? as \\?",
    )
    return QueryCost(terms, phrase_cost, len(patterns), sum(pattern.light_prefix for pattern in patterns))


def _tally(node: Node) -> tuple[int, int, list[Pattern]]:
    """The words a query looks up, its phrase words times slop, and its wildcard words."""
    terms = phrase_cost = 0
    patterns: list[Pattern] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Words):
            terms += len(item.tokens)
        elif isinstance(item, Phrase):
            terms += len(item.tokens)
            phrase_cost += len(item.tokens) * item.slop
        elif isinstance(item, Fuzzy):  # each token it expands to is looked up as a word is
            terms += item.max_expansions if item.edits else 1
        elif isinstance(item, PhrasePrefix):
            terms += len(item.tokens) - 1 + item.max_expansions
            phrase_cost += len(item.tokens) * item.slop
        elif isinstance(item, Pattern):
            patterns.append(item)
        elif isinstance(item, Bool):
            stack.extend((*item.must, *item.should, *item.filter, *item.must_not))
    return terms, phrase_cost, patterns


def _within(what: str, value: int, limit: int, setting: str, fix: str, per: str = "per search") -> None:
    if value > limit:
        raise UnsupportedQuery(
            f"the query has {value} {what}; this gateway reads at most {limit} {per} (ESRR_GATEWAY_{setting}): {fix}"
        )
