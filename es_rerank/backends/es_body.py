"""The rewrites the Elasticsearch backend makes to a search body and to an answer: ``text`` matches as the
title-or-abstract query, and esrr's own fields left out of ``_source``."""

from __future__ import annotations

from typing import Any

from es_rerank.backends.es_layout import INTERNAL_FIELDS, TEXT_FIELD


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
