"""The final ranking as an Elasticsearch ``_search`` response body, so existing ES clients can read it."""

from __future__ import annotations

from typing import Any, Sequence

from es_rerank.gateway.merge import RankedHit


def search_response(ranked: Sequence[RankedHit], index: str, took_ms: int, retrieved: int, depth: int,
                    ranker: str) -> dict[str, Any]:
    """An ES 8 ``_search`` body for ``ranked`` (already cut to the hits shown).

    ``retrieved`` hits came back from a first stage asked for ``depth``; when it returned
    all it was asked for, more may match, so the total is a lower bound ("gte"), as ES
    reports a capped count. Each hit's ``fields`` carry its BM25 score and whether the
    ranker reordered it; ``esrr.ranker`` names what made ``_score``.
    """
    hits = [{"_index": index, "_id": item.hit.doc_id, "_score": float(item.score),
             "_source": {"doc_id": item.hit.doc_id, "title": item.hit.title},
             "fields": {"bm25_score": [float(item.hit.score)], "reranked": [item.reranked]}}
            for item in ranked]
    return {
        "took": took_ms,
        "timed_out": False,
        "hits": {"total": {"value": retrieved, "relation": "gte" if retrieved >= depth else "eq"},
                 "max_score": max((hit["_score"] for hit in hits), default=None),
                 "hits": hits},
        "esrr": {"ranker": ranker},
    }
