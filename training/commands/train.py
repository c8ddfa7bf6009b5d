"""``esrr train``: the Delta variants (or the DRMM baseline) trained on NFCorpus train, early-stopped on dev."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from es_rerank.cli_options import FiniteFloat, load_settings, writable_dir
from es_rerank.machine import machine_description
from training.commands.adapt import AdaptRequest, adapt_served_model
from training.commands.variants import DRMM_NAME, PAPER_VARIANT_NAMES, VARIANT_NAMES, checkpoint_path
from training.commands.workspace import (
    Workspace,
    as_cli_error,
    command_line,
    open_workspace,
    result_metrics,
    split_queries,
    with_relevant,
)

if TYPE_CHECKING:
    from training.data import QueryCandidates
    from training.drmm import DRMMCheckpoint
    from training.train import TrainConfig, TrainOverrides, TrainResult
    from worker.model import SavedModel

# The options that choose what is trained from judgments; --adapt fine-tunes the served model instead.
NOT_FOR_ADAPT = ("variants", "data", "judged_positives", "train_queries", "dev_queries", "lex_features", "dropout")


@dataclass(frozen=True)
class TrainRequest:
    """What ``esrr train`` was asked to train, its options checked."""

    variants: tuple[str, ...]  # the names, 'all' expanded, in order and without repeats
    data: Path | None
    dropout: float | None
    judged_positives: bool
    train_queries: int | None
    dev_queries: int | None
    lex_features: tuple[str, ...]  # --lex-features, empty when not given
    suffix: str
    overrides: TrainOverrides  # TrainConfig fields given on the command line


@dataclass(frozen=True)
class TrainingData:
    """The judged queries and BM25 candidates one training run reads."""

    train_queries: dict[str, str]
    dev_queries: dict[str, str]
    dev_qrels: dict[str, dict[str, int]]
    train_candidates: list[QueryCandidates]
    dev_candidates: list[QueryCandidates]
    lex_names: list[str]  # the Lex columns of the candidates


@dataclass(frozen=True)
class TrainedModel:
    """A trained variant: its run, its checkpoint and how its curve and record name it."""

    result: TrainResult
    checkpoint: SavedModel
    label: str
    dropout: float | None
    lex_features: list[str]


def _check_device(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--device`` as torch names it, checked against this machine before the candidates are built."""
    if value is None:
        return None
    if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise click.BadParameter(f"{value!r}: use cpu, cuda or cuda:N")
    from worker.scorer import resolve_device

    try:
        return str(resolve_device(value))
    except ValueError as error:  # CUDA asked for where there is none, or not that many devices
        raise click.BadParameter(str(error)) from None


def _check_suffix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--suffix`` names a file beside the served checkpoints, never a path elsewhere."""
    if not re.fullmatch(r"[A-Za-z0-9._-]*", value) or ".." in value:
        raise click.BadParameter(
            f"{value!r}: use letters, digits, '.', '_' and '-' only (e.g. -seed14); "
            "the checkpoint is saved beside the others in the models directory"
        )
    return value


def lex_feature_names(option: str | None) -> list[str]:
    """The ``--lex-features`` list, checked against the 18 features."""
    from es_rerank.lex import check_feature_names

    if option is None:
        return []
    try:
        return list(check_feature_names([n.strip() for n in option.split(",") if n.strip()]))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--lex-features") from None


def variant_names(variants: tuple[str, ...]) -> tuple[str, ...]:
    """The variants asked for, 'all' read as the paper's four, in order and each once."""
    return tuple(dict.fromkeys(n for v in variants for n in (PAPER_VARIANT_NAMES if v == "all" else [v])))


def check_train_options(names: tuple[str, ...], lex_option: str | None, suffix: str, device: str | None) -> None:
    """Usage errors for options that do not go together, before any data is read."""
    from worker.model import VARIANTS

    if lex_option and not any(VARIANTS.get(name, {}).get("lex_names") for name in names):
        raise click.UsageError(
            f"--lex-features changes the Lex features of delta-32-lex3 only; the variant(s) "
            f"{', '.join(names)} read none (add --variant delta-32-lex3, or drop the option)"
        )
    built_in = {*VARIANT_NAMES, DRMM_NAME}
    clashes = [f"{name}{suffix}" for name in names if suffix and f"{name}{suffix}" in built_in]
    if clashes:  # e.g. delta-32 + "-lex3" would replace the served delta-32-lex3.pt with another model
        raise click.UsageError(
            f"--suffix={suffix} names {', '.join(clashes)}.pt, the checkpoint of another "
            "variant; pick a suffix that makes a new name (e.g. --suffix=-seed14)"
        )
    if device not in (None, "cpu") and DRMM_NAME in names:
        raise click.UsageError(
            f"--device {device} trains the Delta variants; DRMM trains on the CPU "
            "only: train it in a run of its own without --device"
        )
    if lex_option and not suffix:
        raise click.UsageError(
            "--lex-features needs --suffix, so the served delta-32-lex3.pt is not replaced "
            "by a model with other features (e.g. --suffix=-lexg)"
        )


def variant_lex_features(request: TrainRequest) -> dict[str, tuple[str, ...]]:
    """Each Lex variant's features: --lex-features if given, else its own."""
    from worker.model import VARIANTS

    return {
        name: request.lex_features or VARIANTS[name]["lex_names"]
        for name in request.variants
        if VARIANTS.get(name, {}).get("lex_names")
    }


def training_data(
    work: Workspace,
    queries: tuple[dict[str, str], dict[str, str]],
    lex_names: list[str],
    judged_positives: bool,
) -> TrainingData:
    """The train and dev queries' BM25 candidates (the slow part), with every Lex column some variant reads."""
    from training.data import build_candidates

    train_q, dev_q = queries
    dev_qrels = work.nfcorpus.qrels("dev")
    train_c = build_candidates(
        train_q, work.nfcorpus.qrels("train"), work.backend, work.embeddings, lex_names, add_judged=judged_positives
    )
    dev_c = with_relevant(build_candidates(dev_q, dev_qrels, work.backend, work.embeddings, lex_names), work, "dev")
    return TrainingData(train_q, dev_q, dev_qrels, train_c, dev_c, lex_names)


def train_drmm(work: Workspace, data: TrainingData, train_config: TrainConfig) -> TrainedModel:
    """Train DRMM on the same candidates and triples as the Delta models."""
    from training.data import TrainingError
    from training.drmm import DRMMCheckpoint, HistogramBuilder, build_histograms
    from training.drmm import train_drmm as fit_drmm

    with as_cli_error(TrainingError):
        builder = HistogramBuilder(work.backend.stats, work.embeddings)
        result = fit_drmm(
            data.train_candidates,
            build_histograms(data.train_candidates, data.train_queries, builder),
            data.dev_candidates,
            build_histograms(data.dev_candidates, data.dev_queries, builder),
            data.dev_qrels,
            train_config,
            builder.config,
        )
    checkpoint: DRMMCheckpoint = DRMMCheckpoint(
        builder.config,
        result.model.state_dict(),
        work.embeddings.version,
        work.backend.stats.version,
        result_metrics(result),
    )
    return TrainedModel(result, checkpoint, "DRMM", None, [])


def train_delta(
    work: Workspace, data: TrainingData, variant: str, request: TrainRequest, train_config: TrainConfig
) -> TrainedModel:
    """Train one Delta variant, with the Lex features it reads."""
    from training.data import TrainingError, select_features
    from training.train import train_model
    from worker.model import VARIANTS, Checkpoint, DeltaConfig

    options = dict(VARIANTS[variant])
    if options.get("lex_names"):
        options["lex_names"] = variant_lex_features(request)[variant]
    config = DeltaConfig(**options, embedding_dim=work.embeddings.vectors.shape[1])
    if request.dropout is not None:
        config = replace(config, dropout=request.dropout)
    with as_cli_error(TrainingError):
        result = train_model(
            config,
            work.embeddings.vectors,
            select_features(data.train_candidates, data.lex_names, config.lex_names),
            select_features(data.dev_candidates, data.lex_names, config.lex_names),
            data.dev_qrels,
            work.doc_rows,
            train_config,
        )
    checkpoint = Checkpoint(
        config, result.model.state_dict(), work.embeddings.version, work.backend.stats.version, result_metrics(result)
    )
    label = VARIANT_NAMES[variant]
    if request.lex_features and config.lex_names:
        label = f"Delta-32 + {', '.join(config.lex_names)}"
    return TrainedModel(result, checkpoint, label, config.dropout, list(config.lex_names))


def training_record(
    variant: str, trained: TrainedModel, request: TrainRequest, data: TrainingData, train_config: TrainConfig
) -> dict[str, object]:
    """The JSON record saved beside a checkpoint: how it was trained, its curve, where."""
    result = trained.result
    return {
        "variant": variant,
        "command": command_line(),
        "train": asdict(train_config),
        "dropout": trained.dropout,
        "lex_features": trained.lex_features,
        "judged_positives": request.judged_positives,
        "train_queries": len(data.train_queries),
        "dev_queries": len(data.dev_queries),
        "history": result.history,
        "best_epoch": result.best_epoch,
        "best_dev_ndcg20": result.best_dev,
        "seconds": result.seconds,
        "machine": machine_description(),
    }


def save_trained(work: Workspace, variant: str, trained: TrainedModel, record: dict[str, object], suffix: str) -> None:
    """The checkpoint, its training curve and its record, under the models directory; one line saying so."""
    from training.plots import plot_training_curve

    path = checkpoint_path(work.settings, variant + suffix)
    trained.checkpoint.save(path)
    plot_training_curve(trained.result.history, path.with_suffix(".png"), trained.label)
    path.with_suffix(".json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    result = trained.result
    click.echo(
        f"{variant}: best dev NDCG@20 {result.best_dev:.4f} at epoch {result.best_epoch} "
        f"({result.seconds:.0f} s) -> {path}"
    )


def train_variants(request: TrainRequest) -> None:
    """Train every variant of ``request`` on one set of candidates and save each."""
    from es_rerank.lex import LEX3
    from training.train import TrainConfig

    lex_names = list(dict.fromkeys(f for fs in variant_lex_features(request).values() for f in fs)) or list(LEX3)
    settings = load_settings()
    writable_dir(settings.models_dir, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    work = open_workspace(request.data, settings)
    train_config = request.overrides.applied_to(TrainConfig())
    # The record names the number of negatives used.
    train_config = replace(train_config, negatives_per_positive=train_config.negatives_drawn)
    queries = split_queries(work, "train", request.train_queries), split_queries(work, "dev", request.dev_queries)
    click.echo(
        f"{len(queries[0])} train / {len(queries[1])} dev queries; embeddings {work.embeddings.version}; "
        f"index {work.backend.stats.version}; {train_config}"
    )
    started = time.perf_counter()
    data = training_data(work, queries, lex_names, request.judged_positives)
    click.echo(f"candidates ready in {time.perf_counter() - started:.0f} s")
    for variant in request.variants:
        if variant == DRMM_NAME:
            trained = train_drmm(work, data, train_config)
        else:
            trained = train_delta(work, data, variant, request, train_config)
        save_trained(
            work, variant, trained, training_record(variant, trained, request, data, train_config), request.suffix
        )


def refuse_options_adapt_ignores(ctx: click.Context) -> None:
    """A usage error naming the options of training from judgments that were given with --adapt."""
    given = [
        f"--{name.replace('_', '-')}"
        for name in NOT_FOR_ADAPT
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise click.UsageError(
            f"--adapt fine-tunes the served model on its own pseudo-queries; "
            f"{', '.join(given).replace('--variants', '--variant')} do not apply to it"
        )


@click.command()
@click.option(
    "--variant",
    "variants",
    multiple=True,
    default=["delta-32-lex3-window"],
    show_default=True,
    type=click.Choice([*VARIANT_NAMES, DRMM_NAME, "all"]),
    help="Model(s) to train: delta-32-lex3-window is served by default (chosen on dev under shift), "
    "delta-32-lex3 is the paper's; 'all' trains the paper's four Delta variants, 'drmm' the DRMM "
    "baseline.",
)
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option("--max-epochs", type=click.IntRange(min=1), help="Upper bound on epochs (early stopping on dev decides).")
@click.option("--patience", type=click.IntRange(min=1), help="Epochs without a dev improvement before stopping.")
@click.option("--learning-rate", type=FiniteFloat(min=0, min_open=True), help="Adagrad learning rate.")
@click.option("--l2-conv", type=FiniteFloat(min=0), help="L2 coefficient of the convolution weights.")
@click.option("--l2-dense", type=FiniteFloat(min=0), help="L2 coefficient of the feed-forward weights.")
@click.option(
    "--dropout",
    type=FiniteFloat(0, 1, max_open=True),
    help="Dropout before the max-pool (Delta models; DRMM has none).",
)
@click.option("--max-positives", type=click.IntRange(min=1), help="Relevant documents drawn per query and epoch.")
@click.option("--negatives", type=click.Choice(["uniform", "rank"]), help="How negatives are drawn from the top-500.")
@click.option(
    "--negatives-per-positive",
    type=click.IntRange(min=1),
    help="Non-relevant documents paired with each relevant one per epoch (default: 1, balanced, "
    "for the hinge loss; 8 for softmax).",
)
@click.option(
    "--loss",
    type=click.Choice(["hinge", "softmax"]),
    help="hinge: the paper's weighted max-margin on triples (default); softmax: listwise, each "
    "relevant document against --negatives-per-positive non-relevant ones.",
)
@click.option(
    "--judged-positives/--retrieved-only",
    default=False,
    show_default=True,
    help="Also train on relevant documents BM25 did not retrieve (never seen when reranking).",
)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), help="Seed of python, numpy and torch (13 by default).")
@click.option(
    "--device",
    callback=_check_device,
    help="cpu (the default, the recipe's), cuda or cuda:N: where the Delta models train (DRMM: CPU only).",
)
@click.option("--train-queries", type=click.IntRange(min=1), help="Use only the first N training queries (quick runs).")
@click.option("--dev-queries", type=click.IntRange(min=1), help="Use only the first N dev queries for early stopping.")
@click.option(
    "--lex-features",
    help="Comma-separated Lex features replacing Lex3 (e.g. the ones "
    "`esrr select-features` chose); see es_rerank.lex.ALL_FEATURES.",
)
@click.option(
    "--suffix",
    default="",
    callback=_check_suffix,
    help="Save as <variant><suffix>.pt (tuning runs that must not replace the served model).",
)
@click.option(
    "--adapt",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Fine-tune the served model (ESRR_CHECKPOINT) on this collection without judgments: each "
    "titled record's title is a query for that record (BEIR folder or file, PubMed XML). Writes "
    "<served>-adapted-<name>.pt beside the served checkpoint, then `esrr eval` of both on "
    "held-out titles.",
)
@click.option(
    "--adapt-queries",
    type=click.IntRange(min=1),
    default=None,
    help="With --adapt: titles trained on (default 1500; 200 more choose the epoch, 300 test).",
)
@click.option(
    "--adapt-test/--no-adapt-test",
    default=True,
    show_default=True,
    help="With --adapt: end with `esrr eval --adapted` on the held-out test titles (--no-adapt-test: "
    "while settings are still being chosen on dev).",
)
@click.pass_context
def train(
    ctx: click.Context,
    *,
    variants: tuple[str, ...],
    data: Path | None,
    dropout: float | None,
    judged_positives: bool,
    train_queries: int | None,
    dev_queries: int | None,
    lex_features: str | None,
    suffix: str,
    adapt: Path | None,
    adapt_queries: int | None,
    adapt_test: bool,
    **config_options: Any,  # the TrainConfig options above, typed by their click types
) -> None:
    """Train Delta models (or the DRMM baseline) on NFCorpus train, early-stopped on dev NDCG@20.

    With --adapt DIR: fine-tune the served model on DIR's own titles instead (no judgments needed).
    """
    from training.train import TrainOverrides

    overrides = TrainOverrides(**config_options)
    if adapt is not None:
        refuse_options_adapt_ignores(ctx)
        adapt_served_model(ctx, AdaptRequest(adapt, suffix, adapt_queries, adapt_test, overrides))
        return
    if adapt_queries is not None or not adapt_test:
        raise click.UsageError("--adapt-queries and --no-adapt-test size and check an adaptation; give --adapt DIR too")
    names = variant_names(variants)
    check_train_options(names, lex_features, suffix, overrides.device)
    request = TrainRequest(
        variants=names,
        data=data,
        dropout=dropout,
        judged_positives=judged_positives,
        train_queries=train_queries,
        dev_queries=dev_queries,
        lex_features=tuple(lex_feature_names(lex_features)),
        suffix=suffix,
        overrides=overrides,
    )
    train_variants(request)
