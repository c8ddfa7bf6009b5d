"""A search body read for the embedded backend: what it asks checked and weighed before tantivy runs, its
tantivy query built on first use (``EmbeddedSearch``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import tantivy

from es_rerank.backends.aggregation_plan import AggregationPlan
from es_rerank.backends.aggregation_reading import read_aggregations
from es_rerank.backends.aggregations import FieldFacts
from es_rerank.backends.base import QueryRefused
from es_rerank.backends.highlight import FieldHighlight, SourceFilter, read_highlight, read_source_filter
from es_rerank.backends.query_dsl import read_query
from es_rerank.backends.query_tree import (
    ON_ELASTICSEARCH,
    TEXT_FIELDS,
    Bool,
    Fuzzy,
    MatchAll,
    Node,
    Pattern,
    Phrase,
    PhrasePrefix,
    QueryCost,
    UnsupportedQuery,
    Words,
    active_limits,
    check_cost,
)
from es_rerank.backends.sorting import BY_SCORE, SortKey, by_score_alone, read_search_after, read_sort

# timeout: a search here is answered whole, never cut short, so it changes nothing (the gateway checks its value).
BODY_KEYS = (
    "query",
    "post_filter",
    "aggs",
    "aggregations",
    "track_total_hits",
    "_source",
    "highlight",
    "timeout",
    "sort",
    "search_after",
    "track_scores",
)
DEFAULT_TOTAL_LIMIT = 10_000  # Elasticsearch counts hits exactly up to 10,000 unless track_total_hits says otherwise


@dataclass(frozen=True)
class EmbeddedSearch:
    """A search body checked for tantivy (``EmbeddedBackend.prepare``); translated on first use.

    Reading a query and weighing its ``cost`` is cheap; building its tantivy query is not
    (a wildcard's automaton takes milliseconds, holding the GIL), so the gateway weighs the
    search first (its heavy lane) and the translation waits for the search itself.
    """

    tree: Node  # the query's tree
    post_filter: Node | None
    translate: Callable[[Node], tantivy.Query]  # the backend's translation of a tree
    cost: QueryCost  # what the query and its post_filter ask of the index (checked against the QueryLimits)
    aggs: AggregationPlan | None
    total_limit: int | None  # hits counted exactly up to this; None: not counted (track_total_hits false)
    source: SourceFilter | None  # _source includes, excludes; None: no _source
    highlight: tuple[FieldHighlight, ...]
    words: frozenset[str]  # the text clauses' words, which the highlight marks
    sort: tuple[SortKey, ...] | None = None  # None: by descending score (sorting.py)
    search_after: tuple[Any, ...] | None = None  # the sort values the hits come strictly after
    track_scores: bool = False  # show _score on a sort that does not include it

    @cached_property
    def aggs_query(self) -> tantivy.Query:
        """Without the post_filter: what the aggregations count, as in Elasticsearch."""
        return self.translate(self.tree)

    @cached_property
    def query(self) -> tantivy.Query:
        """The query with the post_filter: what the hits match."""
        if self.post_filter is None:
            return self.aggs_query
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, self.aggs_query),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(self.translate(self.post_filter), 0.0)),
            ]
        )


def read_search(
    body: Mapping[str, Any],
    translate: Callable[[Node], tantivy.Query],
    facts: FieldFacts,
    search_scope: Callable[[Node, tuple[Node, ...], Mapping[str, Any]], tuple[int, Mapping[str, Any]]],
    searched: tuple[str, ...] = ("text",),
) -> EmbeddedSearch:
    """A search body checked against what the embedded backend serves and the ``active_limits()`` in force
    (``QueryRefused`` names what passes them); ``search_scope(tree, filters, request)`` searches an aggregation's
    filter bucket; ``searched`` names the text fields the index holds (an older build: ``text`` alone)."""
    unknown = next((key for key in body if key not in BODY_KEYS), None)
    if unknown is not None:
        raise QueryRefused(
            f"[{str(unknown)[:40]}] in the search body is not served by the embedded backend, "
            f"which reads {', '.join(BODY_KEYS)} (and size, from, ext); it is {ON_ELASTICSEARCH}"
        )
    aggs = body.get("aggs", body.get("aggregations"))
    try:
        tree = read_query(body["query"]) if body.get("query") is not None else MatchAll()
        post_filter = read_query(body["post_filter"]) if body.get("post_filter") is not None else None
        plan = None
        if aggs is not None:
            plan = read_aggregations(aggs, read_query, facts, active_limits().max_buckets)
            plan = replace(plan, run_scope=functools.partial(search_scope, tree))
        # The query, its post_filter and the aggregations' filters: one budget (QueryLimits), before tantivy runs.
        queries = (tree,) + ((post_filter,) if post_filter is not None else ()) + (plan.queries() if plan else ())
        cost = check_cost(Bool(must=queries), active_limits())
        _check_fields(queries, searched)
    except UnsupportedQuery as error:
        raise QueryRefused(str(error)) from None
    sort, search_after = _read_order(body)
    if not isinstance(body.get("track_scores", False), bool):
        raise QueryRefused(f"[track_scores] must be true or false, got {str(body['track_scores'])[:40]}")
    return EmbeddedSearch(
        tree,
        post_filter,
        translate,
        cost,
        plan,
        _total_limit(body.get("track_total_hits")),
        read_source_filter(body.get("_source")),
        read_highlight(body["highlight"]) if body.get("highlight") is not None else (),
        frozenset(_words(tree)),
        sort,
        search_after,
        bool(body.get("track_scores", False)),
    )


def _read_order(body: Mapping[str, Any]) -> tuple[tuple[SortKey, ...] | None, tuple[Any, ...] | None]:
    """The body's ``sort`` (None: by descending score) and the ``search_after`` values."""
    sort = read_sort(body["sort"]) if body.get("sort") is not None else None
    search_after = None
    if body.get("search_after") is not None:
        search_after = read_search_after(body["search_after"], sort or BY_SCORE)
        sort = sort or BY_SCORE
    if sort is not None and by_score_alone(sort) and search_after is None:
        sort = None  # the default order
    return sort, search_after


def _check_fields(nodes: tuple[Node, ...], searched: tuple[str, ...]) -> None:
    """Refuse a text field the index version does not hold (``title`` or ``abstract`` alone in a version built before
    they were indexed), naming the rebuild that adds it."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, Bool):
            stack.extend((*node.must, *node.should, *node.filter, *node.must_not))
        elif isinstance(node, (Words, Phrase, Fuzzy, PhrasePrefix, Pattern)) and node.field in TEXT_FIELDS:
            if node.field not in searched:
                raise UnsupportedQuery(
                    f"[{node.field}] cannot be searched alone in this index version, built before title and "
                    "abstract were indexed each on its own; rebuild the index (`esrr index build`) to search "
                    f"[{node.field}] alone, or search [text] (title and abstract together) meanwhile"
                )


def _words(node: Node) -> set[str]:
    """The words of the text clauses a highlight marks (not those of must_not)."""
    if isinstance(node, (Words, Phrase)):
        return set(node.tokens)
    if isinstance(node, Fuzzy):
        return {node.token}
    if isinstance(node, PhrasePrefix):
        return set(node.tokens[:-1])
    if isinstance(node, Bool):
        return set().union(*(_words(child) for child in (*node.must, *node.should)))
    return set()


def _total_limit(track: Any) -> int | None:
    """Up to how many hits the total is exact: ``track_total_hits`` true (all), false (none: None), or a number."""
    if track is None:
        return DEFAULT_TOTAL_LIMIT
    if track is True:
        return 2**62
    if track is False:
        return None
    if isinstance(track, int) and track >= 0:
        return track
    raise QueryRefused(f"[track_total_hits] must be true, false or a whole number, got {str(track)[:40]}")
