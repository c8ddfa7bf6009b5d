"""The final ranking as an Elasticsearch ``_search`` response body, so existing ES clients can read it.

It lives with the ranking, not the gateway, because two rooms render it: the gateway's
``_search`` and ``esrr search --json``, which must not import the web layer.
"""

from __future__ import annotations

from typing import Any, Sequence

from es_rerank.ranking.merge import RankedHit


def search_response(ranked: Sequence[RankedHit], index: str, took_ms: int, retrieved: int, depth: int,
                    ranker: str, fallback: str | None = None) -> dict[str, Any]:
    """An ES 8 ``_search`` body for ``ranked`` (already cut to the hits shown).

    ``retrieved`` hits came back from a first stage asked for ``depth``; when it returned
    all it was asked for, more may match, so the total is a lower bound ("gte"), as ES
    reports a capped count. ``took_ms`` is the time from the first-stage search to the
    final order. Each hit's ``fields`` carry its BM25 score and whether the ranker
    reordered it (never in a fallback answer, where no model scored it);
    ``esrr.ranker`` names what made ``_score`` (see ``descending_scores``), and
    ``esrr.fallback``, when present, why the model did not score the query.
    """
    scores = descending_scores(ranked)
    hits = [{"_index": index, "_id": item.hit.doc_id, "_score": score,
             "_source": {"doc_id": item.hit.doc_id, "title": item.hit.title},
             "fields": {"bm25_score": [float(item.hit.score)], "reranked": [item.reranked and not fallback]}}
            for item, score in zip(ranked, scores)]
    return {
        "took": took_ms,
        "timed_out": False,
        "hits": {"total": {"value": retrieved, "relation": "gte" if retrieved >= depth else "eq"},
                 "max_score": max((hit["_score"] for hit in hits), default=None),
                 "hits": hits},
        "esrr": {"ranker": ranker, **({"fallback": fallback} if fallback else {})},
    }


def descending_scores(ranked: Sequence[RankedHit]) -> list[float]:
    """Each hit's final score, the BM25 tail below a reordered window shifted to sit under the window's lowest.

    ES clients expect ``_score`` to descend down the list; the ranker's scores and BM25's
    are on different scales, so the tail keeps its BM25 differences but starts one
    point below the lowest reordered score (the raw BM25 stays in ``fields``).
    """
    window = [item.score for item in ranked if item.reranked]
    tail = [item.hit.score for item in ranked if not item.reranked]
    if not window or not tail:
        return [float(item.score) for item in ranked]
    shift = min(window) - max(tail) - 1.0
    return [float(item.score if item.reranked else item.hit.score + shift) for item in ranked]
