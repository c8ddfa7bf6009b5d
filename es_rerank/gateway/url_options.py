"""The URL parameters of Elasticsearch's read APIs that shape an answer or change nothing here (pure).

``typed_keys`` names each aggregation ``<type>#<name>`` as Elasticsearch does (the type
from the request's aggregation and the served mapping's field type: ``sterms`` on a
keyword, ``lterms`` on an integer); ``rest_total_hits_as_int`` answers ``hits.total`` as
a number (-1 when the request does not count). The others choose shards, caches,
reduction batches or how index names resolve; the gateway serves one index of one
shard, written once per build, so each is checked for a value Elasticsearch would take
and changes nothing (``timeout`` too: a search here is answered whole, never timed out).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from es_rerank.gateway.errors import BadSearchRequest, excerpt

FORMAT_PARAMETERS = ("filter_path", "pretty", "human", "error_trace")  # how an answer is written
BOOLEAN_PARAMETERS = (
    "request_cache",
    "ignore_unavailable",
    "allow_no_indices",
    "ccs_minimize_roundtrips",
    "allow_partial_search_results",
    "typed_keys",
    "rest_total_hits_as_int",
)
COUNT_PARAMETERS = ("batched_reduce_size", "max_concurrent_shard_requests", "pre_filter_shard_size")
UNCHANGING_PARAMETERS = (
    "request_cache",
    "preference",
    "routing",
    "timeout",
    "search_type",
    "ignore_unavailable",
    "allow_no_indices",
    "expand_wildcards",
    "batched_reduce_size",
    "ccs_minimize_roundtrips",
    "max_concurrent_shard_requests",
    "pre_filter_shard_size",
    "allow_partial_search_results",
)
SHAPING_PARAMETERS = ("typed_keys", "rest_total_hits_as_int")
SEARCH_TYPES = ("query_then_fetch", "dfs_query_then_fetch")  # one shard: both score with the same statistics
WILDCARD_STATES = ("open", "closed", "hidden", "none", "all")
_TIME_VALUE = re.compile(r"-1|0|[0-9]{1,12}(?:nanos|micros|ms|s|m|h|d)")
_TERMS_TYPES = {
    "keyword": "sterms",
    "text": "sterms",
    "ip": "sterms",
    "boolean": "lterms",
    "date": "lterms",
    "long": "lterms",
    "integer": "lterms",
    "short": "lterms",
    "byte": "lterms",
    "unsigned_long": "lterms",
    "double": "dterms",
    "float": "dterms",
    "half_float": "dterms",
    "scaled_float": "dterms",
}
_TYPE_NAMES = {"percentiles": "tdigest_percentiles", "percentile_ranks": "tdigest_percentile_ranks"}


def check_url_options(params: Mapping[str, str]) -> None:
    """A 400 naming the first accepted-and-unchanging or shaping parameter whose value Elasticsearch would refuse."""
    for name in BOOLEAN_PARAMETERS:
        if name in params:
            flag(params, name)
    for name in COUNT_PARAMETERS:
        if name in params and not re.fullmatch(r"[1-9][0-9]{0,9}", params[name]):
            raise BadSearchRequest(f"[{name}] must be a whole number of at least 1, got {excerpt(params[name])}")
    if "search_type" in params and params["search_type"] not in SEARCH_TYPES:
        raise BadSearchRequest(
            f"No search type for [{excerpt(params['search_type'])}]; send one of {', '.join(SEARCH_TYPES)}"
        )
    if "timeout" in params:
        check_time_value("timeout", params["timeout"])
    if "expand_wildcards" in params:
        states = [state.strip() for state in params["expand_wildcards"].split(",")]
        unknown = next((state for state in states if state not in WILDCARD_STATES), None)
        if unknown is not None:
            raise BadSearchRequest(
                f"No valid expand wildcard value [{excerpt(unknown)}]; send one or more of {', '.join(WILDCARD_STATES)}"
            )


def check_time_value(name: str, value: Any) -> None:
    """A 400 unless ``value`` is a time value Elasticsearch reads (``30s``, ``500ms``, ``-1``)."""
    if not isinstance(value, str) or not _TIME_VALUE.fullmatch(value):
        raise BadSearchRequest(f"[{name}] must be a time value such as 30s or 500ms, got {excerpt(value)}")


def flag(params: Mapping[str, str], name: str) -> bool:
    """A boolean URL parameter as Elasticsearch reads it: ``true``, ``false``, or empty for true; absent is false."""
    value = params.get(name)
    if value is None:
        return False
    if value in ("", "true"):
        return True
    if value == "false":
        return False
    raise BadSearchRequest(
        f"Failed to parse value [{excerpt(value)}] of [{name}] as only [true] or [false] are allowed"
    )


def total_as_number(response: dict[str, Any]) -> dict[str, Any]:
    """``response`` with ``hits.total`` as a number, as ``rest_total_hits_as_int`` asks (-1 when not counted)."""
    hits = response.get("hits")
    if isinstance(hits, dict):
        total = hits.get("total")
        hits["total"] = total["value"] if isinstance(total, dict) else -1
    return response


def typed_aggregations(answered: Any, asked: Any, field_types: Mapping[str, str]) -> Any:
    """The ``aggregations`` of an answer with each named ``<type>#<name>``, sub-aggregations too, as
    ``typed_keys`` asks; ``asked`` is the request's ``aggs``, ``field_types`` the mapping's type per field."""
    if not isinstance(answered, dict) or not isinstance(asked, dict):
        return answered
    typed: dict[str, Any] = {}
    for name, result in answered.items():
        spec = asked.get(name)
        if not isinstance(spec, dict):
            typed[name] = result
            continue
        kind = next((key for key in spec if key not in ("aggs", "aggregations", "meta")), None)
        typed[f"{_type_name(kind, spec.get(kind), field_types)}#{name}"] = _typed_inside(
            result, spec.get("aggs", spec.get("aggregations")), field_types
        )
    return typed


def field_types(properties: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Each field of a mapping's ``properties`` (objects and multi-fields as dotted names) and its type."""
    types: dict[str, str] = {}
    for name, mapping in properties.items():
        if not isinstance(mapping, dict):
            continue
        path = f"{prefix}{name}"
        if "type" in mapping:
            types[path] = mapping["type"]
        for inner in ("properties", "fields"):
            if isinstance(mapping.get(inner), dict):
                types.update(field_types(mapping[inner], f"{path}."))
    return types


def _type_name(kind: str | None, body: Any, types: Mapping[str, str]) -> str:
    if kind in ("terms", "significant_terms", "rare_terms"):
        field = body.get("field") if isinstance(body, dict) else None
        terms = _TERMS_TYPES.get(types.get(field, "keyword") if isinstance(field, str) else "keyword", "sterms")
        return {"terms": terms, "significant_terms": f"sig{terms}", "rare_terms": f"{terms[0]}rareterms"}[kind]
    return _TYPE_NAMES.get(kind or "", kind or "unknown")


def _typed_inside(result: Any, asked: Any, types: Mapping[str, str]) -> Any:
    """An aggregation's result with its sub-aggregations typed, in each bucket (a list or keyed) or in itself."""
    if not isinstance(asked, dict) or not isinstance(result, dict):
        return result
    buckets = result.get("buckets")
    if isinstance(buckets, list):
        return {**result, "buckets": [_typed_bucket(bucket, asked, types) for bucket in buckets]}
    if isinstance(buckets, dict):
        return {**result, "buckets": {key: _typed_bucket(bucket, asked, types) for key, bucket in buckets.items()}}
    return _typed_bucket(result, asked, types)


def _typed_bucket(bucket: Any, asked: Mapping[str, Any], types: Mapping[str, str]) -> Any:
    if not isinstance(bucket, dict):
        return bucket
    named = {name: bucket[name] for name in asked if name in bucket}
    typed = typed_aggregations(named, asked, types)
    return {**{key: value for key, value in bucket.items() if key not in named}, **typed}
