"""A request's ``aggs`` read and checked against what the embedded backend serves, and bounded before any work:
its buckets counted as Elasticsearch counts them against ``max_buckets``, and as tantivy makes them (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from es_rerank.backends.aggregation_plan import AggregationPlan
from es_rerank.backends.aggregations import (
    ALL_TERMS,
    BUCKETS,
    KEYWORD_METRICS,
    MAX_AGGREGATIONS,
    MAX_BUCKETS_SETTING,
    MAX_SCOPES,
    METRICS,
    TANTIVY_MAX_BUCKETS,
    Aggregation,
    FieldFacts,
)
from es_rerank.backends.query_tree import (
    AGGREGATABLE,
    NUMBER_FIELDS,
    ON_ELASTICSEARCH,
    Node,
    UnsupportedQuery,
    shortened,
)

OPTIONS = {
    "terms": ("field", "size", "order", "min_doc_count", "shard_size", "show_term_doc_count_error"),
    "histogram": ("field", "interval", "offset", "min_doc_count", "extended_bounds", "hard_bounds", "keyed"),
    "filters": ("filters", "other_bucket", "other_bucket_key"),
    **{metric: ("field",) for metric in METRICS},
}
OPTIONS["cardinality"] = ("field", "precision_threshold")


@dataclass
class _Reading:
    """What reading one request's aggregations needs throughout: its query reader, the index's field facts, and
    how many aggregations and filter buckets it has read so far."""

    read_query: Callable[[Any], Node]
    facts: FieldFacts
    aggregations: int = 0
    scopes: int = 0


def read_aggregations(
    aggs: Any, read_query: Callable[[Any], Node], facts: FieldFacts, max_buckets: int
) -> AggregationPlan:
    """The plan of a request's ``aggs``; ``UnsupportedQuery`` names what is not served, or the bucket limit passed."""
    aggregations = _read_level(aggs, _Reading(read_query, facts), in_buckets=False, depth=0)
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


def _read_level(aggs: Any, reading: _Reading, in_buckets: bool, depth: int) -> tuple[Aggregation, ...]:
    if not isinstance(aggs, dict):
        raise UnsupportedQuery(f"[aggs] must be an object of named aggregations, got {shortened(aggs)}")
    if depth > 5:
        raise UnsupportedQuery("[aggs] nest more than 5 levels deep; flatten them")
    read = []
    for name, spec in aggs.items():
        reading.aggregations += 1
        if reading.aggregations > MAX_AGGREGATIONS:
            raise UnsupportedQuery(f"[aggs] names more than {MAX_AGGREGATIONS} aggregations; ask for fewer")
        read.append(_read_one(str(name), spec, reading, in_buckets, depth))
    return tuple(read)


def _read_one(name: str, spec: Any, reading: _Reading, in_buckets: bool, depth: int) -> Aggregation:
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
        return _read_filters(name, kind, spec, reading, depth)
    if not isinstance(body, dict):
        raise UnsupportedQuery(f"{where}: [{kind}] must be an object, got {shortened(body)}")
    unknown = next((key for key in body if key not in OPTIONS[kind]), None)
    if unknown is not None:
        raise UnsupportedQuery(
            f"{where}: [{kind}] option [{shortened(unknown)}] is not served by the embedded "
            f"backend (it reads {', '.join(OPTIONS[kind])}); it is {ON_ELASTICSEARCH}"
        )
    _check_field(where, kind, body.get("field"), reading.facts)
    options = (
        _terms_options(where, body)
        if kind == "terms"
        else (_histogram_options(where, body) if kind == "histogram" else {"field": body["field"]})
    )
    subs = _read_level(sub_specs, reading, True, depth + 1) if sub_specs else ()
    if kind == "terms":
        _check_order(where, options["order"], subs)
        if options["min_doc_count"] == 0 and subs:
            raise UnsupportedQuery(
                f"{where}: min_doc_count 0 with sub-aggregations is not served by the embedded "
                f"backend; it is {ON_ELASTICSEARCH}"
            )
        if options["min_doc_count"] == 0:  # every value of the index, those the query misses counted 0
            options["values"] = reading.facts.values.get(options["field"], ())
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


def _read_filters(name: str, kind: str, spec: Mapping[str, Any], reading: _Reading, depth: int) -> Aggregation:
    """A ``filter`` or ``filters`` aggregation: each filter bucket one more search, at most ``MAX_SCOPES``."""
    where = f"aggregation [{shortened(name)}]"
    body, read_query = spec[kind], reading.read_query
    other = None
    if kind == "filter":
        filters: tuple[tuple[str | None, Node], ...] = (("", read_query(body)),)
    else:
        if not isinstance(body, dict) or "filters" not in body:
            raise UnsupportedQuery(
                f'{where}: [filters] must hold its filters, as in {{"filters": {{"filters": '
                '{"reviews": {"term": {"publication_types": "Review"}}}}}}'
            )
        unknown = next((key for key in body if key not in OPTIONS["filters"]), None)
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
    reading.scopes += len(filters) + (other is not None)
    if reading.scopes > MAX_SCOPES:
        raise UnsupportedQuery(
            f"[aggs] hold more than {MAX_SCOPES} filter buckets (each one more search here); ask for fewer"
        )
    sub_specs = spec.get("aggs", spec.get("aggregations"))
    subs = _read_level(sub_specs, reading, False, depth + 1) if sub_specs else ()
    keyed = kind == "filters" and isinstance(body["filters"], dict)
    return Aggregation(name, kind, {"keyed": keyed}, subs, filters, other, spec.get("meta"))


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
