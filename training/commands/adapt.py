"""``esrr train --adapt``: the served model fine-tuned on a collection's own titles, then both evaluated."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import load_settings, writable_dir
from es_rerank.machine import machine_description
from training.commands.evaluate import evaluate
from training.commands.workspace import as_cli_error, check_embeddings, command_line, result_metrics

if TYPE_CHECKING:
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.embeddings import Embeddings
    from training.adapt import AdaptationPlan
    from training.collection import JudgedCollection
    from training.train import TrainConfig, TrainOverrides, TrainResult
    from worker.model import Checkpoint
    from worker.settings import WorkerSettings


@dataclass(frozen=True)
class AdaptRequest:
    """What ``esrr train --adapt`` was asked for."""

    data: Path  # the collection adapted to
    suffix: str
    train_queries: int | None  # --adapt-queries
    test: bool  # --adapt-test: end with `esrr eval --adapted`
    overrides: TrainOverrides  # TrainConfig fields given on the command line


@dataclass(frozen=True)
class FineTuned:
    """The fine-tuning run, the served model's dev NDCG@20 before it, and how many queries each split had."""

    result: TrainResult
    before: float
    train_queries: int
    dev_queries: int


@dataclass(frozen=True)
class Adaptation:
    """The served model, the pseudo-queries of the collection, and the index and embeddings they are read with."""

    served: Path
    checkpoint: Checkpoint
    plan: AdaptationPlan
    folder: Path  # the pseudo-query collection, a BEIR folder
    train_split: JudgedCollection
    dev_split: JudgedCollection
    embeddings: Embeddings
    backend: EmbeddedBackend
    built: bool  # the index was built now, not reused


def served_checkpoint(settings: WorkerSettings) -> Path:
    """The one served checkpoint, in a folder this run can write beside; a CLI error otherwise."""
    if len(settings.checkpoint_paths) > 1:
        raise click.UsageError("ESRR_CHECKPOINT names an ensemble; --adapt fine-tunes one model: name one member")
    served = settings.checkpoint_path
    if not served.is_file():
        raise click.ClickException(f"no served model at {served} to adapt; train one first with `esrr train`")
    writable_dir(served.parent, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    return served


def prepare_adaptation(
    request: AdaptRequest, settings: WorkerSettings, served: Path, config: TrainConfig
) -> Adaptation:
    """The pseudo-query collection written and indexed, the served model loaded; CLI errors naming the fix."""
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.readers import CorpusFormatError, read_corpus
    from training.adapt import (
        ADAPT_TRAIN_QUERIES,
        AdaptationError,
        plan_adaptation,
        pseudo_collection,
        write_pseudo_collection,
    )
    from training.collection import CollectionError, JudgedCollection
    from worker.model import Checkpoint

    n_train = request.train_queries or ADAPT_TRAIN_QUERIES
    with as_cli_error(
        AdaptationError, CorpusFormatError, FileNotFoundError, CollectionError, EmbeddingsError, ValueError
    ):
        plan = plan_adaptation(request.data, served, settings.home, n_train, suffix=request.suffix)
        condition = pseudo_collection(plan, list(read_corpus(request.data)), seed=config.seed)
        folder = write_pseudo_collection(plan, condition)
        train_split, dev_split = (JudgedCollection.locate(folder, split) for split in ("train", "dev"))
        embeddings = load_current(settings)
        checkpoint = Checkpoint.load(served)
        check_embeddings(served, checkpoint.embeddings_version, embeddings.version)
        backend, built = train_split.backend(settings)
    return Adaptation(served, checkpoint, plan, folder, train_split, dev_split, embeddings, backend, built)


def fine_tune(adaptation: Adaptation, config: TrainConfig) -> FineTuned:
    """The served model fine-tuned on the train pseudo-queries, and its dev NDCG@20 before."""
    from training.data import DocumentRows, TrainingError, build_candidates
    from training.metrics import PAPER_NDCG20, mean_metric
    from training.train import fine_tune_model, model_score_fn, score_candidates

    a = adaptation
    lex_names = a.checkpoint.config.lex_names
    doc_rows = DocumentRows(a.backend.stats, a.embeddings)
    train_c = build_candidates(a.train_split.queries, a.train_split.qrels, a.backend, a.embeddings, lex_names)
    dev_c = build_candidates(a.dev_split.queries, a.dev_split.qrels, a.backend, a.embeddings, lex_names)
    model = a.checkpoint.build_model(a.embeddings.vectors)
    dev_scores = score_candidates(model_score_fn(model), dev_c, doc_rows)
    before = mean_metric(PAPER_NDCG20, a.dev_split.qrels, dev_c, dev_scores)
    click.echo(f"served model on the dev pseudo-queries: NDCG@20 {before:.4f}")
    with as_cli_error(TrainingError):
        result = fine_tune_model(model, train_c, dev_c, a.dev_split.qrels, doc_rows, config)
    return FineTuned(result, before, len(train_c), len(dev_c))


def adaptation_record(
    adaptation: Adaptation, request: AdaptRequest, config: TrainConfig, tuned: FineTuned
) -> dict[str, object]:
    """The JSON record saved beside the adapted checkpoint."""
    a, result = adaptation, tuned.result
    return {
        "variant": a.served.stem,
        "adapted_from": str(a.served),
        "adapted_to": str(request.data),
        "pseudo_queries": str(a.folder),
        "command": command_line(),
        "train": asdict(config),
        "lex_features": list(a.checkpoint.config.lex_names),
        "train_queries": tuned.train_queries,
        "dev_queries": tuned.dev_queries,
        "served_dev_ndcg20": tuned.before,
        "history": result.history,
        "best_epoch": result.best_epoch,
        "best_dev_ndcg20": result.best_dev,
        "seconds": result.seconds,
        "machine": machine_description(),
    }


def save_adapted(adaptation: Adaptation, tuned: FineTuned, record: dict[str, object]) -> Path:
    """The adapted checkpoint, its curve and its record, beside the served one."""
    from training.plots import plot_training_curve
    from worker.model import Checkpoint

    a, result = adaptation, tuned.result
    adapted = Checkpoint(
        a.checkpoint.config,
        result.model.state_dict(),
        a.embeddings.version,
        a.backend.stats.version,
        {**result_metrics(result), "served_dev_ndcg20": tuned.before},
    )
    path = a.plan.checkpoint
    adapted.save(path)
    plot_training_curve(result.history, path.with_suffix(".png"), f"{a.served.stem}, adapted to {a.plan.name}")
    path.with_suffix(".json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    return path


def adapt_served_model(ctx: click.Context, request: AdaptRequest) -> None:
    """``esrr train --adapt``: fine-tune the served model on ``data``'s pseudo-queries, then evaluate both."""
    from training.adapt import ADAPT_TRAINING
    from worker.settings import WorkerSettings

    settings = load_settings(WorkerSettings)
    served = served_checkpoint(settings)
    config = request.overrides.applied_to(ADAPT_TRAINING)
    config = replace(config, negatives_per_positive=config.negatives_drawn)
    a = prepare_adaptation(request, settings, served, config)
    click.echo(
        f"adapting {a.served} to {request.data}: {len(a.train_split.queries)} train / {len(a.dev_split.queries)} dev "
        f"pseudo-queries (titles of blank-titled records) in {a.folder}; "
        f"{'built' if a.built else 'reusing'} its index ({a.backend.stats.n_docs} documents); {config}"
    )
    tuned = fine_tune(a, config)
    path = save_adapted(a, tuned, adaptation_record(a, request, config, tuned))
    result, before = tuned.result, tuned.before
    click.echo(
        f"adapted: best dev NDCG@20 {result.best_dev:.4f} at epoch {result.best_epoch} against the served "
        f"model's {before:.4f} ({result.seconds:.0f} s) -> {path}"
    )
    click.echo(f"serve it with ESRR_CHECKPOINT={path}")
    if not request.test:
        click.echo(f"its test, once settings are chosen: esrr eval --data {a.folder} --adapted {path}")
        return
    click.echo("its test on the held-out titles:")
    ctx.invoke(
        evaluate,
        data=a.folder,
        split="test",
        out=Path("reports") / "adapt" / f"{a.plan.name}{request.suffix}",
        adapted=path,
    )
