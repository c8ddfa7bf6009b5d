"""``esrr bench http``: a running gateway's latency and throughput, as its HTTP clients see them.

Sends the NFCorpus dev queries as ``GET /_search?q=...`` to a gateway (``esrr serve``),
``--concurrency`` at a time over kept-alive connections, and times each request. Each
response's ``took`` is the gateway's own time from retrieval to the final order, so
"HTTP and JSON" (latency minus took, request by request) is what serving over HTTP
adds, measured in the same run; ``took`` is in whole milliseconds, as Elasticsearch
gives it, so that difference is exact only on average (p50 within 0.5 ms). A search that fell back to BM25 order, or failed,
stops the benchmark: its time would not be the served model's.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click
import numpy as np

from es_rerank.backends.base import MAX_K
from benchmarks.queries import dev_query_options
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description


class GatewayFailed(RuntimeError):
    """A search through the gateway did not return reranked hits."""


def search_once(pool: Any, url: str, query: str, k: int) -> tuple[float, float, str]:
    """One search: client-side ms, the gateway's ``took`` ms, and the ranker that answered."""
    started = time.perf_counter()
    response = pool.request("GET", f"{url}/_search?{urlencode({'q': query, 'size': k})}")
    elapsed_ms = (time.perf_counter() - started) * 1000
    try:
        body = json.loads(response.data)
    except ValueError:
        raise GatewayFailed(f"{query!r}: HTTP {response.status}, and not JSON: {response.data[:200]!r}") from None
    if response.status != 200:
        raise GatewayFailed(f"{query!r}: HTTP {response.status}: {body.get('error', {}).get('reason', body)}")
    if "fallback" in body["esrr"]:
        raise GatewayFailed(f"{query!r} was not reranked: {body['esrr']['fallback']}")
    return elapsed_ms, float(body["took"]), body["esrr"]["ranker"]


def run_rounds(url: str, queries: list[str], k: int, rounds: int, concurrency: int) -> dict[str, Any]:
    """Every query once untimed, then ``rounds`` timed passes at ``concurrency``; the figures."""
    import urllib3

    pool = urllib3.PoolManager(maxsize=concurrency, retries=False, timeout=urllib3.Timeout(30))
    with ThreadPoolExecutor(concurrency) as threads:
        rankers = {ranker for _, _, ranker in threads.map(lambda q: search_once(pool, url, q, k), queries)}
        latency, took, per_second = [], [], []
        for _ in range(rounds):
            started = time.perf_counter()
            results = list(threads.map(lambda q: search_once(pool, url, q, k), queries))
            per_second.append(len(queries) / (time.perf_counter() - started))
            latency += [ms for ms, _, _ in results]
            took += [ms for _, ms, _ in results]
    overhead = np.array(latency) - np.array(took)
    return {"rankers": sorted(rankers), "searches": len(latency), "concurrency": concurrency,
            "latency_ms": _spread(latency), "took_ms": _spread(took), "http_and_json_ms": _spread(overhead),
            "searches_per_s": {"per_round": per_second, "median": statistics.median(per_second)}}


def _spread(ms: Any) -> dict[str, float]:
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
            "mean": float(np.mean(ms))}


@click.command(name="http")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway.")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, MAX_K), help="Hits per search.")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Searches in flight at once.")
@dev_query_options
@json_out_option("Also write the figures as JSON.")
def bench_http(url: str, k: int, concurrency: int, rounds: int, queries: int, data: Path | None,
               json_out: Path | None) -> None:
    """Latency and searches/s of a running gateway (`esrr serve`) over the NFCorpus dev queries."""
    import urllib3

    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.settings import CommonSettings

    texts = dev_query_texts(data, load_settings(CommonSettings), queries)
    url = url.rstrip("/")
    try:
        figures = run_rounds(url, texts, k, rounds, concurrency)
    except GatewayFailed as error:
        raise click.ClickException(f"{error}; the figures would not be the served model's") from None
    except urllib3.exceptions.HTTPError as error:
        raise click.ClickException(f"cannot reach the gateway at {url} ({error}); start it with `esrr serve`, "
                                   "or pass its --url") from None
    figures = {"machine": machine_description(), "url": url, "queries": len(texts), "rounds": rounds, "k": k,
               **figures}
    click.echo(f"{figures['machine']} | {', '.join(figures['rankers'])} | {len(texts)} dev queries x {rounds} "
               f"rounds, {concurrency} at a time")
    click.echo(f"{'':<24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, key in (("latency (client)", "latency_ms"), ("took (gateway)", "took_ms"),
                      ("HTTP and JSON", "http_and_json_ms")):
        row = figures[key]
        click.echo(f"{name:<24} {row['p50']:>8.2f} {row['p99']:>8.2f} {row['mean']:>8.2f}")
    click.echo(f"searches/s: {figures['searches_per_s']['median']:.1f} (median of {rounds} rounds)")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
