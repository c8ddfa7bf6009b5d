"""Elasticsearch's Query DSL, the part both backends read: a small tree of what a query asks (pure).

``read_query`` turns a request's ``query`` (or ``post_filter``) object into ``Node``s
the embedded backend translates to tantivy; whatever it cannot serve as Elasticsearch
would is an ``UnsupportedQuery`` that names the clause and the backend that serves it
(Elasticsearch), never a query quietly answered as another one. ``query_text`` reads
the words the model scores from the same object on either backend: the text of the
``match``, ``multi_match``, ``match_phrase``, ``match_phrase_prefix``,
``match_bool_prefix``, ``query_string`` and ``simple_query_string`` clauses in
``bool.must`` / ``should`` (never filter values, nor ``must_not``'s words).

Text is searched in ``text``, the field the embedded index holds (title and abstract
together, tokenized by ``es_rerank.text.tokenize``); a clause naming ``text``,
``title`` and ``abstract`` together, ``*`` or ``_all`` searches it. Semantics kept:
``operator`` and ``minimum_should_match`` (a count, a percentage, negative forms), the
bool rules of Elasticsearch (``should`` optional beside ``must``/``filter``, else one
required), phrases with ``slop``, and ``query_string`` syntax (AND, OR, NOT, +, -,
quotes, parentheses, ``default_operator``) parsed by ``luqum``, a maintained parser of
Lucene's syntax, rather than by hand. Keyword filters (``term``, ``terms``, ``range``)
work on the metadata fields of the issue-26 contract. Fuzzy words (``fuzziness``,
``fuzzy``, ``word~``) and prefixes (``prefix``, the ``bool_prefix`` and phrase-prefix
types) are read with Elasticsearch's options into ``Fuzzy``, ``PhrasePrefix`` and
``Pattern`` nodes, expanded over the index's words when searched (``term_expansion``).

Cost is bounded before anything runs: at most ``MAX_CLAUSES`` clauses and
``MAX_DEPTH`` levels of nesting per request; the tree read is then checked against the
request's ``QueryLimits`` (terms, sloppy phrases, wildcards: ``query_tree.check_cost``)
by the embedded backend before tantivy runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from es_rerank.backends.lucene_syntax import lucene_words, read_lucene  # luqum builds its parser tables at import
from es_rerank.backends.query_tree import (  # noqa: F401  (the tree's names, read here, used by the backends)
    AGGREGATABLE,
    KEYWORD_FIELDS,
    MAX_CLAUSES,
    MAX_DEPTH,
    MAX_SHOULD_EXPANSION,
    NUMBER_FIELDS,
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    WHOLE_TEXT,
    Bool,
    Fuzziness,
    Keyword,
    MatchAll,
    MatchNone,
    Node,
    Phrase,
    PhrasePrefix,
    Range,
    UnsupportedQuery,
    Words,
    expansions,
    keyword_node,
    phrase_node,
    prefix_pattern,
    read_fuzziness,
    read_fuzziness_setting,
    shortened,
    whole_number,
)
from es_rerank.text import tokenize


class _Budget:
    """Counts clauses read, refusing more than ``MAX_CLAUSES``."""

    def __init__(self) -> None:
        self.clauses = 0

    def spend(self, depth: int) -> None:
        self.clauses += 1
        if self.clauses > MAX_CLAUSES:
            raise UnsupportedQuery(
                f"the query has more than {MAX_CLAUSES} clauses; this gateway reads at most "
                f"{MAX_CLAUSES} per request: split it"
            )
        if depth > MAX_DEPTH:
            raise UnsupportedQuery(f"the query nests more than {MAX_DEPTH} levels deep; flatten it")


def read_query(query: Any) -> Node:
    """The tree of an Elasticsearch ``query`` object, or ``UnsupportedQuery`` naming what cannot be served."""
    return _read(query, _Budget(), 0)


def _one_clause(query: Any, where: str) -> tuple[str, Any]:
    if not isinstance(query, dict) or len(query) != 1:
        raise UnsupportedQuery(
            f'[{where}] must be an object with one query clause, e.g. {{"match": {{"text": "green tea"}}}}'
        )
    return next(iter(query.items()))


def _read(query: Any, budget: _Budget, depth: int) -> Node:
    budget.spend(depth)
    kind, clause = _one_clause(query, "query")
    reader = _READERS.get(kind)
    if reader is None:
        raise UnsupportedQuery(
            f"[{shortened(kind)}] queries are not served by the embedded backend, which reads "
            f"{', '.join(_READERS)}; they are {ON_ELASTICSEARCH}"
        )
    if not isinstance(clause, dict):
        raise UnsupportedQuery(f"[{kind}] must be an object, got {shortened(clause)}")
    return reader(clause, budget, depth)


def _allowed(kind: str, clause: dict, keys: tuple[str, ...]) -> None:
    unknown = next((key for key in clause if key not in keys), None)
    if unknown is not None:
        raise UnsupportedQuery(
            f"[{kind}] option [{shortened(unknown)}] is not served by the embedded backend "
            f"(it reads {', '.join(keys)}); it is {ON_ELASTICSEARCH}"
        )


def _boost(kind: str, clause: dict) -> float:
    boost = clause.get("boost", 1.0)
    if isinstance(boost, bool) or not isinstance(boost, (int, float)) or not math.isfinite(boost) or boost < 0:
        raise UnsupportedQuery(f"[{kind}] boost must be a number of at least 0, got {shortened(boost)}")
    return float(boost)


def _bool(clause: dict, budget: _Budget, depth: int) -> Node:
    _allowed("bool", clause, ("must", "should", "filter", "must_not", "minimum_should_match", "boost"))
    parts: dict[str, tuple[Node, ...]] = {}
    for occur in ("must", "should", "filter", "must_not"):
        value = clause.get(occur, [])
        listed = value if isinstance(value, list) else [value]
        parts[occur] = tuple(_read(item, budget, depth + 1) for item in listed)
    default = 0 if parts["must"] or parts["filter"] else min(1, len(parts["should"]))
    required = _minimum("bool", clause.get("minimum_should_match"), len(parts["should"]), default)
    return Bool(parts["must"], parts["should"], parts["filter"], parts["must_not"], required, _boost("bool", clause))


def _minimum(kind: str, value: Any, optional: int, default: int) -> int:
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


def _field_value(kind: str, clause: dict) -> tuple[str, Any]:
    if len(clause) != 1:
        raise UnsupportedQuery(f"[{kind}] takes one field, got {len(clause)}")
    return next(iter(clause.items()))


def _text_field(kind: str, fields: Any) -> None:
    """Refuse fields other than the whole text: the embedded index holds title and abstract together only."""
    listed = [fields] if isinstance(fields, str) else fields
    if not isinstance(listed, list) or not listed or not all(isinstance(name, str) for name in listed):
        raise UnsupportedQuery(f"[{kind}] fields must be a field name or a list of them, got {shortened(fields)}")
    names = {name.split("^")[0] for name in listed}  # a boost ("title^2") does not change what is searched
    if names not in WHOLE_TEXT:
        raise UnsupportedQuery(
            f"[{kind}] on {shortened(sorted(names))}: the embedded backend searches title and "
            "abstract together, as the field 'text' (name it, or title and abstract both); "
            f"a search of one of them alone is {ON_ELASTICSEARCH}"
        )


def _text(kind: str, value: Any) -> str:
    if not isinstance(value, str):
        raise UnsupportedQuery(f"[{kind}] needs the search text as a string, got {shortened(value)}")
    return value


def _words(
    kind: str,
    text: str,
    operator: Any,
    minimum: Any,
    boost: float,
    fuzzy: Fuzziness | None = None,
    prefix_last: bool = False,
) -> Node:
    """A match's words: each a clause (fuzzy with ``fuzzy``; the last a prefix with ``prefix_last``, as
    match_bool_prefix), at least one of them required, all with operator and, or ``minimum_should_match``."""
    tokens = tokenize(text)
    if not tokens:
        return MatchNone()
    if operator not in (None, "or", "OR", "and", "AND"):
        raise UnsupportedQuery(f'[{kind}] operator must be "or" or "and", got {shortened(operator)}')
    words = tuple(dict.fromkeys(tokens[:-1] if prefix_last else tokens))
    count = len(words) + prefix_last
    required = count if operator in ("and", "AND") else max(1, _minimum(kind, minimum, count, 1))
    if fuzzy is None and not prefix_last:
        return Words(words, required, boost)
    clauses = tuple(fuzzy.word(kind, token) if fuzzy is not None else Words((token,), 1) for token in words)
    if prefix_last:  # as Elasticsearch: the last word is a prefix query, never fuzzy
        clauses += (prefix_pattern(tokens[-1]),)
    return Bool(should=clauses, required_should=required, boost=boost)


_FUZZY_OPTIONS = ("fuzziness", "prefix_length", "max_expansions", "fuzzy_transpositions")


def _fuzzy(kind: str, clause: dict) -> Fuzziness | None:
    return read_fuzziness(kind, clause, _FUZZY_OPTIONS)


def _match(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("match", clause)
    _text_field("match", field)
    if not isinstance(value, dict):
        return _words("match", _text("match", value), None, None, 1.0)
    _allowed("match", value, ("query", "operator", "minimum_should_match", "boost") + _FUZZY_OPTIONS)
    return _words(
        "match",
        _text("match", value.get("query")),
        value.get("operator"),
        value.get("minimum_should_match"),
        _boost("match", value),
        _fuzzy("match", value),
    )


def _match_bool_prefix(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("match_bool_prefix", clause)
    _text_field("match_bool_prefix", field)
    if not isinstance(value, dict):
        return _words("match_bool_prefix", _text("match_bool_prefix", value), None, None, 1.0, prefix_last=True)
    _allowed("match_bool_prefix", value, ("query", "operator", "minimum_should_match", "boost") + _FUZZY_OPTIONS)
    return _words(
        "match_bool_prefix",
        _text("match_bool_prefix", value.get("query")),
        value.get("operator"),
        value.get("minimum_should_match"),
        _boost("match_bool_prefix", value),
        _fuzzy("match_bool_prefix", value),
        prefix_last=True,
    )


def _phrase_prefix(kind: str, text: str, slop: int, max_expansions: int, boost: float) -> Node:
    tokens = tuple(tokenize(text))
    return PhrasePrefix(tokens, slop, max_expansions, boost) if tokens else MatchNone()


def _match_phrase_prefix(clause: dict, budget: _Budget, depth: int) -> Node:
    kind = "match_phrase_prefix"
    field, value = _field_value(kind, clause)
    _text_field(kind, field)
    if not isinstance(value, dict):
        return _phrase_prefix(kind, _text(kind, value), 0, expansions(kind, {}), 1.0)
    _allowed(kind, value, ("query", "slop", "max_expansions", "boost"))
    return _phrase_prefix(
        kind,
        _text(kind, value.get("query")),
        _slop(kind, value.get("slop", 0)),
        expansions(kind, value),
        _boost(kind, value),
    )


def _term_field(kind: str, field: Any) -> str:
    """The field of a term-level query on text (``prefix``, ``fuzzy``): ``text``, or a keyword field."""
    if field in KEYWORD_FIELDS:
        return field
    _text_field(kind, field)
    return "text"


def _prefix(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("prefix", clause)
    options = value if isinstance(value, dict) else {"value": value}
    _allowed("prefix", options, ("value", "boost", "case_insensitive", "rewrite"))
    if options.get("rewrite", "constant_score") not in ("constant_score", "constant_score_boolean"):
        raise UnsupportedQuery(
            f"[prefix] rewrite {shortened(options['rewrite'])} is not served by the embedded "
            f"backend, which scores a prefix as constant_score does; it is {ON_ELASTICSEARCH}"
        )
    if not isinstance(options.get("case_insensitive", False), bool):
        raise UnsupportedQuery(
            f"[prefix] case_insensitive must be true or false, got {shortened(options['case_insensitive'])}"
        )
    # A term-level query: the prefix is not analysed (`Gre` finds no lower-cased `green`), as in Elasticsearch.
    pattern = prefix_pattern(
        _text("prefix", options.get("value")), _term_field("prefix", field), options.get("case_insensitive", False)
    )
    boost = _boost("prefix", options)
    return pattern if boost == 1.0 else Bool(must=(pattern,), boost=boost)


def _fuzzy_query(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("fuzzy", clause)
    options = value if isinstance(value, dict) else {"value": value}
    _allowed(
        "fuzzy",
        options,
        ("value", "fuzziness", "prefix_length", "max_expansions", "transpositions", "boost", "rewrite"),
    )
    if _term_field("fuzzy", field) != "text":
        raise UnsupportedQuery(
            f"[fuzzy] on [{shortened(field)}] is not served by the embedded backend, which "
            f"searches fuzzy words in the text; it is {ON_ELASTICSEARCH}"
        )
    fuzzy = read_fuzziness(
        "fuzzy", {"fuzziness": "AUTO", **options}, ("fuzziness", "prefix_length", "max_expansions", "transpositions")
    )
    assert fuzzy is not None
    # Term-level: the word is searched as written, not analysed (as Elasticsearch's fuzzy query).
    return fuzzy.word("fuzzy", _text("fuzzy", options.get("value")), _boost("fuzzy", options))


def _slop(kind: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise UnsupportedQuery(f"[{kind}] slop must be a whole number from 0 to 100, got {shortened(value)}")
    return value


def _match_phrase(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("match_phrase", clause)
    _text_field("match_phrase", field)
    if not isinstance(value, dict):
        return phrase_node(tokenize(_text("match_phrase", value)), 0, 1.0)
    _allowed("match_phrase", value, ("query", "slop", "boost"))
    return phrase_node(
        tokenize(_text("match_phrase", value.get("query"))),
        _slop("match_phrase", value.get("slop", 0)),
        _boost("match_phrase", value),
    )


_MULTI_MATCH_TYPES = ("best_fields", "most_fields", "cross_fields", "phrase", "phrase_prefix", "bool_prefix")


def _multi_match(clause: dict, budget: _Budget, depth: int) -> Node:
    # tie_breaker weighs the fields other than the best one; the embedded index searches one: it changes nothing.
    _allowed(
        "multi_match",
        clause,
        ("query", "fields", "type", "operator", "minimum_should_match", "slop", "boost", "tie_breaker")
        + _FUZZY_OPTIONS,
    )
    fields = clause.get("fields", ["*"])
    _text_field("multi_match", fields)
    kind = clause.get("type", "best_fields")
    text = _text("multi_match", clause.get("query"))
    separate = {name.split("^")[0] for name in ([fields] if isinstance(fields, str) else fields)} - {"text"}
    if kind not in _MULTI_MATCH_TYPES:
        raise UnsupportedQuery(
            f"[multi_match] type {shortened(kind)} is not served by the embedded backend (it reads "
            f"{', '.join(_MULTI_MATCH_TYPES)}); it is {ON_ELASTICSEARCH}"
        )
    fuzzy = _fuzzy("multi_match", clause)
    if fuzzy is not None and kind in ("cross_fields", "phrase", "phrase_prefix"):
        raise UnsupportedQuery(
            f"[multi_match] Fuzziness not allowed for type [{kind}] (as in Elasticsearch); send "
            "type best_fields or most_fields"
        )
    if kind == "phrase":
        return phrase_node(tokenize(text), _slop("multi_match", clause.get("slop", 0)), _boost("multi_match", clause))
    if kind == "phrase_prefix":
        return _phrase_prefix(
            "multi_match",
            text,
            _slop("multi_match", clause.get("slop", 0)),
            expansions("multi_match", clause),
            _boost("multi_match", clause),
        )
    if kind == "bool_prefix" and clause.get("slop") is not None:
        raise UnsupportedQuery("[multi_match] slop not allowed for type [bool_prefix] (as in Elasticsearch)")
    requires_all = clause.get("operator") in ("and", "AND") or clause.get("minimum_should_match") is not None
    if requires_all and kind != "cross_fields" and len(separate) > 1:
        # best_fields/most_fields with AND want every word in one field; the embedded index has their union only.
        raise UnsupportedQuery(
            f"[multi_match] type {kind} with an operator or minimum_should_match over "
            f"{sorted(separate)} counts words per field, which the embedded backend, holding "
            "title and abstract together, cannot; use type cross_fields or the field 'text' (such a "
            f"multi_match is {ON_ELASTICSEARCH})"
        )
    return _words(
        "multi_match",
        text,
        clause.get("operator"),
        clause.get("minimum_should_match"),
        _boost("multi_match", clause),
        fuzzy,
        prefix_last=kind == "bool_prefix",
    )


def _term(clause: dict, budget: _Budget, depth: int) -> Node:
    field, value = _field_value("term", clause)
    if isinstance(value, dict):
        _allowed("term", value, ("value", "boost"))
        value = value.get("value")
    return keyword_node("term", field, [value])


def _terms(clause: dict, budget: _Budget, depth: int) -> Node:
    fields = {key: value for key, value in clause.items() if key != "boost"}
    field, values = _field_value("terms", fields)
    if not isinstance(values, list):
        raise UnsupportedQuery(
            f"[terms] on [{shortened(field)}] takes a list of values (a terms lookup is "
            f"{ON_ELASTICSEARCH}), got {shortened(values)}"
        )
    if len(values) > MAX_CLAUSES:
        raise UnsupportedQuery(f"[terms] lists {len(values)} values; at most {MAX_CLAUSES} are read")
    return keyword_node("terms", field, values)


def _range(clause: dict, budget: _Budget, depth: int) -> Node:
    field, bounds = _field_value("range", clause)
    if field not in NUMBER_FIELDS:
        raise UnsupportedQuery(
            f"[range] on [{shortened(field)}] is not served by the embedded backend, which reads "
            f"ranges of {', '.join(NUMBER_FIELDS)}; it is {ON_ELASTICSEARCH}"
        )
    if not isinstance(bounds, dict):
        raise UnsupportedQuery(f'[range] on [{field}] must be an object such as {{"gte": 2000, "lte": 2010}}')
    _allowed("range", bounds, ("gte", "gt", "lte", "lt", "boost"))
    lower = upper = None
    if "gte" in bounds:
        lower = whole_number("range", field, bounds["gte"])
    if "gt" in bounds:
        lower = max(lower if lower is not None else -(2**62), whole_number("range", field, bounds["gt"]) + 1)
    if "lte" in bounds:
        upper = whole_number("range", field, bounds["lte"])
    if "lt" in bounds:
        upper = min(upper if upper is not None else 2**62, whole_number("range", field, bounds["lt"]) - 1)
    if lower is None and upper is None:
        return MatchAll()  # Elasticsearch: an unbounded range matches every document that has the field
    return Range(field, lower, upper)


def _match_all(clause: dict, budget: _Budget, depth: int) -> Node:
    _allowed("match_all", clause, ("boost",))
    return MatchAll()


def _match_none(clause: dict, budget: _Budget, depth: int) -> Node:
    return MatchNone()


def _ids(clause: dict, budget: _Budget, depth: int) -> Node:
    _allowed("ids", clause, ("values", "boost"))
    values = clause.get("values")
    if not isinstance(values, list) or len(values) > MAX_CLAUSES:
        raise UnsupportedQuery(f"[ids] takes a list of at most {MAX_CLAUSES} document ids")
    return keyword_node("ids", "doc_id", values)


def _query_string(clause: dict, budget: _Budget, depth: int) -> Node:
    return _lucene("query_string", clause, budget, depth, simple=False)


def _simple_query_string(clause: dict, budget: _Budget, depth: int) -> Node:
    return _lucene("simple_query_string", clause, budget, depth, simple=True)


_LUCENE_FUZZY = ("fuzziness", "fuzzy_prefix_length", "fuzzy_max_expansions", "fuzzy_transpositions")


def _lucene(kind: str, clause: dict, budget: _Budget, depth: int, simple: bool) -> Node:
    fuzzy_options = _LUCENE_FUZZY[1:] if simple else _LUCENE_FUZZY  # simple_query_string has no `fuzziness`
    _allowed(kind, clause, ("query", "fields", "default_field", "default_operator", "boost") + fuzzy_options)
    fields = clause.get("fields", clause.get("default_field"))
    if fields is not None:
        _text_field(kind, fields)
    operator = str(clause.get("default_operator", "or")).lower()
    if operator not in ("or", "and"):
        raise UnsupportedQuery(f"[{kind}] default_operator must be OR or AND, got {shortened(operator)}")
    # A word~ without a number takes query_string's fuzziness (default AUTO); simple_query_string's is 2 edits.
    given = clause.get("fuzziness")  # null as absent, as Elasticsearch reads it
    fuzzy = read_fuzziness_setting(kind, clause, _LUCENE_FUZZY, ("2" if simple else "AUTO") if given is None else given)
    return read_lucene(_text(kind, clause.get("query")), operator == "and", simple, budget, depth, kind, fuzzy)


_READERS = {
    "bool": _bool,
    "match": _match,
    "match_phrase": _match_phrase,
    "multi_match": _multi_match,
    "match_bool_prefix": _match_bool_prefix,
    "match_phrase_prefix": _match_phrase_prefix,
    "prefix": _prefix,
    "fuzzy": _fuzzy_query,
    "query_string": _query_string,
    "simple_query_string": _simple_query_string,
    "term": _term,
    "terms": _terms,
    "range": _range,
    "ids": _ids,
    "match_all": _match_all,
    "match_none": _match_none,
}
TEXT_CLAUSES = (
    "match",
    "match_phrase",
    "match_bool_prefix",
    "match_phrase_prefix",
    "multi_match",
    "query_string",
    "simple_query_string",
)


def query_text(query: Any) -> str:
    """The words the model scores: the text of the text clauses in ``query`` (never filters nor ``must_not``)."""
    return " ".join(_texts(query, 0))


def _texts(query: Any, depth: int) -> Iterator[str]:
    if not isinstance(query, dict) or depth > MAX_DEPTH:
        return
    for kind, clause in query.items():
        if not isinstance(clause, dict):
            continue
        if kind == "bool":
            for occur in ("must", "should"):
                value = clause.get(occur, [])
                for item in value if isinstance(value, list) else [value]:
                    yield from _texts(item, depth + 1)
        elif kind in ("match", "match_phrase", "match_bool_prefix", "match_phrase_prefix"):
            for value in clause.values():
                text = value.get("query") if isinstance(value, dict) else value
                if isinstance(text, str):
                    yield text
        elif kind in ("multi_match", "query_string", "simple_query_string"):
            text = clause.get("query")
            if isinstance(text, str):
                yield lucene_words(text, kind == "simple_query_string") if kind != "multi_match" else text
        elif kind in ("constant_score", "boosting", "function_score", "dis_max", "nested"):
            for key in ("filter", "positive", "query", "queries"):  # a wrapped query's text (not a filter's)
                if kind == "constant_score":
                    break
                value = clause.get(key)
                for item in value if isinstance(value, list) else [value]:
                    yield from _texts(item, depth + 1)
