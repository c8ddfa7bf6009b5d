"""The final ranking as an Elasticsearch ``_search`` response body, so existing ES clients can read it.

It lives with the ranking, not the gateway, because two rooms render it: the gateway's
``_search`` and ``esrr search --json``, which must not import the web layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from es_rerank.backends.base import FirstStage
from es_rerank.ranking.merge import RankedHit


def search_response(
    ranked: Sequence[RankedHit],
    index: str,
    took_ms: int,
    retrieved: int,
    depth: int,
    ranker: str,
    fallback: str | None = None,
    shown: Sequence[Mapping[str, Any]] | None = None,
    first_stage: FirstStage | None = None,
    skipped: str | None = None,
    explain: bool = False,
    max_score: float | None = None,
) -> dict[str, Any]:
    """An ES 8 ``_search`` body for ``ranked`` (already cut to the hits shown).

    ``retrieved`` hits came back from a first stage asked for ``depth``; when it returned
    all it was asked for, more may match, so the total is a lower bound ("gte"), as ES
    reports a capped count. ``took_ms`` is the time from the first-stage search to the
    final order. Each hit's ``_score`` is ``RankedHit.score`` (the same on every page,
    never negative: ``merge``), its ``fields`` carry its BM25 score and whether the ranker
    reordered it (never in a fallback answer, where no model scored it);
    ``max_score`` is the whole result's (its first hit's, from the ranking), not the
    page's: the page's own when not given (a whole ranking); ``esrr.ranker`` names what made ``_score``, and
    ``esrr.fallback``, when present, why the model did not score the query, and
    ``esrr.skipped`` why reranking was skipped on purpose.

    ``shown`` (one entry per hit, from ``SearchBackend.page``) gives each hit's
    ``_source``, ``highlight`` and ``fields`` as the request asked; without it a hit's
    ``_source`` is its id and title. ``first_stage``, the backend's answer to a search
    body, gives the total, aggregations and shards as the backend reported them;
    ``explain`` adds each hit's ``_explanation`` (first-stage and model scores).
    """
    scores = [float(item.score) for item in ranked]
    shown = (
        shown
        if shown is not None
        else [{"_source": {"doc_id": item.hit.doc_id, "title": item.hit.title}} for item in ranked]
    )
    hits = []
    for item, score, extra in zip(ranked, scores, shown):
        hit: dict[str, Any] = {"_index": index, "_id": item.hit.doc_id, "_score": score}
        hit.update((key, value) for key, value in extra.items() if key != "fields")
        hit["fields"] = {
            **extra.get("fields", {}),
            "bm25_score": [float(item.hit.score)],
            "reranked": [item.reranked and not fallback],
        }
        if explain:
            hit["_explanation"] = _explanation(item, score)
        hits.append(hit)
    if first_stage is None:
        total: Mapping[str, Any] | None = {"value": retrieved, "relation": "gte" if retrieved >= depth else "eq"}
    else:
        total = first_stage.total
    esrr: dict[str, Any] = {
        "ranker": ranker,
        **({"fallback": fallback} if fallback else {}),
        **({"skipped": skipped} if skipped else {}),
    }
    response: dict[str, Any] = {
        "took": took_ms,
        "timed_out": bool(first_stage.timed_out) if first_stage is not None else False,
    }
    if first_stage is not None and first_stage.shards is not None:
        response["_shards"] = first_stage.shards
    response["hits"] = {
        **({"total": total} if total is not None else {}),
        "max_score": max_score if max_score is not None else max(scores, default=None),
        "hits": hits,
    }
    if first_stage is not None and first_stage.aggregations is not None:
        response["aggregations"] = first_stage.aggregations
    response["esrr"] = esrr
    return response


def _explanation(item: RankedHit, score: float) -> dict[str, Any]:
    """Elasticsearch's ``_explanation`` shape: the final score from the first stage's and the model's."""
    details = [{"value": float(item.hit.score), "description": "first-stage score (BM25)", "details": []}]
    if item.model_score is not None:
        details.append({"value": float(item.model_score), "description": "model score", "details": []})
    if item.combined is not None:
        details.append({"value": float(item.combined), "description": "the window's combined score", "details": []})
    description = (
        "reranked: the window's combined score, lifted one point above the window's lowest BM25 score"
        if item.reranked
        else "not reranked: the first-stage score (below the window, in its order)"
    )
    return {"value": float(score), "description": description, "details": details}
