"""``esrr bench search``: where one query's time goes in what ``esrr search`` serves.

Runs the served pipeline (``es_rerank.ranking.assemble.served_pipeline``: the same stages, on
by the same defaults) in this process over the NFCorpus dev queries, each the request a client
sends for its words, answered as ``_search`` answers it (``es_rerank.ranking.answer``: the body
prepared, ranked, its page's ``_source`` read; "total" holds all of it), and times each
stage of every query (``es_rerank.ranking.pipeline.STAGES``): BM25 retrieval, the
Lex features and request, the model, the candidate-feedback vectors and votes, the
judged-neighbour votes, the merge. All stages are timed in the same run, query by
query, so their ratios hold on a noisy machine. No broker: ``esrr bench roundtrip``
adds what the trip to a worker costs.

When the feedback keeps its document vectors between queries (the default), the same
pipeline without that cache runs beside it, query by query, and its vector stage is
reported as "feedback vectors, uncached": what the cache saves, measured in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.queries import dev_query_options
from es_rerank.backends.base import MAX_K, MAX_WINDOW
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description
from es_rerank.ranking.answer import answer
from es_rerank.ranking.pipeline import STAGES, Ranking, ScoringUnavailable, SearchPipeline
from es_rerank.ranking.request import text_request

TOTAL = "total"
UNCACHED = "feedback vectors, uncached"


class StageTimes:
    """A pipeline clock that keeps every stage's time of every query, in ms."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage].append((time.perf_counter() - started) * 1000)

    def summary(self) -> dict[str, dict[str, float | None]]:
        """Per stage run (and the total): queries timed, p50, p99 and mean ms, and its share of the total time.

        The uncached vector stage ran outside the total, so it has no share.
        """
        total = sum(self.ms[TOTAL])
        return {
            stage: {
                "queries": len(ms),
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "mean_ms": statistics.fmean(ms),
                "share_of_total": None if stage == UNCACHED else sum(ms) / total,
            }
            for stage in (*STAGES, TOTAL, UNCACHED)
            if (ms := self.ms.get(stage))
        }


def time_queries(pipeline: SearchPipeline, queries: list[str], k: int, rounds: int) -> tuple[StageTimes, str]:
    """Each query ranked ``rounds`` times after one untimed pass, every stage timed; and the ranker most served.

    With a feedback-vector cache, each query is also ranked without it, and only that
    run's vector stage is kept (as ``UNCACHED``). That run leaves out the model and the
    votes: the vectors depend only on the window, which BM25 alone decides. A query the
    model could not score (``Ranking.fallback``) raises ``ScoringUnavailable``: its times
    would be BM25's, not the served model's.
    """
    uncached = (
        replace(pipeline, reranker=None, neighbours=None, feedback_vectors=None)
        if pipeline.feedback_vectors is not None
        else None
    )
    asked = [text_request(query, k) for query in queries]  # what a client sends for each query's words
    rankers = Counter(_scored(answer(pipeline, one).ranking).ranker for one in asked)  # warm-up: model, caches
    times, beside = StageTimes(), StageTimes()
    for _ in range(rounds):
        for one in asked:
            with times(TOTAL):
                ranking = answer(pipeline, one, clock=times).ranking
            _scored(ranking)
            if uncached is not None:
                answer(uncached, one, clock=beside)
    if beside.ms:
        times.ms[UNCACHED] = beside.ms["feedback vectors"]
    return times, rankers.most_common(1)[0][0]


def _scored(ranking: Ranking) -> Ranking:
    """``ranking``, unless the model could not score its query."""
    if ranking.fallback:
        raise ScoringUnavailable(ranking.fallback)
    return ranking


@click.command(name="search")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, MAX_K), help="Hits shown per query.")
@click.option(
    "--window", default=500, show_default=True, type=click.IntRange(1, MAX_WINDOW), help="BM25 hits the stages reorder."
)
@dev_query_options
@click.option(
    "--worker",
    "via_worker",
    is_flag=True,
    help="Have a running worker score through the broker, as `esrr search --worker` does.",
)
@json_out_option("Also write the figures as JSON.")
def bench_search(
    k: int, window: int, rounds: int, queries: int, data: Path | None, via_worker: bool, json_out: Path | None
) -> None:
    """Per-stage latency of the served search (BM25, model, feedback, votes) over the NFCorpus dev queries."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends import BackendError
    from es_rerank.cli_options import load_settings
    from es_rerank.payload import PayloadError, WorkerSetupError
    from es_rerank.ranking.assemble import PipelineOptions, model_note, served_pipeline
    from worker.local import LocalReranker
    from worker.settings import WorkerSettings

    settings = load_settings(WorkerSettings)
    texts = dev_query_texts(data, settings, queries)
    pipeline = served_pipeline(
        settings,
        window,
        keep_vectors=True,
        via_worker=via_worker,  # many queries
        local_reranker=lambda: LocalReranker(settings),
    )
    note = model_note(settings, PipelineOptions(window, via_worker=via_worker))
    if note is not None:
        click.echo(f"({note})", err=True)
    try:
        times, ranker = time_queries(pipeline, texts, k, rounds)
    except (BackendError, PayloadError, WorkerSetupError) as error:
        raise click.ClickException(str(error)) from None
    except ScoringUnavailable as error:
        raise click.ClickException(
            f"the model did not score every query ({error}); BM25's order in its place would make the figures mislead"
        ) from None
    finally:
        if pipeline.reranker is not None:
            pipeline.reranker.close()
    figures: dict[str, Any] = {
        "machine": machine_description(),
        "ranker": ranker,
        "queries": len(texts),
        "rounds": rounds,
        "k": k,
        "window": window,
        "scored_by": "a worker, through the broker" if via_worker else "this process",
        "stages": times.summary(),
    }
    click.echo(
        f"{figures['machine']} | {ranker}, scored in {figures['scored_by']} | {len(texts)} dev queries x "
        f"{rounds} rounds, top-{k} of a {window}-hit window"
    )
    click.echo(f"{'stage':<26} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'share':>6}")
    for stage, row in figures["stages"].items():
        click.echo(
            f"{stage:<26} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['mean_ms']:>8.2f} "
            + (f"{row['share_of_total']:>6.1%}" if row["share_of_total"] is not None else f"{'-':>6}")
        )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
