"""``esrr eval``: BM25, every stage search serves and (``--baselines``) the paper's rows on a judged collection."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import load_settings, writable_dir
from es_rerank.machine import machine_description
from es_rerank.settings import CommonSettings
from training.commands.research_rows import JudgedQueries, ResearchRows, research_runs
from training.commands.row_labels import check_row_labels, labelled_checkpoints
from training.commands.workspace import (
    Workspace,
    as_cli_error,
    check_judged_are_indexed,
    command_line,
    open_workspace,
    split_queries,
)

if TYPE_CHECKING:
    from es_rerank.ranking.neighbours import JudgedNeighbours
    from training.collection import JudgedCollection
    from training.evaluate import EvalRow
    from training.metrics import Run
    from training.served_eval import ServedRuns


@dataclass(frozen=True)
class EvalOptions:
    """The options of ``esrr eval`` that say what is evaluated and where the report goes."""

    data: Path | None
    queries_file: Path | None
    qrels_file: Path | None
    split: str
    window: int
    out: Path | None
    adapted: Path | None


def check_collection_options(data: Path | None, queries_file: Path | None, qrels_file: Path | None, split: str) -> None:
    """Usage errors for --queries/--qrels without --data, and an NFCorpus split that is not evaluated."""
    if data is None and (queries_file or qrels_file):
        raise click.UsageError("--queries and --qrels name the parts of a collection given with --data")
    if data is None and split not in ("dev", "test"):
        raise click.BadParameter(
            f"{split!r}: NFCorpus is evaluated on dev or test (train trains the model)", param_hint="--split"
        )


def locate_collection(data: Path, split: str, queries_file: Path | None, qrels_file: Path | None) -> JudgedCollection:
    """The judged collection at ``data``, or a CLI error naming what is missing."""
    from index_setup.readers import CorpusFormatError
    from training.collection import CollectionError, JudgedCollection

    with as_cli_error(CollectionError, CorpusFormatError, FileNotFoundError):
        return JudgedCollection.locate(data, split, queries_file, qrels_file)


def evaluation_collection(
    located: JudgedCollection | None, split: str, settings: CommonSettings
) -> tuple[Workspace, dict[str, str], dict[str, dict[str, int]], str]:
    """The workspace (backend, embeddings), judged queries, judgments and name of the collection evaluated:
    NFCorpus on the served index when ``located`` is None, else ``located`` on an index of its own."""
    if located is None:
        work = open_workspace(None, settings)
        queries = split_queries(work, split)
        return work, queries, dict(work.nfcorpus.qrels(split)), "NFCorpus"
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.readers import CorpusFormatError
    from training.data import DocumentRows

    with as_cli_error(CorpusFormatError, FileNotFoundError, EmbeddingsError, ValueError):
        embeddings = load_current(settings)
        backend, built = located.backend(settings)
    click.echo(
        f"{'built' if built else 'reusing'} the index of {located.corpus} at {backend.version_dir} "
        f"({backend.stats.n_docs} documents)"
    )
    check_judged_are_indexed(backend.stats, located.qrels, located.qrels_path, located.corpus)
    work = Workspace(settings, None, backend, embeddings, DocumentRows(backend.stats, embeddings))
    return work, located.queries, located.qrels, located.name


def evaluation_votes(work: Workspace, queries: Mapping[str, str]) -> JudgedNeighbours | None:
    """The votes file when `esrr neighbours build` has made one, checked to hold none of ``queries``' judgments."""
    from es_rerank.ranking.neighbours import JudgedNeighbours

    path = work.settings.neighbours_path
    if not path.is_file():
        click.echo(f"skipping judged neighbours: no file at {path} (build it with `esrr neighbours build`)")
        return None
    with as_cli_error(ValueError):
        neighbours = JudgedNeighbours.load(path)
    if neighbours.mismatch(work.backend.stats) is not None:
        return neighbours  # of another corpus: the pipeline leaves it out and says why; no judgment of ours in it
    overlap = sorted(set(neighbours.query_ids) & set(queries))
    if overlap:
        raise click.ClickException(
            f"{path} votes with judgments of {len(overlap)} evaluated queries "
            f"(e.g. {overlap[0]}); rebuild it from the train split with "
            "`esrr neighbours build`"
        )
    return neighbours


def served_rows(
    work: Workspace, queries: Mapping[str, str], window: int, with_votes: bool, checkpoint: Path | None = None
) -> ServedRuns:
    """The served pipeline's stages over the collection's index: the model (if trained; ``checkpoint`` instead of
    the served one if given), feedback, votes."""
    from es_rerank.ranking.assemble import served_pipeline
    from training.served_eval import ServedEvaluationError, served_runs
    from worker.local import LocalReranker
    from worker.settings import WorkerSettings

    settings = load_settings(WorkerSettings, checkpoint=None if checkpoint is None else str(checkpoint))
    # keep_vectors: each window is scored with and without the model, and both build its feedback vectors.
    pipeline = served_pipeline(
        settings,
        window,
        use_neighbours=with_votes,
        backend=work.backend,
        keep_vectors=True,
        local_reranker=lambda: LocalReranker(settings),
    )
    if pipeline.reranker is None:
        click.echo(
            f"no model at {settings.checkpoint_path}: the served rows are BM25's with feedback and votes; "
            "train one with `esrr train`"
        )
    try:
        with as_cli_error(ServedEvaluationError):
            return served_runs(pipeline, queries)
    finally:
        if pipeline.reranker is not None:
            pipeline.reranker.close()


def write_adaptation_verdict(
    rows: list[EvalRow], out: Path, served_default: str, adapted_default: str, evaluated: str
) -> str:
    """Whether the adapted model ranks the collection (``evaluated``: its name and split) better than the served
    one, added to the report in ``out``."""
    from training.evaluate import adaptation_verdict

    compared = adaptation_verdict(rows, served_default, adapted_default, evaluated)
    with (out / "table.md").open("a", encoding="utf-8") as table:
        table.write(f"Adaptation: {compared}\n")
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    results.update(adapted_default=adapted_default, adaptation=compared)
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return compared


@dataclass(frozen=True)
class Evaluation:
    """What one ``esrr eval`` run reads and where it writes."""

    work: Workspace
    judged: JudgedQueries
    collection: str  # its name in the report
    out: Path  # table.md, results.json, charts
    runs_dir: Path  # the TREC runs


def prepare_evaluation(options: EvalOptions) -> Evaluation:
    """The collection located and opened, the output folders checked before any work."""
    settings = load_settings()
    located = (
        None
        if options.data is None
        else locate_collection(options.data, options.split, options.queries_file, options.qrels_file)
    )
    name = "nfcorpus" if located is None else located.index_name()
    # A dev run never overwrites test's report.
    out = options.out if options.out is not None else Path(f"reports/{name}-{options.split}")
    runs_dir = settings.home / "runs" / (options.split if located is None else f"{name}/{options.split}")
    writable_dir(out, "pass a folder you can write to as --out")
    writable_dir(runs_dir, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    work, queries, qrels, collection = evaluation_collection(located, options.split, settings)
    return Evaluation(work, JudgedQueries(queries, qrels, options.split, options.window), collection, out, runs_dir)


def all_runs(
    evaluation: Evaluation, options: EvalOptions, rows: ResearchRows
) -> tuple[dict[str, Run], ServedRuns, str | None]:
    """Every row's run: the served stages (and the adapted model's), then the research rows asked for; with the
    served runs and the adapted default's row name."""
    from training.served_eval import ADAPTED_PREFIX

    work, judged = evaluation.work, evaluation.judged
    neighbours = evaluation_votes(work, judged.queries)
    served = served_rows(work, judged.queries, judged.window, neighbours is not None)
    if served.skipped:
        click.echo(f"judged neighbours not applied: {served.skipped}")
    runs = dict(served.runs)
    adapted_default = None
    if options.adapted is not None:
        other = served_rows(work, judged.queries, judged.window, neighbours is not None, checkpoint=options.adapted)
        runs.update({ADAPTED_PREFIX + name: run for name, run in other.runs.items() if name not in served.runs})
        adapted_default = ADAPTED_PREFIX + other.default
    if rows.baselines or rows.extra_models or rows.ensemble_models:
        runs.update(
            research_runs(work, judged, replace(rows, neighbours=neighbours if served.skipped is None else None))
        )
    return runs, served, adapted_default


def report(evaluation: Evaluation, runs: dict[str, Run], served: ServedRuns) -> list[EvalRow]:
    """The table, results, charts and TREC runs written; the table and the verdict shown."""
    from training.evaluate import evaluate_runs, first_stage_recall, write_report

    e = evaluation
    rows = evaluate_runs(runs, e.judged.qrels)
    recall = first_stage_recall(e.judged.qrels, runs["BM25"], e.judged.window)
    said = write_report(
        rows,
        runs,
        e.out,
        recall,
        command_line(),
        machine_description(),
        runs_dir=e.runs_dir,
        split=e.judged.split,
        collection=e.collection,
        depth=e.judged.window,
        served_default=served.default,
    )
    click.echo((e.out / "table.md").read_text(encoding="utf-8").rsplit("\nVerdict: ", 1)[0].rstrip("\n"))
    click.echo(f"runs in {e.runs_dir}; report in {e.out}")
    click.echo(said)
    return rows


@click.command(name="eval")
@click.option(
    "--data",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="A judged collection: a BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/SPLIT.tsv), or a "
    "corpus with --queries and --qrels. It gets an index of its own under "
    "$ESRR_HOME/indexes/eval-*. Default: NFCorpus on the served index.",
)
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --data: the queries (BEIR queries.jsonl, or ID<TAB>TEXT lines).",
)
@click.option(
    "--qrels",
    "qrels_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --data: the judgments (BEIR TSV or TREC qrels) instead of qrels/SPLIT.tsv.",
)
@click.option(
    "--split",
    default="test",
    show_default=True,
    help="The judgments evaluated: qrels/SPLIT.tsv (NFCorpus: dev or test).",
)
@click.option(
    "--window", default=500, show_default=True, type=click.IntRange(1, 1000), help="BM25 hits every ranker reorders."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where table.md, results.json and the charts go (default: reports/nfcorpus-SPLIT, or "
    "reports/eval-NAME-SPLIT with --data).",
)
@click.option(
    "--baselines/--no-baselines",
    default=None,
    help="Also the paper's baselines (uninformed, BM25 on titles, WMD, DRMM) and every trained Delta "
    "variant under <home>/models (default: on for NFCorpus, off with --data).",
)
@click.option(
    "--extra",
    "extras",
    multiple=True,
    metavar="LABEL=CHECKPOINT",
    help="Also evaluate this Delta checkpoint as a row named LABEL (repeatable).",
)
@click.option(
    "--ensemble",
    "ensembles",
    multiple=True,
    metavar="LABEL=CHECKPOINT,CHECKPOINT[,...]",
    help="Also evaluate the mean of these Delta checkpoints' per-query standardised scores "
    "(e.g. one recipe trained with several seeds) as a row named LABEL (repeatable).",
)
@click.option(
    "--adapted",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A checkpoint `esrr train --adapt` wrote: also every stage served with it instead (rows "
    "'adapted: ...'), and a last line on whether it ranks this collection better than the served "
    "model.",
)
def evaluate(
    *,
    data: Path | None,
    queries_file: Path | None,
    qrels_file: Path | None,
    split: str,
    window: int,
    out: Path | None,
    baselines: bool | None,
    extras: tuple[str, ...],
    ensembles: tuple[str, ...],
    adapted: Path | None,
) -> None:
    """Evaluate BM25, every stage that search serves and (--baselines) the paper's rows on a judged collection.

    The last line is the verdict: whether the served default helps this collection (nDCG@10 against
    BM25, paired t-test at p < 0.05).
    """
    check_collection_options(data, queries_file, qrels_file, split)
    extra_pairs = [labelled_checkpoints(e, ensemble=False) for e in extras]
    ensemble_pairs = [labelled_checkpoints(e, ensemble=True) for e in ensembles]
    check_row_labels([label for label, _ in [*extra_pairs, *ensemble_pairs]])
    options = EvalOptions(data, queries_file, qrels_file, split, window, out, adapted)
    rows = ResearchRows(
        extra_models={label: paths[0] for label, paths in extra_pairs},
        ensemble_models=dict(ensemble_pairs),
        baselines=data is None if baselines is None else baselines,
    )
    evaluation = prepare_evaluation(options)
    runs, served, adapted_default = all_runs(evaluation, options, rows)
    table = report(evaluation, runs, served)
    if adapted_default is not None:
        evaluated = f"{evaluation.collection} {split}"
        click.echo(write_adaptation_verdict(table, evaluation.out, served.default, adapted_default, evaluated))
