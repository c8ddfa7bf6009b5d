"""What a top-500 Elasticsearch hit list costs the gateway with and without the stored token ids in `_source`.

Run with a loaded index (`esrr index build --backend elasticsearch`) and the same settings:
    ESRR_BACKEND=elasticsearch ESRR_ES_URL=... python reports/experiments/es-hit-source/measure.py [QUERIES]
For the first QUERIES (default 60) NFCorpus dev queries it fetches the raw response body both ways once
(the server's time is not compared: noida-db, the stand-in here, takes seconds a search), then
times what runs in the gateway's process, alternating the two: JSON decoding plus turning the
hits into `Hit`s (before: `DocTerms.from_json` of `_source`; now: the served statistics' row).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.request

from benchmarks.queries import dev_query_texts
from es_rerank.backends import open_backend
from es_rerank.backends.base import Hit, text_body
from es_rerank.cli_options import load_settings
from es_rerank.settings import CommonSettings
from es_rerank.stats import DocTerms

REPS, K = 5, 500
BEFORE = ["doc_id", "title", "title_ids", "abstract_ids", "first_ids"]
NOW = ["doc_id", "title"]


def backend_body(query: str) -> dict:
    """The first stage the Elasticsearch backend sends for ``query``'s words (its rewrite of ``text_body``)."""
    from es_rerank.backends.es_body import on_text

    return {"query": on_text(text_body(query)["query"])}


def body(url: str, index: str, query: str, fields: list[str]) -> bytes:
    """The raw `_search` response body the backend's query gets with `_source` limited to `fields`."""
    first_stage = backend_body(query)
    request = {
        **first_stage,
        "size": K,
        "sort": [{"_score": {"order": "desc"}}, {"doc_id": {"order": "asc"}}],
        "track_scores": True,
        "track_total_hits": False,
        "_source": fields,
    }
    call = urllib.request.Request(
        f"{url}/{index}/_search", json.dumps(request).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(call) as response:
        return response.read()


def main() -> None:
    n_queries = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    settings = load_settings(CommonSettings)
    backend = open_backend(settings)
    stats = backend.stats
    queries = dev_query_texts(None, settings, n_queries)
    bodies = {
        name: [body(settings.es_url, backend.index, q, fields) for q in queries]
        for name, fields in (("before", BEFORE), ("now", NOW))
    }

    def before(raw: bytes) -> list[Hit]:
        return [
            Hit(h["_source"]["doc_id"], h["_score"], h["_source"]["title"], DocTerms.from_json(h["_source"]))
            for h in json.loads(raw)["hits"]["hits"]
        ]

    def now(raw: bytes) -> list[Hit]:
        return [
            Hit(
                h["_source"]["doc_id"],
                h["_score"],
                h["_source"]["title"],
                stats.doc_terms(stats.row(h["_source"]["doc_id"])),
            )
            for h in json.loads(raw)["hits"]["hits"]
        ]

    times: dict[str, list[float]] = {"before": [], "now": []}
    for rep in range(REPS):
        order = (("before", before), ("now", now)) if rep % 2 == 0 else (("now", now), ("before", before))
        for name, parse in order:
            for raw in bodies[name]:
                started = time.perf_counter()
                parse(raw)
                times[name].append(time.perf_counter() - started)
    per_query = {
        name: [statistics.median(times[name][i :: len(queries)]) for i in range(len(queries))] for name in times
    }
    hits = [len(json.loads(raw)["hits"]["hits"]) for raw in bodies["now"]]
    full = [i for i, n in enumerate(hits) if n == K]  # windows of a whole top-500
    result = {
        name: {
            "bytes_p50": statistics.median(len(raw) for raw in bodies[name]),
            "client_ms_p50": round(statistics.median(times[name]) * 1e3, 2),
            "client_ms_mean": round(statistics.mean(times[name]) * 1e3, 2),
            "full_window_bytes_p50": statistics.median(len(bodies[name][i]) for i in full) if full else None,
            "full_window_client_ms_p50": round(statistics.median(per_query[name][i] for i in full) * 1e3, 2)
            if full
            else None,
        }
        for name in times
    }
    result["full_windows"] = len(full)
    result["queries"], result["hits_p50"], result["reps"] = n_queries, statistics.median(hits), REPS
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
