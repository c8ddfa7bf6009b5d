"""A query tree (``query_tree``) as the tantivy query that scores it as Elasticsearch would: BM25 sums of the
words, constant scores for patterns and filters, nothing for a bool's ``filter``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

import tantivy

from es_rerank.backends.base import QueryRefused
from es_rerank.backends.query_tree import (
    MAX_SHOULD_EXPANSION,
    ON_ELASTICSEARCH,
    Bool,
    Fuzzy,
    Keyword,
    MatchAll,
    MatchNone,
    Node,
    Pattern,
    Phrase,
    PhrasePrefix,
    Range,
    Words,
    shortened,
)
from es_rerank.backends.term_expansion import TermDictionary, fuzzy_query, phrase_prefix_query


@dataclass(frozen=True)
class TantivyTranslation:
    """Translates query trees against one index's ``schema``; ``words(field)`` gives the words of a text field (read
    on first need), which fuzzy words and a phrase's prefix expand to."""

    schema: tantivy.Schema
    words: Callable[[str], TermDictionary]

    def __call__(self, node: Node) -> tantivy.Query:
        """The tantivy query of one node, scored as Elasticsearch scores it (BM25 sums; filters score nothing)."""
        schema, Query = self.schema, tantivy.Query
        if isinstance(node, Words):
            # In sorted order: tantivy sums the terms' scores in the order given, and a float sum's last bit depends
            # on it (then a tie at the window's edge); every search of the same words scores the same.
            terms = [Query.term_query(schema, node.field, token) for token in sorted(node.tokens)]
            return _boosted(at_least(terms, node.required), node.boost)
        if isinstance(node, Phrase):
            return _boosted(Query.phrase_query(schema, node.field, list(node.tokens), node.slop), node.boost)
        if isinstance(node, Fuzzy):
            return fuzzy_query(schema, node.field, self.words(node.field), node)
        if isinstance(node, PhrasePrefix):
            return phrase_prefix_query(schema, node.field, self.words(node.field), node)
        if isinstance(node, Pattern):
            return self._pattern(node)
        if isinstance(node, Keyword):
            return self._keyword(node)
        if isinstance(node, Range):
            return Query.const_score_query(
                Query.range_query(schema, node.field, tantivy.FieldType.Integer, node.lower, node.upper), 1.0
            )
        if isinstance(node, MatchAll):
            return Query.all_query()
        if isinstance(node, MatchNone):
            return Query.empty_query()
        return self._bool(node)

    def _pattern(self, node: Pattern) -> tantivy.Query:
        try:
            pattern = tantivy.Query.regex_query(self.schema, node.field, node.regex)
        except ValueError as error:  # tantivy's automaton over its size limit, or a regex it cannot read
            raise QueryRefused(
                f"the wildcard {shortened(node.wildcard)!r} cannot be searched here "
                f"({str(error)[:120]}); use fewer ? and * in it"
            ) from None
        return tantivy.Query.const_score_query(pattern, 1.0)

    def _keyword(self, node: Keyword) -> tantivy.Query:
        Query = tantivy.Query
        if node.field == "year":
            query = Query.boolean_query(
                [
                    (
                        tantivy.Occur.Should,
                        Query.range_query(self.schema, "year", tantivy.FieldType.Integer, value, value),
                    )
                    for value in node.values
                ]
            )
        else:
            query = Query.term_set_query(self.schema, node.field, list(node.values))
        return Query.const_score_query(query, 1.0)

    def _bool(self, node: Bool) -> tantivy.Query:
        Query, Occur = tantivy.Query, tantivy.Occur
        clauses = [(Occur.Must, self(child)) for child in node.must]
        clauses += [(Occur.Must, Query.const_score_query(self(child), 0.0)) for child in node.filter]
        clauses += [(Occur.MustNot, self(child)) for child in node.must_not]
        should = [self(child) for child in node.should]
        positive = bool(node.must or node.filter)
        if should and (node.required_should == 0 or (node.required_should == 1 and not positive)):
            clauses += [(Occur.Should, query) for query in should]  # optional beside must/filter, else one needed
        elif should:
            clauses.append((Occur.Must, at_least(should, node.required_should)))
        if not any(occur != Occur.MustNot for occur, _ in clauses):
            # Only exclusions (or nothing): every other document, as Elasticsearch's bool makes it.
            clauses.append(
                (Occur.Must, Query.all_query() if not clauses else Query.const_score_query(Query.all_query(), 0.0))
            )
        return _boosted(Query.boolean_query(clauses), node.boost)


def _boosted(query: tantivy.Query, boost: float) -> tantivy.Query:
    return query if boost == 1.0 else tantivy.Query.boost_query(query, boost)


def at_least(queries: list[tantivy.Query], required: int) -> tantivy.Query:
    """Documents matching at least ``required`` of ``queries``, scored by the sum of those they match.

    tantivy's boolean query has no minimum-should-match, so a count between one and all
    is the disjunction of every ``required``-sized conjunction (scoring nothing) beside the
    optional clauses that score; refused above ``MAX_SHOULD_EXPANSION`` conjunctions.
    """
    Query, Occur = tantivy.Query, tantivy.Occur
    if required <= 1:
        return Query.boolean_query([(Occur.Should, query) for query in queries])
    if required >= len(queries):
        return Query.boolean_query([(Occur.Must, query) for query in queries])
    if math.comb(len(queries), required) > MAX_SHOULD_EXPANSION:
        raise QueryRefused(
            f"minimum_should_match of {required} out of {len(queries)} clauses is more than the "
            f"embedded backend expands ({MAX_SHOULD_EXPANSION} combinations); it is {ON_ELASTICSEARCH}"
        )
    enough = Query.boolean_query(
        [
            (Occur.Should, Query.boolean_query([(Occur.Must, queries[i]) for i in chosen]))
            for chosen in combinations(range(len(queries)), required)
        ]
    )
    return Query.boolean_query(
        [(Occur.Must, Query.const_score_query(enough, 0.0))] + [(Occur.Should, query) for query in queries]
    )
