"""``esrr bench index``: tokenize+statistics rate, embedded build time, BM25 top-500 latency."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from es_rerank.backends.base import MAX_K, text_hits
from es_rerank.cli_options import json_out_option


@click.command(name="index")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--repeats",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Repetitions of the statistics and build timings.",
)
@click.option(
    "--rounds",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Passes over the dev queries for search latency.",
)
@click.option("--k", default=500, show_default=True, type=click.IntRange(1, MAX_K), help="Hits per search.")
@json_out_option("Also write the figures as JSON.")
def bench_index(data: Path | None, repeats: int, rounds: int, k: int, json_out: Path | None) -> None:
    """Print medians over repeated runs; all on the real NFCorpus."""
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.machine import machine_description
    from es_rerank.stats import build_stats
    from index_setup.embedded_index import build_embedded_index
    from index_setup.nfcorpus import NFCorpus

    try:
        nfcorpus = NFCorpus.locate(data)
        documents = list(nfcorpus.documents())
        queries = list(nfcorpus.queries("dev").values())
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if not documents:
        raise click.ClickException(
            f"{nfcorpus.corpus_path} holds no readable document (it is empty, or "
            "every record was skipped: see the warnings above); point --data at an "
            "NFCorpus folder whose corpus has records"
        )
    if not queries:
        raise click.ClickException(
            f"no dev query has both judgments (qrels/dev.tsv) and text (queries.jsonl) "
            f"in {nfcorpus.root}, and search latency is timed on them; check those two files"
        )

    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        build_stats("bench", documents)
        rates.append(len(documents) / (time.perf_counter() - started))

    builds, latencies = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            result = build_embedded_index(documents, Path(tmp), version=f"v{i}", progress=False)
            builds.append(result.seconds)
        backend = EmbeddedBackend.open_current(Path(tmp))
        for query in queries:  # warm-up pass
            text_hits(backend, query, k)
        for _ in range(rounds):
            for query in queries:
                started = time.perf_counter()
                text_hits(backend, query, k)
                latencies.append(time.perf_counter() - started)

    figures = {
        "machine": machine_description(),
        "documents": len(documents),
        "tokenize_stats_docs_per_s_median": statistics.median(rates),
        "embedded_build_s_median": statistics.median(builds),
        "bm25_top_k": k,
        "dev_queries": len(queries),
        "search_p50_ms": float(np.percentile(latencies, 50) * 1000),
        "search_p99_ms": float(np.percentile(latencies, 99) * 1000),
    }
    click.echo(f"machine: {figures['machine']}")
    click.echo(
        f"tokenize + statistics: {figures['tokenize_stats_docs_per_s_median']:,.0f} docs/s "
        f"(median of {repeats}, {len(documents)} NFCorpus docs, one process)"
    )
    click.echo(f"embedded index build:  {figures['embedded_build_s_median']:.2f} s (median of {repeats})")
    click.echo(
        f"BM25 top-{k} latency:  p50 {figures['search_p50_ms']:.2f} ms, p99 {figures['search_p99_ms']:.2f} ms "
        f"({len(latencies)} searches: {len(queries)} dev queries x {rounds} rounds)"
    )
    if json_out:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
