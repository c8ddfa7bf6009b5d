"""What the heaviest answers cost, in-process: the figures behind the answer limits (docs/operations.md).

Runs issue 32's output rows (a highlight field listed 1,000 times, thousands of ``_source``
patterns, 100-character tags on whole fields) and the largest legitimate requests (size 1,000
with the whole ``_source``, with highlight) through the real gateway app over the embedded
index served under ``ESRR_HOME``, with BM25 order (no workers), and prints each one's status,
answer bytes and the thread CPU milliseconds of the request (median of ``--repeat``).

    python -m benchmarks.answer_limits            # ESRR_HOME's embedded index (build one first)
    python -m benchmarks.answer_limits --max-highlight-chars 10000000   # what the budget refuses, timed

Also prints the weight of the 1,000 largest stored ``_source`` documents: the heaviest
page of size 1,000 an index can answer.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import click
import tantivy

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.machine import machine_description
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch

COMMON = {"match": {"text": "the of and in"}}
TAG = "x" * 100
ROWS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("size 1000, whole _source", "/_search", {"query": COMMON, "size": 1000}),
    ("size 200, highlight title+abstract (5 x 100)", "/_search",
     {"query": COMMON, "size": 200, "highlight": {"fields": {"title": {}, "abstract": {}}}}),
    ("size 55, highlight whole title+abstract", "/_search",
     {"query": COMMON, "size": 55, "highlight": {"number_of_fragments": 0, "fields": {"title": {}, "abstract": {}}}}),
    ("size 1000, highlight title+abstract (5 x 100)", "/_search",
     {"query": COMMON, "size": 1000, "highlight": {"fields": {"title": {}, "abstract": {}}}}),
    ("size 1000, highlight whole title+abstract", "/_search",
     {"query": COMMON, "size": 1000, "highlight": {"number_of_fragments": 0, "fields": {"title": {}, "abstract": {}}}}),
    ("issue: abstract listed 1,000 times, size 1000", "/_search",
     {"query": COMMON, "size": 1000, "highlight": {"fields": [{"abstract": {}}] * 1000}}),
    ("issue: 100-char tags, whole fields, size 1000", "/_search",
     {"query": COMMON, "size": 1000, "highlight": {"number_of_fragments": 0, "pre_tags": [TAG], "post_tags": [TAG],
                                                   "fields": {"title": {}, "abstract": {}}}}),
    ("issue: 2,000 _source patterns, size 1000", "/_search",
     {"query": COMMON, "size": 1000, "_source": [f"f{n}*x" for n in range(2000)]}),
    ("issue: 1,000 _source_includes (URL), size 1000",
     "/_search?size=1000&q=the&_source_includes=" + ",".join(f"a{n}" for n in range(1000)), None),
    ("256 _source patterns (the most allowed), size 1000", "/_search",
     {"query": COMMON, "size": 1000, "_source": {"includes": [f"*f{n}*x*y" for n in range(127)] + ["*"],
                                                 "excludes": [f"a{n}*z" for n in range(128)]}}),
]


def heaviest_page(backend: EmbeddedBackend, size: int = 1000) -> int:
    """The bytes of the ``size`` largest stored ``_source`` documents of the index."""
    searcher = backend._searcher  # noqa: SLF001 - a measurement reads the store directly
    hits = searcher.search(tantivy.Query.all_query(), backend.stats.n_docs).hits
    return sum(sorted((len(searcher.doc(address)["source"][0]) for _, address in hits), reverse=True)[:size])


@click.command()
@click.option("--repeat", default=3, show_default=True, help="Runs of each request; the median is shown.")
@click.option("--max-highlight-chars", type=int, default=None,
              help="ESRR_GATEWAY_MAX_HIGHLIGHT_CHARS for this run (default: the setting's), e.g. to time what a "
                   "larger budget lets through.")
def bench_answer_limits(repeat: int, max_highlight_chars: int | None) -> None:
    """Status, answer bytes and thread CPU ms of the heaviest answers, in-process on ESRR_HOME's embedded index."""
    settings = GatewaySettings()
    if max_highlight_chars is not None:
        settings = settings.model_copy(update={"gateway_max_highlight_chars": max_highlight_chars})
    backend = EmbeddedBackend.open_current(settings.home / "indexes" / "embedded")
    client = create_app(ServedSearch(SearchPipeline(backend, 0), 3600), settings).test_client()
    click.echo(f"{machine_description()}; index {backend.index}, {backend.stats.n_docs:,} documents, mean stored "
               f"_source {backend.mean_source_bytes:,.0f} bytes, 1,000 largest {heaviest_page(backend):,} bytes; "
               f"ESRR_GATEWAY_MAX_HIGHLIGHT_CHARS={settings.gateway_max_highlight_chars}")
    click.echo(f"{'request':52} {'status':>6} {'bytes':>12} {'CPU ms':>8}")
    for name, path, body in ROWS:
        cpu = []
        for _ in range(repeat):
            started = time.thread_time()
            response = client.post(path, json=body) if body is not None else client.get(path)
            answer = response.get_data()
            cpu.append(time.thread_time() - started)
        click.echo(f"{name:52} {response.status_code:>6} {len(answer):>12,} {statistics.median(cpu) * 1000:>8.0f}")


if __name__ == "__main__":
    bench_answer_limits()
