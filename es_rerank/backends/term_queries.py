"""The Query DSL's term-level queries read into the tree (pure): ``term``, ``terms``, ``range``, ``ids``, ``prefix``,
``fuzzy``, ``match_all`` and ``match_none``; keyword filters work on the metadata fields of the issue-26 contract,
values searched as written (not analysed), as in Elasticsearch."""

from __future__ import annotations

from typing import Any

from es_rerank.backends.dsl_clauses import ClauseBudget, allowed, boost_of, one_field, search_text
from es_rerank.backends.full_text_queries import text_field
from es_rerank.backends.query_tree import (
    KEYWORD_FIELDS,
    MAX_CLAUSES,
    NUMBER_FIELDS,
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    Bool,
    MatchAll,
    MatchNone,
    Node,
    Range,
    UnsupportedQuery,
    Words,
    keyword_node,
    prefix_pattern,
    read_fuzziness,
    shortened,
    whole_number,
)


def _term_field(kind: str, field: Any) -> str:
    """The field of a term-level query on text (``prefix``, ``fuzzy``): a text field, or a keyword field."""
    if field in KEYWORD_FIELDS:
        return field
    return text_field(kind, field)


def _prefix(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    field, value = one_field("prefix", clause)
    options = value if isinstance(value, dict) else {"value": value}
    allowed("prefix", options, ("value", "boost", "case_insensitive", "rewrite"))
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
        search_text("prefix", options.get("value")),
        _term_field("prefix", field),
        options.get("case_insensitive", False),
    )
    boost = boost_of("prefix", options)
    return pattern if boost == 1.0 else Bool(must=(pattern,), boost=boost)


def _fuzzy_query(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    field, value = one_field("fuzzy", clause)
    options = value if isinstance(value, dict) else {"value": value}
    allowed(
        "fuzzy",
        options,
        ("value", "fuzziness", "prefix_length", "max_expansions", "transpositions", "boost", "rewrite"),
    )
    searched = _term_field("fuzzy", field)
    if searched not in TEXT_FIELDS:
        raise UnsupportedQuery(
            f"[fuzzy] on [{shortened(field)}] is not served by the embedded backend, which "
            f"searches fuzzy words in {', '.join(TEXT_FIELDS)}; it is {ON_ELASTICSEARCH}"
        )
    fuzzy = read_fuzziness(
        "fuzzy", {"fuzziness": "AUTO", **options}, ("fuzziness", "prefix_length", "max_expansions", "transpositions")
    )
    assert fuzzy is not None
    # Term-level: the word is searched as written, not analysed (as Elasticsearch's fuzzy query).
    return fuzzy.word("fuzzy", search_text("fuzzy", options.get("value")), boost_of("fuzzy", options), searched)


def _term(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    field, value = one_field("term", clause)
    options = value if isinstance(value, dict) else {"value": value}
    allowed("term", options, ("value", "boost"))
    value = options.get("value")
    if field in TEXT_FIELDS:
        # A term on a text field finds the token as written (not analysed) and scores it by BM25, as Elasticsearch.
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise UnsupportedQuery(f"[term] on [{field}] takes a string, got {shortened(value)}")
        return Words((str(value),), 1, boost_of("term", options), field)
    return keyword_node("term", field, [value])


def _terms(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    fields = {key: value for key, value in clause.items() if key != "boost"}
    field, values = one_field("terms", fields)
    if not isinstance(values, list):
        raise UnsupportedQuery(
            f"[terms] on [{shortened(field)}] takes a list of values (a terms lookup is "
            f"{ON_ELASTICSEARCH}), got {shortened(values)}"
        )
    if len(values) > MAX_CLAUSES:
        raise UnsupportedQuery(f"[terms] lists {len(values)} values; at most {MAX_CLAUSES} are read")
    return keyword_node("terms", field, values)


def _range(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    field, bounds = one_field("range", clause)
    if field not in NUMBER_FIELDS:
        raise UnsupportedQuery(
            f"[range] on [{shortened(field)}] is not served by the embedded backend, which reads "
            f"ranges of {', '.join(NUMBER_FIELDS)}; it is {ON_ELASTICSEARCH}"
        )
    if not isinstance(bounds, dict):
        raise UnsupportedQuery(f'[range] on [{field}] must be an object such as {{"gte": 2000, "lte": 2010}}')
    allowed("range", bounds, ("gte", "gt", "lte", "lt", "boost"))
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


def _match_all(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    allowed("match_all", clause, ("boost",))
    return MatchAll()


def _match_none(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    return MatchNone()


def _ids(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    allowed("ids", clause, ("values", "boost"))
    values = clause.get("values")
    if not isinstance(values, list) or len(values) > MAX_CLAUSES:
        raise UnsupportedQuery(f"[ids] takes a list of at most {MAX_CLAUSES} document ids")
    return keyword_node("ids", "doc_id", values)


TERM_READERS = {
    "prefix": _prefix,
    "fuzzy": _fuzzy_query,
    "term": _term,
    "terms": _terms,
    "range": _range,
    "ids": _ids,
    "match_all": _match_all,
    "match_none": _match_none,
}
