"""The Query DSL's full-text queries read into the tree (pure): ``match``, ``match_phrase``, ``multi_match``,
``match_bool_prefix``, ``match_phrase_prefix``, ``query_string`` and ``simple_query_string``.

Text is searched in ``text`` (title and abstract together, tokenized by
``es_rerank.text.tokenize``): a clause naming ``text``, ``title`` and ``abstract`` together,
``*`` or ``_all`` searches it; one naming ``title`` or ``abstract`` alone searches that field.
``operator`` and ``minimum_should_match`` (a count, a percentage, negative forms), phrases
with ``slop``, fuzzy words and prefixes keep Elasticsearch's semantics; ``query_string``
syntax is parsed by ``luqum`` (``lucene_syntax``).
"""

from __future__ import annotations

from typing import Any

from es_rerank.backends.dsl_clauses import (
    ClauseBudget,
    allowed,
    boost_of,
    minimum_should_match,
    one_field,
    search_text,
    slop_of,
)
from es_rerank.backends.lucene_syntax import read_lucene  # luqum builds its parser tables at import
from es_rerank.backends.query_tree import (
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    WHOLE_TEXT,
    Bool,
    Fuzziness,
    MatchNone,
    Node,
    PhrasePrefix,
    UnsupportedQuery,
    Words,
    expansions,
    phrase_node,
    prefix_pattern,
    read_fuzziness,
    shortened,
)
from es_rerank.text import tokenize


def text_field(kind: str, fields: Any) -> str:
    """The field a text clause searches: ``text`` (title and abstract together: named, both named, ``*`` or
    ``_all``), or ``title`` or ``abstract`` alone; other sets of fields are refused."""
    listed = [fields] if isinstance(fields, str) else fields
    if not isinstance(listed, list) or not listed or not all(isinstance(name, str) for name in listed):
        raise UnsupportedQuery(f"[{kind}] fields must be a field name or a list of them, got {shortened(fields)}")
    names = {name.split("^")[0] for name in listed}  # a boost ("title^2") does not change what is searched
    if names in WHOLE_TEXT:
        return "text"
    if len(names) == 1 and names <= set(TEXT_FIELDS):
        return next(iter(names))
    raise UnsupportedQuery(
        f"[{kind}] on {shortened(sorted(names))}: the embedded backend searches title and abstract "
        "together (the field 'text', or title and abstract both named) or each alone; "
        f"a search of other fields is {ON_ELASTICSEARCH}"
    )


def _words(
    kind: str,
    text: str,
    operator: Any,
    minimum: Any,
    boost: float,
    *,
    field: str,
    fuzzy: Fuzziness | None = None,
    prefix_last: bool = False,
) -> Node:
    """A match's words in ``field``: each a clause (fuzzy with ``fuzzy``; the last a prefix with ``prefix_last``, as
    match_bool_prefix), at least one of them required, all with operator and, or ``minimum_should_match``."""
    tokens = tokenize(text)
    if not tokens:
        return MatchNone()
    if operator not in (None, "or", "OR", "and", "AND"):
        raise UnsupportedQuery(f'[{kind}] operator must be "or" or "and", got {shortened(operator)}')
    words = tuple(dict.fromkeys(tokens[:-1] if prefix_last else tokens))
    count = len(words) + prefix_last
    required = count if operator in ("and", "AND") else max(1, minimum_should_match(kind, minimum, count, 1))
    if fuzzy is None and not prefix_last:
        return Words(words, required, boost, field)
    clauses = tuple(
        fuzzy.word(kind, token, field=field) if fuzzy is not None else Words((token,), 1, field=field)
        for token in words
    )
    if prefix_last:  # as Elasticsearch: the last word is a prefix query, never fuzzy
        clauses += (prefix_pattern(tokens[-1], field),)
    return Bool(should=clauses, required_should=required, boost=boost)


_FUZZY_OPTIONS = ("fuzziness", "prefix_length", "max_expansions", "fuzzy_transpositions")


def _fuzzy(kind: str, clause: dict) -> Fuzziness | None:
    return read_fuzziness(kind, clause, _FUZZY_OPTIONS)


def _match(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    name, value = one_field("match", clause)
    field = text_field("match", name)
    if not isinstance(value, dict):
        return _words("match", search_text("match", value), None, None, 1.0, field=field)
    allowed("match", value, ("query", "operator", "minimum_should_match", "boost") + _FUZZY_OPTIONS)
    return _words(
        "match",
        search_text("match", value.get("query")),
        value.get("operator"),
        value.get("minimum_should_match"),
        boost_of("match", value),
        field=field,
        fuzzy=_fuzzy("match", value),
    )


def _match_bool_prefix(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    name, value = one_field("match_bool_prefix", clause)
    field = text_field("match_bool_prefix", name)
    if not isinstance(value, dict):
        text = search_text("match_bool_prefix", value)
        return _words("match_bool_prefix", text, None, None, 1.0, field=field, prefix_last=True)
    allowed("match_bool_prefix", value, ("query", "operator", "minimum_should_match", "boost") + _FUZZY_OPTIONS)
    return _words(
        "match_bool_prefix",
        search_text("match_bool_prefix", value.get("query")),
        value.get("operator"),
        value.get("minimum_should_match"),
        boost_of("match_bool_prefix", value),
        field=field,
        fuzzy=_fuzzy("match_bool_prefix", value),
        prefix_last=True,
    )


def _phrase_prefix(text: str, slop: int, max_expansions: int, boost: float, field: str) -> Node:
    tokens = tuple(tokenize(text))
    return PhrasePrefix(tokens, slop, max_expansions, boost, field) if tokens else MatchNone()


def _match_phrase_prefix(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    kind = "match_phrase_prefix"
    name, value = one_field(kind, clause)
    field = text_field(kind, name)
    if not isinstance(value, dict):
        return _phrase_prefix(search_text(kind, value), 0, expansions(kind, {}), 1.0, field)
    allowed(kind, value, ("query", "slop", "max_expansions", "boost"))
    return _phrase_prefix(
        search_text(kind, value.get("query")),
        slop_of(kind, value.get("slop", 0)),
        expansions(kind, value),
        boost_of(kind, value),
        field,
    )


def _match_phrase(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    name, value = one_field("match_phrase", clause)
    field = text_field("match_phrase", name)
    if not isinstance(value, dict):
        return phrase_node(tokenize(search_text("match_phrase", value)), 0, 1.0, field)
    allowed("match_phrase", value, ("query", "slop", "boost"))
    return phrase_node(
        tokenize(search_text("match_phrase", value.get("query"))),
        slop_of("match_phrase", value.get("slop", 0)),
        boost_of("match_phrase", value),
        field,
    )


_MULTI_MATCH_TYPES = ("best_fields", "most_fields", "cross_fields", "phrase", "phrase_prefix", "bool_prefix")


def _multi_match(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    # tie_breaker weighs the fields other than the best one; the embedded index searches one: it changes nothing.
    allowed(
        "multi_match",
        clause,
        ("query", "fields", "type", "operator", "minimum_should_match", "slop", "boost", "tie_breaker")
        + _FUZZY_OPTIONS,
    )
    fields = clause.get("fields", ["*"])
    field = text_field("multi_match", fields)
    kind = clause.get("type", "best_fields")
    text = search_text("multi_match", clause.get("query"))
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
        slop = slop_of("multi_match", clause.get("slop", 0))
        return phrase_node(tokenize(text), slop, boost_of("multi_match", clause), field)
    if kind == "phrase_prefix":
        return _phrase_prefix(
            text,
            slop_of("multi_match", clause.get("slop", 0)),
            expansions("multi_match", clause),
            boost_of("multi_match", clause),
            field,
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
        boost_of("multi_match", clause),
        field=field,
        fuzzy=fuzzy,
        prefix_last=kind == "bool_prefix",
    )


def _query_string(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    return _lucene("query_string", clause, budget, depth, simple=False)


def _simple_query_string(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    return _lucene("simple_query_string", clause, budget, depth, simple=True)


_LUCENE_FUZZY = ("fuzziness", "fuzzy_prefix_length", "fuzzy_max_expansions", "fuzzy_transpositions")


def _lucene(kind: str, clause: dict, budget: ClauseBudget, depth: int, simple: bool) -> Node:
    fuzzy_options = _LUCENE_FUZZY[1:] if simple else _LUCENE_FUZZY  # simple_query_string has no `fuzziness`
    allowed(kind, clause, ("query", "fields", "default_field", "default_operator", "boost") + fuzzy_options)
    fields = clause.get("fields", clause.get("default_field"))
    field = text_field(kind, fields) if fields is not None else "text"
    operator = str(clause.get("default_operator", "or")).lower()
    if operator not in ("or", "and"):
        raise UnsupportedQuery(f"[{kind}] default_operator must be OR or AND, got {shortened(operator)}")
    # A word~ without a number takes query_string's fuzziness (default AUTO); simple_query_string's is 2 edits.
    fuzzy = read_fuzziness(kind, {"fuzziness": "2" if simple else "AUTO", **clause}, _LUCENE_FUZZY)
    text = search_text(kind, clause.get("query"))
    return read_lucene(text, operator == "and", simple, budget, depth, kind=kind, fuzzy=fuzzy, field=field)


FULL_TEXT_READERS = {
    "match": _match,
    "match_phrase": _match_phrase,
    "multi_match": _multi_match,
    "match_bool_prefix": _match_bool_prefix,
    "match_phrase_prefix": _match_phrase_prefix,
    "query_string": _query_string,
    "simple_query_string": _simple_query_string,
}
