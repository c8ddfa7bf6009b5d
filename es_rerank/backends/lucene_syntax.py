"""``query_string`` and ``simple_query_string`` text read into ``query_dsl`` nodes, with luqum's Lucene parser (pure).

luqum (PyPI, maintained, used by the Jurismarchés/Elasticsearch tool chains) parses
Lucene's syntax into a tree; this module maps that tree onto the nodes the embedded
backend serves, as Elasticsearch would read it:

- ``query_string``: words joined by ``default_operator``; ``AND``/``&&``, ``OR``/``||``,
  ``NOT``/``!``, ``+word`` (required), ``-word`` (excluded), parentheses, ``"phrases"``
  and ``"phrases"~slop``, ``word^2`` boosts, ``field:value`` on the whole text
  (``text:``) or a keyword field (``year:2010``, ``year:[2000 TO 2010]``,
  ``publication_types:Review``); a field the index does not have matches nothing, as in
  Elasticsearch (``Pork: Yersinia`` in a pasted title searches a field "Pork"). A query
  of exclusions only matches every other document, as Elasticsearch's parser makes it.
  A syntax error is refused with the parser's reason, as Elasticsearch answers a 400.
- Wildcards in a word (``gree*``, ``tumo?r``) match the tokens of ``text`` they fit,
  lower-cased, each match scoring 1 (Elasticsearch's constant-score rewrite); a question
  mark ends many natural questions ("Greens?") and is a wildcard there too, as in
  Elasticsearch.
- ``simple_query_string``: ``+`` AND, ``|`` OR, ``-`` NOT (with the OR default,
  ``a -b`` is *a* or *not b*, as Elasticsearch documents), quotes and parentheses;
  ``AND``/``OR``/``NOT`` and ``field:`` are plain words there. It never fails: text
  the parser cannot read is searched as its words, as Elasticsearch's lenient parser does.

- ``word~`` and ``word~N`` are fuzzy words (``query_tree.Fuzzy``): N edits (0, 1, 2), or
  the clause's ``fuzziness`` (query_string's default AUTO) without N, with its
  ``fuzzy_prefix_length``, ``fuzzy_max_expansions`` and ``fuzzy_transpositions``.

Regular expressions (``/.../``) and ranges of text are refused (Elasticsearch serves them).

Parsing is bounded before luqum runs (``raw_shape``): the text's parentheses nest at most
``MAX_DEPTH`` deep, it holds at most ``MAX_CLAUSES`` words and ``max_wildcard_terms``
wildcard words (``QueryLimits``), read from the raw text, so neither a deep nest (a
RecursionError) nor thousands of words or wildcards cost a parse (luqum takes 40-90 ms
for 8 KB of fields or groups). luqum's module-level ``parser.parse`` shares one lexer between threads
(two searches at once read each other's words); ``luqum.thread.parse`` clones it per
thread. A text's tree is kept for the next reader of the same text (``query_text`` and
``read_query`` both read a request's query string).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from luqum import tree
from luqum.exceptions import ParseError
from luqum.thread import parse as thread_safe_parse

from es_rerank.backends.query_tree import (
    KEYWORD_FIELDS,
    MAX_CLAUSES,
    MAX_DEPTH,
    NUMBER_FIELDS,
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    WHOLE_TEXT,
    Bool,
    Fuzziness,
    MatchAll,
    MatchNone,
    Node,
    Pattern,
    Range,
    UnsupportedQuery,
    Words,
    active_limits,
    keyword_node,
    phrase_node,
    whole_number,
)
from es_rerank.text import tokenize

_TEXT_NAMES = ("text", "title", "abstract", "*", "_all")  # fields whose words the model reads
_SIMPLE_SPECIAL = re.compile(r"\b(AND|OR|NOT)\b|[:!^\[\]{}/\\]|&&|\|\|")
# What luqum raises on text it cannot read (its own errors, and a few from inside PLY on odd input).
_PARSE_FAILURES = (ParseError, ValueError, TypeError, AttributeError, IndexError, RecursionError)
_QUOTED_OR_ESCAPED = re.compile(r'"(?:[^"\\]|\\.)*"?|\\.', re.DOTALL)
_RANGE = re.compile(r"[\[{][^\]}]*[\]}]")
_UNESCAPED_WILDCARD = re.compile(r"(?<!\\)[?*]")
_WILDCARD_WORD = re.compile(r"[^\s()\[\]{}\"]*[?*][^\s()\[\]{}\"]*")
_BARE_WORD = re.compile(r"[^\s()]+")
_OPERATORS = frozenset(("AND", "OR", "NOT", "&&", "||", "+", "-", "!", "|"))


@dataclass(frozen=True)
class RawShape:
    """What a query string's raw text says of its cost, read before any parse (quoted phrases, ranges and escaped
    characters aside)."""

    depth: int  # how deep its parentheses nest
    wildcard_words: int  # words holding ? or * (a lone * is every document, not a wildcard)
    words: int  # words that are no operator: each is at least one clause once parsed


def raw_shape(text: str) -> RawShape:
    """The ``RawShape`` of a query string, in one pass of regular expressions over its text."""
    bare = _RANGE.sub(" r ", _QUOTED_OR_ESCAPED.sub(" q ", text))
    depth = deepest = 0
    for char in bare:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(0, depth - 1)
    wildcards = sum(1 for word in _WILDCARD_WORD.findall(bare) if word != "*")
    words = sum(1 for word in _BARE_WORD.findall(bare) if word not in _OPERATORS)
    return RawShape(deepest, wildcards, words)


def _check_raw(text: str, kind: str) -> None:
    shape = raw_shape(text)
    if shape.depth > MAX_DEPTH:
        raise UnsupportedQuery(
            f"[{kind}] parentheses nest {shape.depth} deep; this gateway reads at most {MAX_DEPTH} "
            "levels: flatten the query"
        )
    if shape.words > MAX_CLAUSES:  # refused once parsed anyway (query_dsl's clause budget): not worth parsing
        raise UnsupportedQuery(
            f"[{kind}] the query has {shape.words} words and groups, more than {MAX_CLAUSES} "
            f"clauses; this gateway reads at most {MAX_CLAUSES} per request: split it"
        )
    limit = active_limits().max_wildcard_terms
    if shape.wildcard_words > limit:
        raise UnsupportedQuery(
            f"[{kind}] the query has {shape.wildcard_words} wildcard words; this gateway reads at "
            f"most {limit} per search (ESRR_GATEWAY_MAX_WILDCARD_TERMS): search fewer wildcard "
            "words, or escape a literal ? or * as \\? or \\*"
        )


@lru_cache(maxsize=32)
def _parsed(source: str) -> tree.Item:
    """luqum's tree of ``source``, parsed with a lexer of this thread's own; read only by its callers."""
    return thread_safe_parse(source)


def read_lucene(
    text: str,
    all_required: bool,
    simple: bool,
    budget: Any,
    depth: int,
    *,
    kind: str,
    fuzzy: Fuzziness | None = None,
    field: str = "text",
) -> Node:
    """The nodes of a ``query_string`` (``simple`` False) or ``simple_query_string`` text; ``fuzzy`` is the clause's
    fuzzy options (``word~`` without a number takes its fuzziness), ``field`` the text field its words search where
    no ``name:`` says otherwise."""
    _check_raw(text, kind)
    source = _simple_to_lucene(text) if simple else _bang_as_not(text)
    if not source.strip():
        return MatchNone()
    try:
        parsed = _parsed(source)
    except _PARSE_FAILURES as error:
        if simple:  # lenient, as Elasticsearch: the words are searched
            tokens = tuple(dict.fromkeys(tokenize(text)))
            return Words(tokens, len(tokens) if all_required else 1, field=field) if tokens else MatchNone()
        raise UnsupportedQuery(
            f"[{kind}] cannot parse {text[:40]!r}: {error}; check its quotes, parentheses and "
            "operators (AND, OR, NOT, +, -)"
        ) from None
    return _Reader(all_required, simple, budget, kind, fuzzy or Fuzziness()).node(parsed, depth, field)


def wildcard_regex(value: str) -> str:
    """A wildcard word as the regular expression tantivy matches against whole tokens (``*`` any run, ``?`` one
    character), lower-cased as the index's tokens are."""
    parts = re.findall(r"\\.|.", value.lower(), re.DOTALL)  # an escaped ? or * is the character itself
    return "".join(".*" if part == "*" else "." if part == "?" else re.escape(part[-1]) for part in parts)


def _bang_as_not(text: str) -> str:
    """Lucene's ``!`` before a word or group as ``NOT``, which luqum reads (it takes ``!coffee`` for a word)."""
    return re.sub(r"(?<![\w\\])!(?!=)", " NOT ", text)


def _simple_to_lucene(text: str) -> str:
    """simple_query_string's syntax as Lucene's: ``|`` -> OR, ``+`` -> AND; Lucene's own operators made words."""
    text = _SIMPLE_SPECIAL.sub(lambda found: f" {found.group(1).lower()} " if found.group(1) else " ", text)
    text = re.sub(r"\s*\|\s*", " OR ", text)
    text = re.sub(r"(?:^|\s)\+\s*", " AND ", text).strip()
    return re.sub(r"^(?:AND|OR)\s+|\s+(?:AND|OR)$", "", text)


class _Reader:
    def __init__(self, all_required: bool, simple: bool, budget: Any, kind: str, fuzzy: Fuzziness) -> None:
        self.all_required, self.simple, self.budget, self.kind, self.fuzzy = all_required, simple, budget, kind, fuzzy

    def refuse(self, what: str) -> UnsupportedQuery:
        return UnsupportedQuery(f"[{self.kind}] {what} is not served by the embedded backend; it is {ON_ELASTICSEARCH}")

    def node(self, item: tree.Item, depth: int, field: str) -> Node:
        self.budget.spend(depth)
        if isinstance(item, (tree.Group, tree.FieldGroup)):
            return self.node(item.expr, depth + 1, field)
        if isinstance(item, tree.SearchField):
            named = self.field(item.name)
            if named is None:  # a field the index does not have: Elasticsearch matches nothing there, as here
                return MatchNone()
            return self.node(item.expr, depth + 1, named)
        if isinstance(item, tree.Boost):
            inner = self.node(item.expr, depth + 1, field)
            return Bool(must=(inner,), boost=float(item.force))
        if isinstance(item, tree.Proximity):
            if not isinstance(item.term, tree.Phrase):
                raise self.refuse("fuzziness (word~N)")
            return self.phrase(item.term, self.slop(item), field)
        if isinstance(item, tree.Fuzzy):
            return self.fuzzy_word(item, field)
        if isinstance(item, tree.Phrase):
            return self.phrase(item, 0, field)
        if isinstance(item, tree.Range):
            return self.range(item, field)
        if isinstance(item, tree.Regex):
            raise self.refuse("a regular expression (/.../)")
        if isinstance(item, tree.Word):
            return self.word(item.value, field)
        return self.operation(item, depth, field)

    def operation(self, item: tree.Item, depth: int, field: str) -> Node:
        """An AND, OR, implicit operation or a +, -, NOT clause: a group of clauses."""
        if isinstance(item, tree.AndOperation):
            return self.group(item.children, depth, field, all_required=True)
        if isinstance(item, tree.OrOperation):
            return self.group(item.children, depth, field, all_required=False)
        if isinstance(item, tree.UnknownOperation):
            return self.group(item.children, depth, field, all_required=self.all_required)
        if isinstance(item, (tree.Plus, tree.Not, tree.Prohibit)):
            return self.group([item], depth, field, all_required=self.all_required)
        raise self.refuse(f"the syntax {str(item)[:40]!r}")

    def field(self, name: str) -> str | None:
        """The field searched for ``name:``; None for one the index does not have (``Pork: Yersinia`` in a title)."""
        if {name} in WHOLE_TEXT:
            return "text"
        if name in KEYWORD_FIELDS or name in NUMBER_FIELDS or name in TEXT_FIELDS:
            return name
        return None

    def word(self, value: str, field: str) -> Node:
        if re.search(r"(?<!\\)!", value):  # Lucene's parser (and so Elasticsearch's) reads `!` as NOT, not in a word
            raise UnsupportedQuery(
                f"[{self.kind}] cannot parse {value[:40]!r}: '!' is the NOT operator; put it "
                "before a word (!coffee) or escape it (\\!)"
            )
        if _UNESCAPED_WILDCARD.search(value):
            if value == "*" and field == "text":
                return MatchAll()
            if field not in TEXT_FIELDS or self.simple and "?" in value:  # simple_query_string: `*` at the end only
                raise self.refuse(f"the wildcard {value[:40]!r} on [{field}]")
            return Pattern(wildcard_regex(value), value.lower(), field)
        if field not in TEXT_FIELDS:
            return keyword_node(self.kind, field, [value.replace("\\", "")])
        tokens = tuple(dict.fromkeys(tokenize(value)))
        if not tokens:
            return MatchNone()
        return Words(tokens, len(tokens) if self.all_required else 1, field=field)

    def fuzzy_word(self, item: tree.Fuzzy, field: str) -> Node:
        """``word~`` (the clause's fuzziness) or ``word~N`` (N edits) on the text; a keyword field's value is
        refused (Elasticsearch's fuzzy keyword search is served there)."""
        if (
            field not in TEXT_FIELDS
            or not isinstance(item.term, tree.Word)
            or _UNESCAPED_WILDCARD.search(item.term.value)
        ):
            raise self.refuse(f"the fuzzy word {str(item)[:40]!r} on [{field}]")
        tokens = tokenize(item.term.value)
        token = tokens[0] if len(tokens) == 1 else item.term.value.lower()  # Elasticsearch normalises, not splits
        options = self.fuzzy
        if not getattr(item, "_implicit_degree", False):
            options = replace(options, setting=str(item.degree))
        return options.word(self.kind, token, field=field)

    def slop(self, item: tree.Proximity) -> int:
        """A phrase's ``~N`` as a whole number (luqum takes ``~1.5`` and ``~`` alone too)."""
        degree = str(item.degree if item.degree is not None else 0)
        if not re.fullmatch(r"[0-9]+", degree):
            raise UnsupportedQuery(f"[{self.kind}] a phrase's slop (~N) must be a whole number, got ~{degree[:40]}")
        if len(degree) > 9:  # over any budget (QueryLimits.max_phrase_cost), and over what tantivy takes
            limit = active_limits().max_phrase_cost
            raise UnsupportedQuery(
                f"[{self.kind}] the query has a phrase of slop ~{degree[:40]}; this gateway reads "
                f"at most {limit} phrase words times slop per search "
                "(ESRR_GATEWAY_MAX_PHRASE_COST): lower the slop"
            )
        return int(degree)

    def phrase(self, item: tree.Phrase, slop: int, field: str) -> Node:
        text = item.value[1:-1]
        if field not in TEXT_FIELDS:
            return keyword_node(self.kind, field, [text])
        return phrase_node(tokenize(text), slop, 1.0, field)

    def range(self, item: tree.Range, field: str) -> Node:
        if field not in NUMBER_FIELDS:
            raise self.refuse(f"a range of [{field}] (ranges are read on {', '.join(NUMBER_FIELDS)})")
        low, high = str(item.low), str(item.high)
        lower = None if low == "*" else whole_number(self.kind, field, low) + (0 if item.include_low else 1)
        upper = None if high == "*" else whole_number(self.kind, field, high) - (0 if item.include_high else 1)
        return MatchAll() if lower is None and upper is None else Range(field, lower, upper)

    def group(self, children: Any, depth: int, field: str, all_required: bool) -> Node:
        must: list[Node] = []
        should: list[Node] = []
        must_not: list[Node] = []
        for child in children:
            if isinstance(child, tree.Plus):
                must.append(self.node(child.a, depth + 1, field))
            elif isinstance(child, (tree.Not, tree.Prohibit)):
                excluded = self.node(child.a, depth + 1, field)
                if self.simple and not all_required:  # simple_query_string: `a -b` is a OR (NOT b)
                    should.append(Bool(must=(MatchAll(),), must_not=(excluded,)))
                else:
                    must_not.append(excluded)
            else:
                (must if all_required else should).append(self.node(child, depth + 1, field))
        if not must and not should:  # exclusions only: everything else, as Elasticsearch's parser makes it
            must.append(MatchAll())
        return Bool(tuple(must), tuple(should), (), tuple(must_not), 0 if must else min(1, len(should)))


def lucene_words(text: str, simple: bool = False) -> str:
    """The words a query-string searches for in the text: its words and phrases, not those it excludes (NOT, -)
    nor the values of field filters (``year:2010``); its words as written where it does not parse."""
    try:
        _check_raw(text, "query_string")
    except UnsupportedQuery:
        return text  # refused when the query is read (read_lucene), unparsed here
    source = _simple_to_lucene(text) if simple else _bang_as_not(text)
    try:
        parsed = _parsed(source) if source.strip() else None
    except _PARSE_FAILURES:
        return text
    words: list[str] = []

    def walk(item: Any, field: str) -> None:
        if isinstance(item, (tree.Not, tree.Prohibit)):
            return
        if isinstance(item, tree.SearchField):
            field = item.name
        if isinstance(item, tree.Phrase) and field in _TEXT_NAMES:
            words.append(item.value[1:-1])
        elif isinstance(item, tree.Word) and field in _TEXT_NAMES:
            words.append(item.value)
        for child in item.children:
            walk(child, field)

    if parsed is not None:
        walk(parsed, "text")
    return " ".join(words)
