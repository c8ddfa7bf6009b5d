"""``esrr batch-search``: rank every query of a file with the served pipeline, write a TREC run.

The same assembly as ``esrr search`` (``served_pipeline``), loaded once for all the queries:
the model, the feedback's document vectors (kept between queries) and the votes. Each query's
words are the request a client sends for them, answered as ``_search`` answers it
(``es_rerank.ranking.answer``). A run file is what ``ir_measures``, ``trec_eval`` or
``esrr eval``-style tooling reads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from tqdm import tqdm

from es_rerank.backends.base import MAX_K
from worker.search import stage_options

if TYPE_CHECKING:
    from es_rerank.ranking.pipeline import SearchPipeline

RUN_TAG = "esrr"


@click.command(name="batch-search")
@click.argument("queries_file", metavar="QUERIES", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The TREC run file to write (qid Q0 docid rank score tag).",
)
@click.option("-k", "k", default=1000, show_default=True, type=click.IntRange(1, MAX_K), help="Hits per query.")
@stage_options
@click.option("--tag", default=RUN_TAG, show_default=True, help="The run's tag (last column).")
def batch_search(
    *,
    queries_file: Path,
    out: Path,
    k: int,
    window: int,
    rerank: bool | None,
    use_feedback: bool | None,
    use_neighbours: bool | None,
    via_worker: bool,
    tag: str,
) -> None:
    """Rank every query of QUERIES (BEIR queries.jsonl or ID<TAB>TEXT lines) and write a TREC run."""
    from es_rerank.cli_options import load_settings, writable_file
    from es_rerank.ranking.assemble import PipelineOptions, Switch
    from es_rerank.text import tokenize
    from worker.local import LocalReranker
    from worker.search import assembled
    from worker.settings import WorkerSettings

    if not tag or any(c.isspace() for c in tag):
        raise click.BadParameter(
            f"{tag!r}: a run tag is one word (a space would break the run's six columns)", param_hint="--tag"
        )
    writable_file(out, "pass a file path you can write to as --out")
    queries = _read_query_file(queries_file)
    wordless = {q for q, text in queries.items() if not tokenize(text)}
    settings = load_settings(WorkerSettings)
    options = PipelineOptions(
        window,
        Switch.of(rerank),
        Switch.of(use_feedback),
        Switch.of(use_neighbours),
        keep_vectors=True,
        via_worker=via_worker,
        local_reranker=lambda: LocalReranker(settings),
    )
    pipeline = assembled(settings, options)
    started = time.perf_counter()
    rankers, fallbacks = _write_run(pipeline, queries, k, tag, out, skip=wordless)
    seconds = time.perf_counter() - started
    ranked = len(queries) - len(wordless)
    click.echo(
        f"{ranked} queries in {seconds:.1f} s ({ranked / max(seconds, 1e-9):.1f} queries/s, model load "
        f"included) -> {out}"
    )
    for ranker, count in sorted(rankers.items(), key=lambda pair: -pair[1]):
        click.echo(f"  {count} ranked by {ranker}")
    if wordless:
        click.echo(f"  {len(wordless)} without a word to search for, left out of the run (e.g. {min(wordless)})")
    if fallbacks:
        click.echo(f"  {fallbacks} kept BM25's order: no worker answered in time (ESRR_SCORE_DEADLINE_S)", err=True)


def _read_query_file(queries_file: Path) -> dict[str, str]:
    """The queries of QUERIES by id; a file without one is an error, skipped lines a warning."""
    from index_setup.readers import CorpusFormatError, LoadReport, read_queries

    report = LoadReport()
    try:
        queries = read_queries(queries_file, report=report)
    except (CorpusFormatError, FileNotFoundError) as error:
        raise click.ClickException(str(error)) from None
    if not queries:
        raise click.ClickException(
            f"{queries_file} holds no query ({report.summary()}); write one ID<TAB>TEXT "
            "line (or BEIR JSON object) per query"
        )
    if report.skipped:
        click.echo(f"warning: {queries_file}: {report.summary()}; those lines are left out of the run", err=True)
    return queries


def _write_run(
    pipeline: SearchPipeline, queries: dict[str, str], k: int, tag: str, out: Path, *, skip: set[str]
) -> tuple[dict[str, int], int]:
    """Rank each query but those in ``skip`` and write the run to ``out``, whole or not at all; how many queries
    each ranker ordered, and how many kept BM25's order. The pipeline's reranker is closed after."""
    from es_rerank.backends import BackendError
    from es_rerank.backends.base import QueryRefused
    from es_rerank.payload import PayloadError, WorkerSetupError
    from es_rerank.ranking.answer import answer
    from es_rerank.ranking.request import text_request

    rankers: dict[str, int] = {}
    fallbacks = 0
    partial = out.with_name(f".{out.name}.partial")  # a run file is whole or absent
    try:
        with partial.open("w", encoding="utf-8") as run:
            for query_id in tqdm(queries, desc="queries", unit="query"):
                if query_id in skip:
                    continue
                ranking = answer(pipeline, text_request(queries[query_id], k)).ranking  # as _search ranks it
                rankers[ranking.ranker] = rankers.get(ranking.ranker, 0) + 1
                fallbacks += ranking.fallback is not None
                for rank, item in enumerate(ranking.ranked, 1):  # _score, as the gateway answers it
                    run.write(f"{query_id} Q0 {item.hit.doc_id} {rank} {item.score:.6f} {tag}\n")
        partial.replace(out)
    except (BackendError, PayloadError, WorkerSetupError, QueryRefused) as error:
        raise click.ClickException(str(error)) from None
    finally:
        partial.unlink(missing_ok=True)
        if pipeline.reranker is not None:
            pipeline.reranker.close()
    return rankers, fallbacks
