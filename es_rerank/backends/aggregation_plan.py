"""The plan of a request's aggregations: what tantivy is asked, and its answer shaped as Elasticsearch's, the filter
buckets searched one by one (see ``aggregations`` for what is served)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from es_rerank.backends.aggregations import ALL_TERMS, Aggregation, ScopeRunner
from es_rerank.backends.query_tree import NUMBER_FIELDS, Bool, MatchAll, Node


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
        return _native_request(self.aggregations)

    def answer(self, result: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``aggregations`` of Elasticsearch's answer, from tantivy's ``result`` for ``tantivy_request``."""
        return _shaped(self.aggregations, result or {}, (), self.run_scope)


def _native_request(aggregations: tuple[Aggregation, ...]) -> dict[str, Any]:
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
            body["aggs"] = _native_request(aggregation.subs)
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
        count, result = run_scope(inner, _native_request(aggregation.subs)) if run_scope is not None else (0, {})
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
