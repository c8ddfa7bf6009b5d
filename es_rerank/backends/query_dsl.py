"""Elasticsearch's Query DSL, the part both backends read: a small tree of what a query asks (pure).

``read_query`` turns a request's ``query`` (or ``post_filter``) object into ``Node``s
the embedded backend translates to tantivy; whatever it cannot serve as Elasticsearch
would is an ``UnsupportedQuery`` that names the clause and the backend that serves it
(Elasticsearch), never a query quietly answered as another one. ``query_text`` reads
the words the model scores from the same object on either backend: the text of the
``match``, ``multi_match``, ``match_phrase``, ``match_phrase_prefix``,
``match_bool_prefix``, ``query_string`` and ``simple_query_string`` clauses in
``bool.must`` / ``should`` (never filter values, nor ``must_not``'s words).

The full-text clauses are read by ``full_text_queries`` (text is searched in ``text``,
title and abstract together; ``operator``, ``minimum_should_match``, phrases with
``slop``, and ``query_string`` syntax parsed by ``luqum``, a maintained parser of
Lucene's syntax, rather than by hand), the term-level ones by ``term_queries`` (keyword
filters on the metadata fields of the issue-26 contract), ``bool`` here with
Elasticsearch's rules (``should`` optional beside ``must``/``filter``, else one
required). Fuzzy words (``fuzziness``,
``fuzzy``, ``word~``) and prefixes (``prefix``, the ``bool_prefix`` and phrase-prefix
types) are read with Elasticsearch's options into ``Fuzzy``, ``PhrasePrefix`` and
``Pattern`` nodes, expanded over the index's words when searched (``term_expansion``).

Cost is bounded before anything runs: at most ``MAX_CLAUSES`` clauses and
``MAX_DEPTH`` levels of nesting per request; the tree read is then checked against the
request's ``QueryLimits`` (terms, sloppy phrases, wildcards: ``query_tree.check_cost``)
by the embedded backend before tantivy runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from es_rerank.backends.dsl_clauses import ClauseBudget, allowed, boost_of, minimum_should_match, one_clause
from es_rerank.backends.full_text_queries import FULL_TEXT_READERS
from es_rerank.backends.lucene_syntax import lucene_words
from es_rerank.backends.query_tree import (
    MAX_DEPTH,
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    Bool,
    Node,
    UnsupportedQuery,
    shortened,
)
from es_rerank.backends.term_queries import TERM_READERS


def read_query(query: Any) -> Node:
    """The tree of an Elasticsearch ``query`` object, or ``UnsupportedQuery`` naming what cannot be served."""
    return _read(query, ClauseBudget(), 0)


def _read(query: Any, budget: ClauseBudget, depth: int) -> Node:
    budget.spend(depth)
    kind, clause = one_clause(query, "query")
    reader = _READERS.get(kind)
    if reader is None:
        raise UnsupportedQuery(
            f"[{shortened(kind)}] queries are not served by the embedded backend, which reads "
            f"{', '.join(_READERS)}; they are {ON_ELASTICSEARCH}"
        )
    if not isinstance(clause, dict):
        raise UnsupportedQuery(f"[{kind}] must be an object, got {shortened(clause)}")
    return reader(clause, budget, depth)


def _bool(clause: dict, budget: ClauseBudget, depth: int) -> Node:
    allowed("bool", clause, ("must", "should", "filter", "must_not", "minimum_should_match", "boost"))
    parts: dict[str, tuple[Node, ...]] = {}
    for occur in ("must", "should", "filter", "must_not"):
        value = clause.get(occur, [])
        listed = value if isinstance(value, list) else [value]
        parts[occur] = tuple(_read(item, budget, depth + 1) for item in listed)
    default = 0 if parts["must"] or parts["filter"] else min(1, len(parts["should"]))
    required = minimum_should_match("bool", clause.get("minimum_should_match"), len(parts["should"]), default)
    return Bool(parts["must"], parts["should"], parts["filter"], parts["must_not"], required, boost_of("bool", clause))


_READERS = {"bool": _bool, **FULL_TEXT_READERS, **TERM_READERS}


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
        if kind in ("bool", "boosting", "function_score", "dis_max", "nested"):
            # a bool's must and should, a wrapped query's text (not a filter's; constant_score scores none)
            for key in ("must", "should") if kind == "bool" else ("filter", "positive", "query", "queries"):
                value = clause.get(key)
                for item in value if isinstance(value, list) else [value]:
                    yield from _texts(item, depth + 1)
        else:
            yield from _clause_text(kind, clause)


def _clause_text(kind: str, clause: dict) -> Iterator[str]:
    """The search text of one text clause (none for other clauses)."""
    if kind in ("match", "match_phrase", "match_bool_prefix", "match_phrase_prefix"):
        for value in clause.values():
            text = value.get("query") if isinstance(value, dict) else value
            if isinstance(text, str):
                yield text
    elif kind == "term":  # a term on a text field is scored by its word, as a match of it
        for field, value in clause.items():
            text = value.get("value") if isinstance(value, dict) else value
            if field in TEXT_FIELDS and isinstance(text, str):
                yield text
    elif kind in ("multi_match", "query_string", "simple_query_string"):
        text = clause.get("query")
        if isinstance(text, str):
            yield lucene_words(text, kind == "simple_query_string") if kind != "multi_match" else text
