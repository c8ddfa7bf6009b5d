"""The rewrites the Elasticsearch backend makes to a search body and to an answer: ``text`` matches as the
title-or-abstract query, esrr's own fields left out of ``_source``, and ``text`` shown where it is asked for."""

from __future__ import annotations

from typing import Any

from es_rerank.backends.base import QueryRefused
from es_rerank.backends.es_layout import INTERNAL_FIELDS, TEXT_FIELD
from es_rerank.backends.highlight import SEARCHED_TEXT, SourceFilter, read_source_filter, with_searched_text


def without_internal_fields(response: dict) -> dict:
    """A search response with the fields esrr keeps for itself (``text``, the term ids) left out of each hit."""
    for hit in response.get("hits", {}).get("hits", []):
        if isinstance(hit.get("_source"), dict):
            for name in INTERNAL_FIELDS:
                hit["_source"].pop(name, None)
    return response


def source_without_internal(source: Any) -> Any:
    """A ``_source`` request that leaves out the fields esrr keeps for itself (``text``, the term ids)."""
    if source is False or source is None:
        return source
    if source is True:
        return {"excludes": INTERNAL_FIELDS}
    if isinstance(source, (str, list)):
        return {"includes": [source] if isinstance(source, str) else source, "excludes": INTERNAL_FIELDS}
    if isinstance(source, dict):
        excludes = source.get("excludes", source.get("exclude", []))
        excludes = [excludes] if isinstance(excludes, str) else list(excludes) if isinstance(excludes, list) else []
        rest = {key: value for key, value in source.items() if key not in ("excludes", "exclude")}
        return {**rest, "excludes": excludes + INTERNAL_FIELDS}
    return source  # Elasticsearch names what is wrong with it


_DEPTH = 32


def on_text(query: Any, depth: int = 0) -> Any:
    """``query`` with each ``match`` on ``text`` that asks for any word made the title-or-abstract query (the
    same documents, per-field scores); everything else as it was."""
    if depth > _DEPTH or not isinstance(query, dict):
        return query
    rewritten = {}
    for kind, clause in query.items():
        if kind == "match" and isinstance(clause, dict) and len(clause) == 1 and TEXT_FIELD in clause:
            value = clause[TEXT_FIELD]
            options = value if isinstance(value, dict) else {"query": value}
            if set(options) <= {"query", "boost"} or (
                set(options) <= {"query", "boost", "operator"} and str(options.get("operator", "or")).lower() == "or"
            ):
                should = [{"match": {field: {"query": options.get("query")}}} for field in ("title", "abstract")]
                rewritten["bool"] = {"should": should, **({"boost": options["boost"]} if "boost" in options else {})}
                continue
        if kind == "bool" and isinstance(clause, dict):
            clause = {
                occur: (
                    [on_text(item, depth + 1) for item in value]
                    if isinstance(value, list)
                    else on_text(value, depth + 1)
                )
                if occur in ("must", "should", "filter", "must_not")
                else value
                for occur, value in clause.items()
            }
        rewritten[kind] = clause
    return rewritten


def widened_source(spec: Any) -> tuple[Any, SourceFilter | None]:
    """``spec`` as asked of Elasticsearch, and where it names ``text`` among its includes, the filter that shows
    ``text`` (title and abstract joined, as the embedded backend shows it: RAG libraries read the field they searched
    from ``_source``) once title and abstract are fetched with it; ``text`` itself is indexed only, never stored."""
    try:
        patterns = read_source_filter(spec)
    except QueryRefused:  # Elasticsearch names what is wrong with it
        return spec, None
    if patterns is None or SEARCHED_TEXT not in patterns.includes or not patterns.keeps(SEARCHED_TEXT):
        return spec, None
    return {"includes": [*patterns.includes, "title", "abstract"], "excludes": list(patterns.excludes)}, patterns


def with_text(response_hits: list[dict], patterns: SourceFilter | None) -> None:
    """Each hit's ``_source`` with ``text`` added (``widened_source``), title and abstract left where not asked."""
    if patterns is None:
        return
    for hit in response_hits:
        source = hit.get("_source")
        if isinstance(source, dict):
            shown = dict(with_searched_text(source, patterns))
            hit["_source"] = {
                name: value for name, value in shown.items() if name not in _FETCHED or patterns.keeps(name)
            }


_FETCHED = ("title", "abstract")  # fetched to make `text`, shown only where the request asks for them
