"""Elasticsearch's aggregations on the embedded index's metadata fields, read, bounded and answered in its shapes.

Served: ``terms`` (``size``, ``order`` by ``_count``, ``_key`` or a metric sub-aggregation,
``min_doc_count``), ``histogram`` (``interval``, ``offset``, ``min_doc_count``,
``extended_bounds``, ``hard_bounds``, ``keyed``), ``filter`` and ``filters`` (what
elasticsearch-dsl's ``FacetedSearch`` sends: a filter per facet around its terms), and the
metrics ``stats``, ``min``, ``max``, ``avg``, ``sum``, ``value_count`` and ``cardinality``,
with sub-aggregations, on ``year`` (every kind) and the keyword fields ``journal``,
``publication_types`` and ``mesh`` (``terms``, ``value_count``, ``cardinality``).

``read_aggregations`` is pure: it checks a request's ``aggs`` and refuses, before any
work, a request whose buckets could pass ``max_buckets`` (Elasticsearch's
``search.max_buckets``, the gateway's ``ESRR_GATEWAY_MAX_BUCKETS``), counted as
Elasticsearch counts them: each terms aggregation's size (no more than its field holds
values), each histogram's span over its interval, each filters aggregation's filters,
times the buckets they sit in. tantivy's aggregations answer terms, histograms and metrics
(every term fetched and ordered here, so that equal counts are cut as Elasticsearch cuts
them: by key); a ``filter`` or ``filters`` bucket is one more search of the query and its
filter (at most ``MAX_SCOPES`` per request), and may hold any aggregation, but sits only at
the top or in another filter bucket (not under terms or a histogram, whose every bucket
would be a search).

Here the model; ``aggregation_reading`` reads and bounds a request (``read_aggregations``),
``aggregation_plan`` asks tantivy and shapes its answer (``AggregationPlan``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from es_rerank.backends.query_tree import (
    AGGREGATABLE,
    Node,
)

METRICS = ("stats", "min", "max", "avg", "sum", "value_count", "cardinality")
BUCKETS = ("terms", "histogram", "filter", "filters")
KEYWORD_METRICS = ("value_count", "cardinality")  # the metrics of a keyword field; the rest read numbers
MAX_AGGREGATIONS = 100  # named aggregations in one request, nested ones included
MAX_SCOPES = 64  # filter and filters buckets of one request: each is one more search
ALL_TERMS = 65_000  # asked of tantivy for a terms aggregation: every term, ordered and cut here
TANTIVY_MAX_BUCKETS = 65_000  # tantivy's own bound on the buckets of one aggregation pass (AggregationLimits)
MAX_BUCKETS_SETTING = "ESRR_GATEWAY_MAX_BUCKETS"


@dataclass(frozen=True)
class FieldFacts:
    """What the served index holds of the aggregatable fields: each one's values (a terms aggregation's zero-count
    buckets, ``min_doc_count`` 0), the span of ``year``, and the fields aggregatable in this version (built with
    them as fast fields)."""

    values: Mapping[str, tuple[Any, ...]]
    year_span: tuple[int, int] | None  # lowest and highest year; None where no document has one
    aggregatable: tuple[str, ...] = AGGREGATABLE

    def distinct(self, name: str) -> int:
        """How many distinct values ``name`` holds in the index."""
        return len(self.values.get(name, ()))


@dataclass(frozen=True)
class Aggregation:
    """One named aggregation of a request, read and checked."""

    name: str
    kind: str
    options: Mapping[str, Any]
    subs: tuple[Aggregation, ...] = ()
    filters: tuple[tuple[str | None, Node], ...] = ()  # filter / filters: (bucket key, query); None: a list's
    other: str | None = None  # filters: the key of the bucket of documents no filter matches
    meta: Any = None

    @property
    def native(self) -> bool:
        """Whether tantivy answers it (and every sub-aggregation) in one pass over the documents."""
        return self.kind not in ("filter", "filters") and all(sub.native for sub in self.subs)


ScopeRunner = Callable[[tuple[Node, ...], Mapping[str, Any]], tuple[int, Mapping[str, Any]]]
