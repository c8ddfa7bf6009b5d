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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from es_rerank.backends.query_tree import (
    AGGREGATABLE,
    NUMBER_FIELDS,
    ON_ELASTICSEARCH,
    Bool,
    MatchAll,
    Node,
    UnsupportedQuery,
    shortened,
)

METRICS = ("stats", "min", "max", "avg", "sum", "value_count", "cardinality")
BUCKETS = ("terms", "histogram", "filter", "filters")
KEYWORD_METRICS = ("value_count", "cardinality")  # the metrics of a keyword field; the rest read numbers
MAX_AGGREGATIONS = 100  # named aggregations in one request, nested ones included
MAX_SCOPES = 64  # filter and filters buckets of one request: each is one more search
ALL_TERMS = 65_000  # asked of tantivy for a terms aggregation: every term, ordered and cut here
TANTIVY_MAX_BUCKETS = 65_000  # tantivy's own bound on the buckets of one aggregation pass (AggregationLimits)
_OPTIONS = {
    "terms": ("field", "size", "order", "min_doc_count", "shard_size", "show_term_doc_count_error"),
    "histogram": ("field", "interval", "offset", "min_doc_count", "extended_bounds", "hard_bounds", "keyed"),
    "filters": ("filters", "other_bucket", "other_bucket_key"),
    **{metric: ("field",) for metric in METRICS},
}
_OPTIONS["cardinality"] = ("field", "precision_threshold")
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


@dataclass(frozen=True)
class AggregationPlan:
    """A request's aggregations: ``tantivy_request`` is asked of the query's documents, ``answer`` shapes tantivy's
    result as Elasticsearch answers and runs the filter buckets through ``run_scope`` (the documents of the query
    and the filters given: their count and tantivy's answer to a request)."""

    aggregations: tuple[Aggregation, ...]
    run_scope: ScopeRunner | None = field(default=None, compare=False)

    def __bool__(self) -> bool:
        return bool(self.aggregations)

    def __iter__(self):
        return iter(aggregation.name for aggregation in self.aggregations)

    def queries(self) -> tuple[Node, ...]:
        """The queries of its filter buckets (checked against the ``QueryLimits`` with the search's own)."""
        found: list[Node] = []
        stack = list(self.aggregations)
        while stack:
            aggregation = stack.pop()
            found.extend(query for _, query in aggregation.filters)
            stack.extend(aggregation.subs)
        return tuple(found)

    def tantivy_request(self) -> dict[str, Any]:
        """What tantivy is asked for the query's own documents (the aggregations outside any filter bucket)."""
        return _tantivy_request(self.aggregations)

    def answer(self, result: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``aggregations`` of Elasticsearch's answer, from tantivy's ``result`` for ``tantivy_request``."""
        return _shaped(self.aggregations, result or {}, (), self.run_scope)


def read_aggregations(
    aggs: Any, read_query: Callable[[Any], Node], facts: FieldFacts, max_buckets: int
) -> AggregationPlan:
    """The plan of a request's ``aggs``; ``UnsupportedQuery`` names what is not served, or the bucket limit passed."""
    counter = {"aggregations": 0, "scopes": 0}
    aggregations = _read_level(aggs, read_query, facts, counter, in_buckets=False, depth=0)
    buckets = _buckets(aggregations, facts)
    if buckets > max_buckets:
        raise UnsupportedQuery(
            f"Trying to create too many buckets. Must be less than or equal to: [{max_buckets}] but "
            f"was [{buckets}]. This limit can be set by changing the [search.max_buckets] cluster "
            f"level setting (here {MAX_BUCKETS_SETTING}={max_buckets}): ask for smaller terms sizes "
            "or wider histogram intervals"
        )
    inside = _tantivy_buckets(aggregations, facts)
    if inside > TANTIVY_MAX_BUCKETS:
        raise UnsupportedQuery(
            f"the aggregations would make up to {inside} buckets inside the embedded index, which "
            f"makes at most {TANTIVY_MAX_BUCKETS} per search (a terms aggregation holding another "
            "makes one for every value of its field before its size cuts them): nest fewer "
            "buckets (a field of fewer values outside, a wider histogram interval); such "
            f"aggregations are {ON_ELASTICSEARCH}"
        )
    return AggregationPlan(aggregations)


def _read_level(
    aggs: Any,
    read_query: Callable[[Any], Node],
    facts: FieldFacts,
    counter: dict[str, int],
    in_buckets: bool,
    depth: int,
) -> tuple[Aggregation, ...]:
    if not isinstance(aggs, dict):
        raise UnsupportedQuery(f"[aggs] must be an object of named aggregations, got {shortened(aggs)}")
    if depth > 5:
        raise UnsupportedQuery("[aggs] nest more than 5 levels deep; flatten them")
    read = []
    for name, spec in aggs.items():
        counter["aggregations"] += 1
        if counter["aggregations"] > MAX_AGGREGATIONS:
            raise UnsupportedQuery(f"[aggs] names more than {MAX_AGGREGATIONS} aggregations; ask for fewer")
        read.append(_read_one(str(name), spec, read_query, facts, counter, in_buckets, depth))
    return tuple(read)


def _read_one(
    name: str,
    spec: Any,
    read_query: Callable[[Any], Node],
    facts: FieldFacts,
    counter: dict[str, int],
    in_buckets: bool,
    depth: int,
) -> Aggregation:
    where = f"aggregation [{shortened(name)}]"
    kinds = [key for key in spec if key not in ("aggs", "aggregations", "meta")] if isinstance(spec, dict) else []
    if not isinstance(spec, dict) or len(kinds) != 1:
        raise UnsupportedQuery(
            f'{where} must name one aggregation type, as in {{"terms": {{"field": "year"}}}}, got {shortened(spec)}'
        )
    kind = kinds[0]
    if kind not in METRICS + BUCKETS:
        raise UnsupportedQuery(
            f"{where}: [{shortened(kind)}] aggregations are not served by the embedded backend, "
            f"which serves {', '.join(BUCKETS + METRICS)}; they are {ON_ELASTICSEARCH}"
        )
    body = spec[kind]
    sub_specs = spec.get("aggs", spec.get("aggregations"))
    if kind in METRICS and sub_specs:
        raise UnsupportedQuery(f"Aggregator [{shortened(name)}] of type [{kind}] cannot accept sub-aggregations")
    if kind in ("filter", "filters"):
        if in_buckets:
            raise UnsupportedQuery(
                f"{where}: a [{kind}] aggregation under a terms or histogram bucket is not served by "
                "the embedded backend (each bucket would be one more search); put it at the top "
                f"or in another filter; it is {ON_ELASTICSEARCH}"
            )
        return _read_filters(name, kind, body, spec.get("meta"), sub_specs, read_query, facts, counter, depth)
    if not isinstance(body, dict):
        raise UnsupportedQuery(f"{where}: [{kind}] must be an object, got {shortened(body)}")
    unknown = next((key for key in body if key not in _OPTIONS[kind]), None)
    if unknown is not None:
        raise UnsupportedQuery(
            f"{where}: [{kind}] option [{shortened(unknown)}] is not served by the embedded "
            f"backend (it reads {', '.join(_OPTIONS[kind])}); it is {ON_ELASTICSEARCH}"
        )
    _check_field(where, kind, body.get("field"), facts)
    options = (
        _terms_options(where, body)
        if kind == "terms"
        else (_histogram_options(where, body) if kind == "histogram" else {"field": body["field"]})
    )
    subs = _read_level(sub_specs, read_query, facts, counter, True, depth + 1) if sub_specs else ()
    if kind == "terms":
        _check_order(where, options["order"], subs)
        if options["min_doc_count"] == 0 and subs:
            raise UnsupportedQuery(
                f"{where}: min_doc_count 0 with sub-aggregations is not served by the embedded "
                f"backend; it is {ON_ELASTICSEARCH}"
            )
        if options["min_doc_count"] == 0:  # every value of the index, those the query misses counted 0
            options["values"] = facts.values.get(options["field"], ())
    return Aggregation(name, kind, options, subs, meta=spec.get("meta"))


def _check_field(where: str, kind: str, name: Any, facts: FieldFacts) -> None:
    numeric = kind not in ("terms",) + KEYWORD_METRICS
    fields = NUMBER_FIELDS if numeric else AGGREGATABLE
    if name not in fields:
        raise UnsupportedQuery(
            f"{where}: [{kind}] on [{shortened(name)}] is not served by the embedded backend, which "
            f"reads {'the number field' if numeric else 'the fields'} {', '.join(fields)} there; it "
            f"is {ON_ELASTICSEARCH}"
        )
    if name not in facts.aggregatable:
        raise UnsupportedQuery(
            f"{where}: this index version was built before [{name}] could be aggregated; rebuild it "
            "(`esrr index build`) to aggregate on it"
        )


def _whole(where: str, name: str, value: Any, lowest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise UnsupportedQuery(f"{where}: [{name}] must be a whole number of at least {lowest}, got {shortened(value)}")
    return value


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnsupportedQuery(f"{where}: [{name}] must be a number, got {shortened(value)}")
    return float(value)


def _terms_options(where: str, body: Mapping[str, Any]) -> dict[str, Any]:
    order = body.get("order", [{"_count": "desc"}])
    listed = order if isinstance(order, list) else [order]
    keys = []
    for item in listed:
        if not isinstance(item, dict) or len(item) != 1:
            raise UnsupportedQuery(
                f'{where}: [order] takes objects such as {{"_count": "desc"}}, got {shortened(order)}'
            )
        ((path, direction),) = item.items()
        if direction not in ("asc", "desc"):
            raise UnsupportedQuery(f"{where}: [order] direction must be asc or desc, got {shortened(direction)}")
        keys.append(("_key" if path == "_term" else str(path), direction))
    return {
        "field": body["field"],
        "size": _whole(where, "size", body.get("size", 10), 1),
        "min_doc_count": _whole(where, "min_doc_count", body.get("min_doc_count", 1), 0),
        "order": tuple(keys),
    }


def _check_order(where: str, order: tuple[tuple[str, str], ...], subs: tuple[Aggregation, ...]) -> None:
    metrics = {sub.name: sub for sub in subs if sub.kind in METRICS}
    for path, _ in order:
        if path in ("_count", "_key"):
            continue
        name, _, statistic = path.partition(".")
        sub = metrics.get(name)
        valid = sub is not None and (
            statistic in ("count", "min", "max", "avg", "sum") if sub.kind == "stats" else not statistic
        )
        if not valid:
            raise UnsupportedQuery(
                f"{where}: [order] by [{shortened(path)}]: the embedded backend orders by _count, "
                "_key or a metric sub-aggregation (avg_year, or stats_year.max); name one of them"
            )


def _histogram_options(where: str, body: Mapping[str, Any]) -> dict[str, Any]:
    interval = _number(where, "interval", body.get("interval"))
    if interval <= 0:
        raise UnsupportedQuery(f"{where}: [interval] must be greater than 0 for histogram aggregation, got {interval}")
    options: dict[str, Any] = {
        "field": body["field"],
        "interval": interval,
        "offset": _number(where, "offset", body.get("offset", 0)),
        "min_doc_count": _whole(where, "min_doc_count", body.get("min_doc_count", 0), 0),
        "keyed": body.get("keyed", False),
    }
    if not isinstance(options["keyed"], bool):
        raise UnsupportedQuery(f"{where}: [keyed] must be true or false")
    for name in ("extended_bounds", "hard_bounds"):
        bounds = body.get(name)
        if bounds is not None:
            if not isinstance(bounds, dict) or set(bounds) - {"min", "max"}:
                raise UnsupportedQuery(f'{where}: [{name}] must be an object such as {{"min": 1990, "max": 2020}}')
            options[name] = {key: _number(where, f"{name}.{key}", value) for key, value in bounds.items()}
    return options


def _read_filters(
    name: str,
    kind: str,
    body: Any,
    meta: Any,
    sub_specs: Any,
    read_query: Callable[[Any], Node],
    facts: FieldFacts,
    counter: dict[str, int],
    depth: int,
) -> Aggregation:
    where = f"aggregation [{shortened(name)}]"
    other = None
    if kind == "filter":
        filters: tuple[tuple[str | None, Node], ...] = (("", read_query(body)),)
    else:
        if not isinstance(body, dict) or "filters" not in body:
            raise UnsupportedQuery(
                f'{where}: [filters] must hold its filters, as in {{"filters": {{"filters": '
                '{"reviews": {"term": {"publication_types": "Review"}}}}}}'
            )
        unknown = next((key for key in body if key not in _OPTIONS["filters"]), None)
        if unknown is not None:
            raise UnsupportedQuery(
                f"{where}: [filters] option [{shortened(unknown)}] is not served by the embedded "
                f"backend; it is {ON_ELASTICSEARCH}"
            )
        listed = body["filters"]
        if isinstance(listed, dict):
            filters = tuple((str(key), read_query(query)) for key, query in listed.items())
        elif isinstance(listed, list):
            filters = tuple((None, read_query(query)) for query in listed)
        else:
            raise UnsupportedQuery(f"{where}: [filters] takes an object or a list of queries")
        if body.get("other_bucket") or body.get("other_bucket_key") is not None:
            other = str(body.get("other_bucket_key") or "_other_")
    counter["scopes"] += len(filters) + (other is not None)
    if counter["scopes"] > MAX_SCOPES:
        raise UnsupportedQuery(
            f"[aggs] hold more than {MAX_SCOPES} filter buckets (each one more search here); ask for fewer"
        )
    subs = _read_level(sub_specs, read_query, facts, counter, False, depth + 1) if sub_specs else ()
    return Aggregation(
        name, kind, {"keyed": kind == "filters" and isinstance(body["filters"], dict)}, subs, filters, other, meta
    )


def _buckets(aggregations: tuple[Aggregation, ...], facts: FieldFacts, around: int = 1) -> int:
    """The buckets ``aggregations`` may make inside ``around`` buckets, as Elasticsearch counts them."""
    total = 0
    for aggregation in aggregations:
        options = aggregation.options
        if aggregation.kind == "terms":
            made = min(options["size"], max(facts.distinct(options["field"]), 1))
        elif aggregation.kind == "histogram":
            made = _histogram_buckets(options, facts.year_span)
        elif aggregation.kind == "filters":
            made = len(aggregation.filters) + (aggregation.other is not None)
        else:
            made = 1 if aggregation.kind == "filter" else 0
        total += around * made + _buckets(aggregation.subs, facts, around * max(made, 1))
    return total


def _tantivy_buckets(aggregations: tuple[Aggregation, ...], facts: FieldFacts, around: int = 1) -> int:
    """The most buckets tantivy makes in one pass for ``aggregations`` inside ``around`` buckets: every value of a
    terms field (cut to ``size`` afterwards, here), every histogram bucket; a filter bucket's aggregations are a pass
    of their own, the largest one counted."""
    total = own_passes = 0
    for aggregation in aggregations:
        if not aggregation.native:
            own_passes = max(own_passes, _tantivy_buckets(aggregation.subs, facts))
            continue
        options = aggregation.options
        made = 0
        if aggregation.kind == "terms":
            made = min(facts.distinct(options["field"]), ALL_TERMS)
        elif aggregation.kind == "histogram":
            made = _histogram_buckets(options, facts.year_span)
        total += around * made + _tantivy_buckets(aggregation.subs, facts, around * max(made, 1))
    return max(total, own_passes)


def _histogram_buckets(options: Mapping[str, Any], span: tuple[int, int] | None) -> int:
    low, high = span if span is not None else (0, 0)
    if "extended_bounds" in options:
        low = min(low, options["extended_bounds"].get("min", low))
        high = max(high, options["extended_bounds"].get("max", high))
    if "hard_bounds" in options:
        low = max(low, options["hard_bounds"].get("min", low))
        high = min(high, options["hard_bounds"].get("max", high))
    if span is None and "extended_bounds" not in options or high < low:
        return 0
    count = (high - low) / options["interval"] + 1
    return int(min(count, 2**62))


def _tantivy_request(aggregations: tuple[Aggregation, ...]) -> dict[str, Any]:
    request = {}
    for aggregation in aggregations:
        if not aggregation.native:
            continue
        options = aggregation.options
        if aggregation.kind == "terms":
            body: dict[str, Any] = {"terms": {"field": options["field"], "size": ALL_TERMS, "min_doc_count": 1}}
        elif aggregation.kind == "histogram":
            inner = {
                key: options[key]
                for key in ("field", "interval", "offset", "min_doc_count", "extended_bounds", "hard_bounds")
                if key in options
            }
            body = {"histogram": inner}
        else:
            body = {aggregation.kind: {"field": options["field"]}}
        if aggregation.subs:
            body["aggs"] = _tantivy_request(aggregation.subs)
        request[aggregation.name] = body
    return request


def _shaped(
    aggregations: tuple[Aggregation, ...],
    result: Mapping[str, Any],
    scope: tuple[Node, ...],
    run_scope: ScopeRunner | None,
) -> dict[str, Any]:
    """Elasticsearch's answer to ``aggregations`` over the documents of ``scope`` (filters beside the query), from
    tantivy's ``result`` for their native part."""
    shaped = {}
    for aggregation in aggregations:
        if aggregation.native:
            answer = _shaped_native(aggregation, result.get(aggregation.name) or {})
        else:
            answer = _shaped_filters(aggregation, scope, run_scope)
        if aggregation.meta is not None:
            answer["meta"] = aggregation.meta
        shaped[aggregation.name] = answer
    return shaped


def _shaped_filters(aggregation: Aggregation, scope: tuple[Node, ...], run_scope: ScopeRunner | None) -> dict[str, Any]:
    buckets: list[tuple[str | None, dict[str, Any]]] = []
    scopes = [(key, scope + (query,)) for key, query in aggregation.filters]
    if aggregation.other is not None:
        scopes.append(
            (
                aggregation.other,
                scope + (Bool(must=(MatchAll(),), must_not=tuple(query for _, query in aggregation.filters)),),
            )
        )
    for key, inner in scopes:
        count, result = run_scope(inner, _tantivy_request(aggregation.subs)) if run_scope is not None else (0, {})
        buckets.append((key, {"doc_count": count, **_shaped(aggregation.subs, result, inner, run_scope)}))
    if aggregation.kind == "filter":
        return buckets[0][1]
    if aggregation.options["keyed"]:
        return {"buckets": {key: bucket for key, bucket in buckets}}
    return {"buckets": [bucket for _, bucket in buckets]}


def _shaped_native(aggregation: Aggregation, result: Mapping[str, Any]) -> dict[str, Any]:
    kind, options = aggregation.kind, aggregation.options
    if kind == "terms":
        return _shaped_terms(aggregation, result)
    if kind == "histogram":
        buckets = [
            {
                "key": float(bucket["key"]),
                "doc_count": int(bucket["doc_count"]),
                **_shaped_subs(aggregation.subs, bucket),
            }
            for bucket in result.get("buckets", [])
        ]
        buckets.sort(key=lambda bucket: bucket["key"])
        if options["keyed"]:
            return {"buckets": {str(bucket["key"]): bucket for bucket in buckets}}
        return {"buckets": buckets}
    if kind == "stats":
        count = int(result.get("count") or 0)
        return {
            "count": count,
            "min": result.get("min") if count else None,
            "max": result.get("max") if count else None,
            "avg": result.get("avg") if count else None,
            "sum": float(result.get("sum") or 0.0),
        }
    value = result.get("value")
    if kind in ("value_count", "cardinality"):
        return {"value": int(value or 0)}
    if kind == "sum":
        return {"value": float(value or 0.0)}
    return {"value": value}  # min, max, avg: null over no document, as in Elasticsearch


def _shaped_subs(subs: tuple[Aggregation, ...], bucket: Mapping[str, Any]) -> dict[str, Any]:
    return {sub.name: _shaped_native(sub, bucket.get(sub.name) or {}) for sub in subs}


def _shaped_terms(aggregation: Aggregation, result: Mapping[str, Any]) -> dict[str, Any]:
    options = aggregation.options
    numeric = options["field"] in NUMBER_FIELDS
    buckets = [
        {
            "key": int(bucket["key"]) if numeric else bucket["key"],
            "doc_count": int(bucket["doc_count"]),
            **_shaped_subs(aggregation.subs, bucket),
        }
        for bucket in result.get("buckets", [])
    ]
    buckets = [bucket for bucket in buckets if bucket["doc_count"] >= max(options["min_doc_count"], 1)]
    if options["min_doc_count"] == 0:
        found = {bucket["key"] for bucket in buckets}
        buckets += [{"key": value, "doc_count": 0} for value in options.get("values", ()) if value not in found]
    buckets.sort(key=_order_key(options["order"]))
    shown = buckets[: options["size"]]
    return {
        "doc_count_error_upper_bound": 0,
        "sum_other_doc_count": sum(b["doc_count"] for b in buckets[len(shown) :]),
        "buckets": shown,
    }


def _order_key(order: tuple[tuple[str, str], ...]) -> Callable[[Mapping[str, Any]], tuple]:
    """The sort key of terms buckets for ``order``, ties broken by ascending key as Elasticsearch breaks them."""

    def value(bucket: Mapping[str, Any], path: str) -> Any:
        if path in ("_count", "_key"):
            return bucket["doc_count" if path == "_count" else "key"]
        name, _, statistic = path.partition(".")
        return bucket[name].get(statistic or "value")

    def key(bucket: Mapping[str, Any]) -> tuple:
        parts = []
        for path, direction in (*order, ("_key", "asc")):
            found = value(bucket, path)
            missing = found is None  # a metric over no document sorts last either way, as in Elasticsearch
            parts.append(
                (missing, _Reversed(found) if direction == "desc" and not missing else found if not missing else 0)
            )
        return tuple(parts)

    return key


class _Reversed:
    """A value that sorts in the opposite order (descending keys of any type, numbers or strings)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Reversed) -> bool:
        return other.value < self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and other.value == self.value
