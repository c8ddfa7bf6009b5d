"""The final ranking as an Elasticsearch ``_search`` response body, so existing ES clients can read it.

It lives with the ranking, not the gateway, because two rooms render it: the gateway's
``_search`` and ``esrr search --json``, which must not import the web layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from es_rerank.backends.base import FirstStage
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.request import Skipped


@dataclass(frozen=True)
class ResponseContent:
    """What one ``_search`` response shows: the hits of the page, where they came from and what ranked them.

    ``ranked`` is already cut to the hits shown. ``retrieved`` hits came back from a first stage asked for
    ``depth``. ``took_ms`` is the time from the first-stage search to the final order. ``fallback`` says why the
    model did not score the query, ``skipped`` why reranking was skipped on purpose. ``shown`` (one entry per hit,
    from ``SearchBackend.page``) gives each hit's ``_source``, ``highlight`` and ``fields`` as the request asked;
    ``first_stage`` is the backend's answer to the search body; ``explain`` adds each hit's ``_explanation``;
    ``max_score`` is the whole result's (its first hit's), None for the page's own.
    """

    ranked: Sequence[RankedHit]
    index: str
    ranker: str
    retrieved: int
    depth: int
    took_ms: int = 0
    fallback: str | None = None
    skipped: Skipped | None = None
    shown: Sequence[Mapping[str, Any]] | None = None
    first_stage: FirstStage | None = None
    explain: bool = False
    max_score: float | None = None


def search_response(content: ResponseContent) -> dict[str, Any]:
    """An ES 8 ``_search`` body for ``content``.

    When the first stage returned all it was asked for, more may match, so the total is a lower
    bound ("gte"), as ES reports a capped count; ``first_stage``, when given, has the total,
    aggregations and shards as the backend reported them. Each hit's ``_score`` is
    ``RankedHit.score`` (the same on every page, never negative: ``merge``), its ``fields`` carry
    its BM25 score and whether the ranker reordered it (never in a fallback answer, where no model
    scored it); without ``shown`` a hit's ``_source`` is its id and title. ``esrr.ranker`` names
    what made ``_score``, and ``esrr.fallback`` and ``esrr.skipped``, when present, say why the model
    did not score the query, or why reranking was skipped.
    """
    scores = [float(item.score) for item in content.ranked]
    first_stage = content.first_stage
    response: dict[str, Any] = {
        "took": content.took_ms,
        "timed_out": bool(first_stage.timed_out) if first_stage is not None else False,
    }
    if first_stage is not None and first_stage.shards is not None:
        response["_shards"] = first_stage.shards
    total = _total(content)
    response["hits"] = {
        **({"total": total} if total is not None else {}),
        "max_score": content.max_score if content.max_score is not None else max(scores, default=None),
        "hits": _hits(content, scores),
    }
    if first_stage is not None and first_stage.aggregations is not None:
        response["aggregations"] = first_stage.aggregations
    response["esrr"] = {
        "ranker": content.ranker,
        **({"fallback": content.fallback} if content.fallback else {}),
        **({"skipped": content.skipped.message} if content.skipped else {}),
    }
    return response


def _hits(content: ResponseContent, scores: Sequence[float]) -> list[dict[str, Any]]:
    """The page's hits as Elasticsearch shows them, with their ``_source`` (``shown``) and our ``fields``."""
    shown = (
        content.shown
        if content.shown is not None
        else [{"_source": {"doc_id": item.hit.doc_id, "title": item.hit.title}} for item in content.ranked]
    )
    hits = []
    for item, score, extra in zip(content.ranked, scores, shown):
        hit: dict[str, Any] = {"_index": content.index, "_id": item.hit.doc_id, "_score": score}
        hit.update((key, value) for key, value in extra.items() if key != "fields")
        hit["fields"] = {
            **extra.get("fields", {}),
            "bm25_score": [float(item.hit.score)],
            "reranked": [item.reranked and not content.fallback],
        }
        if content.explain:
            hit["_explanation"] = _explanation(item, score)
        hits.append(hit)
    return hits


def _total(content: ResponseContent) -> Mapping[str, Any] | None:
    """``hits.total``: the first stage's, else the hits retrieved, a lower bound when the first stage returned as
    many as it was asked for."""
    if content.first_stage is not None:
        return content.first_stage.total
    return {"value": content.retrieved, "relation": "gte" if content.retrieved >= content.depth else "eq"}


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
