"""``esrr train`` and ``esrr eval``: the model recipe and the Table 2 evaluation on NFCorpus."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import FiniteFloat, load_settings, writable_dir
from es_rerank.machine import machine_description
from es_rerank.settings import CommonSettings, checkpoint_list

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy as np

    from es_rerank.backends import SearchBackend
    from es_rerank.embeddings import Embeddings
    from es_rerank.ranking.feedback import FeedbackParams
    from es_rerank.ranking.neighbours import JudgedNeighbours
    from es_rerank.stats import CorpusStats
    from index_setup.nfcorpus import NFCorpus
    from training.data import DocumentRows, QueryCandidates
    from training.drmm import DRMMCheckpoint
    from training.metrics import Run
    from training.train import TrainConfig, TrainResult
    from worker.model import Checkpoint, SavedModelT

PAPER_VARIANT_NAMES = {  # what --variant all trains: the paper's Table 2 and 6
    "delta-32": "Delta-32",
    "delta-32-lex3": "Delta-32-Lex3",
    "delta-32-no-difference": "Delta-32, no difference vectors",
    "delta-32-no-delta-features": "Delta-32, no Delta features",
}
VARIANT_NAMES = {**PAPER_VARIANT_NAMES, "delta-32-lex3-window": "Delta-32-Lex3, window-standardised"}
BASELINE_ROWS = ("Uninformed (reverse doc id)", "BM25", "BM25-Title", "WMD-Title")
DRMM_NAME = "drmm"  # the histogram baseline of Table 2 (training.drmm)


@dataclass
class Workspace:
    """Everything the train and eval commands share: data, index, embeddings."""

    settings: CommonSettings
    nfcorpus: NFCorpus | None  # None: another judged collection (esrr eval --data)
    backend: SearchBackend
    embeddings: Embeddings
    doc_rows: DocumentRows

    def split_candidates(
        self, split: str, lex_names: Sequence[str] | None = None, progress: bool = True
    ) -> list[QueryCandidates]:
        """BM25 top-500 candidates of every query of an NFCorpus split, graded, with Lex features (Lex3 by default)."""
        from es_rerank.lex import LEX3
        from training.data import build_candidates

        return build_candidates(
            self.nfcorpus.queries(split),
            self.nfcorpus.qrels(split),
            self.backend,
            self.embeddings,
            LEX3 if lex_names is None else lex_names,
            progress=progress,
        )


def open_workspace(data: Path | None, settings: CommonSettings | None = None) -> Workspace:
    """Locate NFCorpus, the served embedded index and the current embeddings (settings from ESRR_* if not given)."""
    from es_rerank.backends import BackendError, open_backend
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.nfcorpus import NFCorpus
    from training.data import DocumentRows

    settings = settings or load_settings()
    try:
        nfcorpus = NFCorpus.locate(data, settings)
        backend = open_backend(settings)
        embeddings = load_current(settings)
    except (BackendError, EmbeddingsError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    return Workspace(settings, nfcorpus, backend, embeddings, DocumentRows(backend.stats, embeddings))


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


MAX_FILE_NAME_BYTES = 255  # ext4, xfs, btrfs and most others


def checkpoint_path(settings: CommonSettings, variant: str) -> Path:
    """Where the checkpoint of a variant lives."""
    return settings.models_dir / f"{variant}.pt"


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
    **overrides,
) -> None:
    """Train Delta models (or the DRMM baseline) on NFCorpus train, early-stopped on dev NDCG@20.

    With --adapt DIR: fine-tune the served model on DIR's own titles instead (no judgments needed).
    """
    if adapt is not None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in (
                "variants",
                "data",
                "judged_positives",
                "train_queries",
                "dev_queries",
                "lex_features",
                "dropout",
            )
            if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
        ]
        if given:
            raise click.UsageError(
                f"--adapt fine-tunes the served model on its own pseudo-queries; "
                f"{', '.join(given).replace('--variants', '--variant')} do not apply to it"
            )
        _adapt(ctx, adapt, suffix, adapt_queries, adapt_test, overrides)
        return
    if adapt_queries is not None or not adapt_test:
        raise click.UsageError("--adapt-queries and --no-adapt-test size and check an adaptation; give --adapt DIR too")
    from es_rerank.lex import LEX3
    from training.data import TrainingError, build_candidates, select_features
    from training.plots import plot_training_curve
    from training.train import TrainConfig, train_model
    from worker.model import VARIANTS, Checkpoint, DeltaConfig

    names = list(dict.fromkeys(n for v in variants for n in (PAPER_VARIANT_NAMES if v == "all" else [v])))
    if lex_features and not any(VARIANTS.get(name, {}).get("lex_names") for name in names):
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
    if overrides.get("device") not in (None, "cpu") and DRMM_NAME in names:
        raise click.UsageError(
            f"--device {overrides['device']} trains the Delta variants; DRMM trains on the CPU "
            "only: train it in a run of its own without --device"
        )
    if lex_features and not suffix:
        raise click.UsageError(
            "--lex-features needs --suffix, so the served delta-32-lex3.pt is not replaced "
            "by a model with other features (e.g. --suffix=-lexg)"
        )
    asked = _lex_names(lex_features)
    # Each Lex variant reads --lex-features if given, else its own; the candidates carry every one needed.
    variant_lex = {
        name: tuple(asked) if asked else VARIANTS[name]["lex_names"]
        for name in names
        if VARIANTS.get(name, {}).get("lex_names")
    }
    lex_names = list(dict.fromkeys(f for features in variant_lex.values() for f in features)) or list(LEX3)
    settings = load_settings()
    writable_dir(settings.models_dir, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    work = open_workspace(data, settings)
    train_config = replace(TrainConfig(), **{k: v for k, v in overrides.items() if v is not None})
    # The record names the number of negatives used.
    train_config = replace(train_config, negatives_per_positive=train_config.negatives_drawn)
    train_qrels, dev_qrels = work.nfcorpus.qrels("train"), work.nfcorpus.qrels("dev")
    train_q = _split_queries(work, "train", train_queries)
    dev_q = _split_queries(work, "dev", dev_queries)
    click.echo(
        f"{len(train_q)} train / {len(dev_q)} dev queries; embeddings {work.embeddings.version}; "
        f"index {work.backend.stats.version}; {train_config}"
    )
    started = time.perf_counter()
    train_c = build_candidates(
        train_q, train_qrels, work.backend, work.embeddings, lex_names, add_judged=judged_positives
    )
    dev_c = _with_relevant(build_candidates(dev_q, dev_qrels, work.backend, work.embeddings, lex_names), work, "dev")
    click.echo(f"candidates ready in {time.perf_counter() - started:.0f} s")
    for variant in names:
        if variant == DRMM_NAME:
            with _as_cli_error(TrainingError):
                result, checkpoint = _train_drmm(work, train_c, train_q, dev_c, dev_q, dev_qrels, train_config)
            label, config_dropout = "DRMM", None
        else:
            options = dict(VARIANTS[variant])
            if options.get("lex_names"):
                options["lex_names"] = variant_lex[variant]
            config = DeltaConfig(
                **options,
                embedding_dim=work.embeddings.vectors.shape[1],
                **({"dropout": dropout} if dropout is not None else {}),
            )
            with _as_cli_error(TrainingError):
                result = train_model(
                    config,
                    work.embeddings.vectors,
                    select_features(train_c, lex_names, config.lex_names),
                    select_features(dev_c, lex_names, config.lex_names),
                    dev_qrels,
                    work.doc_rows,
                    train_config,
                )
            checkpoint = Checkpoint(
                config, result.model.state_dict(), work.embeddings.version, work.backend.stats.version, _metrics(result)
            )
            label = VARIANT_NAMES[variant]
            if lex_features and config.lex_names:
                label = f"Delta-32 + {', '.join(config.lex_names)}"
            config_dropout = config.dropout
        path = checkpoint_path(work.settings, variant + suffix)
        checkpoint.save(path)
        plot_training_curve(result.history, path.with_suffix(".png"), label)
        path.with_suffix(".json").write_text(
            json.dumps(
                {
                    "variant": variant,
                    "command": _command(),
                    "train": asdict(train_config),
                    "dropout": config_dropout,
                    "lex_features": list(config.lex_names) if variant != DRMM_NAME else [],
                    "judged_positives": judged_positives,
                    "train_queries": len(train_q),
                    "dev_queries": len(dev_q),
                    "history": result.history,
                    "best_epoch": result.best_epoch,
                    "best_dev_ndcg20": result.best_dev,
                    "seconds": result.seconds,
                    "machine": machine_description(),
                },
                indent=2,
            ),
            encoding="utf-8",
        )
        click.echo(
            f"{variant}: best dev NDCG@20 {result.best_dev:.4f} at epoch {result.best_epoch} "
            f"({result.seconds:.0f} s) -> {path}"
        )


def _adapt(ctx: click.Context, data: Path, suffix: str, n_train: int | None, test: bool, overrides: dict) -> None:
    """``esrr train --adapt``: fine-tune the served model on ``data``'s pseudo-queries, then evaluate both."""
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.readers import CorpusFormatError, read_corpus
    from training.adapt import (
        ADAPT_TRAIN_QUERIES,
        ADAPT_TRAINING,
        AdaptationError,
        plan_adaptation,
        pseudo_collection,
        write_pseudo_collection,
    )
    from training.collection import CollectionError, JudgedCollection
    from training.data import DocumentRows, TrainingError, build_candidates
    from training.metrics import PAPER_NDCG20, mean_metric
    from training.plots import plot_training_curve
    from training.train import fine_tune_model, model_score_fn, score_candidates
    from worker.model import Checkpoint
    from worker.settings import WorkerSettings

    settings = load_settings(WorkerSettings)
    if len(settings.checkpoint_paths) > 1:
        raise click.UsageError("ESRR_CHECKPOINT names an ensemble; --adapt fine-tunes one model: name one member")
    served = settings.checkpoint_path
    if not served.is_file():
        raise click.ClickException(f"no served model at {served} to adapt; train one first with `esrr train`")
    writable_dir(served.parent, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    config = replace(ADAPT_TRAINING, **{k: v for k, v in overrides.items() if v is not None})
    config = replace(config, negatives_per_positive=config.negatives_drawn)
    with _as_cli_error(
        AdaptationError, CorpusFormatError, FileNotFoundError, CollectionError, EmbeddingsError, ValueError
    ):
        plan = plan_adaptation(data, served, settings.home, n_train or ADAPT_TRAIN_QUERIES, suffix=suffix)
        condition = pseudo_collection(plan, list(read_corpus(data)), seed=config.seed)
        folder = write_pseudo_collection(plan, condition)
        train_split, dev_split = (JudgedCollection.locate(folder, split) for split in ("train", "dev"))
        embeddings = load_current(settings)
        checkpoint = Checkpoint.load(served)
        _check_embeddings(served, checkpoint.embeddings_version, embeddings.version)
        backend, built = train_split.backend(settings)
    click.echo(
        f"adapting {served} to {data}: {len(train_split.queries)} train / {len(dev_split.queries)} dev "
        f"pseudo-queries (titles of blank-titled records) in {folder}; "
        f"{'built' if built else 'reusing'} its index ({backend.stats.n_docs} documents); {config}"
    )
    lex_names = checkpoint.config.lex_names
    doc_rows = DocumentRows(backend.stats, embeddings)
    train_c = build_candidates(train_split.queries, train_split.qrels, backend, embeddings, lex_names)
    dev_c = build_candidates(dev_split.queries, dev_split.qrels, backend, embeddings, lex_names)
    model = checkpoint.build_model(embeddings.vectors)
    before = mean_metric(PAPER_NDCG20, dev_split.qrels, dev_c, score_candidates(model_score_fn(model), dev_c, doc_rows))
    click.echo(f"served model on the dev pseudo-queries: NDCG@20 {before:.4f}")
    with _as_cli_error(TrainingError):
        result = fine_tune_model(model, train_c, dev_c, dev_split.qrels, doc_rows, config)
    adapted = Checkpoint(
        checkpoint.config,
        result.model.state_dict(),
        embeddings.version,
        backend.stats.version,
        {**_metrics(result), "served_dev_ndcg20": before},
    )
    adapted.save(plan.checkpoint)
    plot_training_curve(result.history, plan.checkpoint.with_suffix(".png"), f"{served.stem}, adapted to {plan.name}")
    plan.checkpoint.with_suffix(".json").write_text(
        json.dumps(
            {
                "variant": served.stem,
                "adapted_from": str(served),
                "adapted_to": str(data),
                "pseudo_queries": str(folder),
                "command": _command(),
                "train": asdict(config),
                "lex_features": list(lex_names),
                "train_queries": len(train_c),
                "dev_queries": len(dev_c),
                "served_dev_ndcg20": before,
                "history": result.history,
                "best_epoch": result.best_epoch,
                "best_dev_ndcg20": result.best_dev,
                "seconds": result.seconds,
                "machine": machine_description(),
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    click.echo(
        f"adapted: best dev NDCG@20 {result.best_dev:.4f} at epoch {result.best_epoch} against the served "
        f"model's {before:.4f} ({result.seconds:.0f} s) -> {plan.checkpoint}"
    )
    click.echo(f"serve it with ESRR_CHECKPOINT={plan.checkpoint}")
    if not test:
        click.echo(f"its test, once settings are chosen: esrr eval --data {folder} --adapted {plan.checkpoint}")
        return
    click.echo("its test on the held-out titles:")
    ctx.invoke(
        evaluate,
        data=folder,
        split="test",
        out=Path("reports") / "adapt" / f"{plan.name}{suffix}",
        adapted=plan.checkpoint,
    )


def _lex_names(option: str | None) -> list[str]:
    """The ``--lex-features`` list, checked against the 18 features."""
    from es_rerank.lex import check_feature_names

    if option is None:
        return []
    try:
        return list(check_feature_names([n.strip() for n in option.split(",") if n.strip()]))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--lex-features") from None


def _labelled_checkpoints(option: str, ensemble: bool) -> tuple[str, list[Path]]:
    """LABEL=CHECKPOINT (``--extra``) or LABEL=CHECKPOINT,CHECKPOINT[,...] (``--ensemble``), files checked."""
    label, sep, paths = option.partition("=")
    param_hint = "--ensemble" if ensemble else "--extra"
    if ensemble:
        try:  # the same list ESRR_CHECKPOINT serves
            members = list(checkpoint_list(paths)) if paths.strip() else []
        except ValueError as error:
            raise click.BadParameter(f"row {label!r}: {error}", param_hint=param_hint) from None
        expected, enough = "LABEL=CHECKPOINT,CHECKPOINT[,...] with at least two existing checkpoint files", 2
    else:
        members = [Path(paths)] if paths else []
        expected, enough = "LABEL=CHECKPOINT with an existing checkpoint file", 1
    missing = [str(p) for p in members if not p.is_file()]
    if not sep or not label or len(members) < enough or missing:
        found = f" (no such file: {', '.join(missing)})" if missing else ""
        raise click.BadParameter(f"{option!r}: expected {expected}{found}", param_hint=param_hint)
    return label, members


def _metrics(result: TrainResult) -> dict[str, float]:
    return {"dev_ndcg20": result.best_dev, "best_epoch": result.best_epoch, "train_seconds": result.seconds}


def _train_drmm(
    work: Workspace,
    train_c: list[QueryCandidates],
    train_q: dict[str, str],
    dev_c: list[QueryCandidates],
    dev_q: dict[str, str],
    dev_qrels: dict[str, dict[str, int]],
    train_config: TrainConfig,
) -> tuple[TrainResult, DRMMCheckpoint]:
    """Train DRMM on the same candidates and triples as the Delta models."""
    from training.drmm import DRMMCheckpoint, HistogramBuilder, build_histograms, train_drmm

    builder = HistogramBuilder(work.backend.stats, work.embeddings)
    result = train_drmm(
        train_c,
        build_histograms(train_c, train_q, builder),
        dev_c,
        build_histograms(dev_c, dev_q, builder),
        dev_qrels,
        train_config,
        builder.config,
    )
    return result, DRMMCheckpoint(
        builder.config, result.model.state_dict(), work.embeddings.version, work.backend.stats.version, _metrics(result)
    )


def _command() -> str:
    return "esrr " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _with_relevant(candidates: list[QueryCandidates], work: Workspace, split: str) -> list[QueryCandidates]:
    """The candidates, or a CLI error when none is relevant: every metric would be 0 and say nothing."""
    if not any((c.grades > 0).any() for c in candidates):
        judgments = f"{work.nfcorpus.root}/qrels/{split}.tsv" if work.nfcorpus is not None else "the judgments"
        raise click.ClickException(
            f"no {split} query has a relevant (grade > 0) document among its BM25 candidates; check that "
            f"{judgments} judge documents of the indexed corpus (`esrr index build`)"
        )
    return candidates


@contextmanager
def _as_cli_error(*errors: type[Exception]) -> Iterator[None]:
    """Report the given errors as a clean CLI error (their messages name the cause) instead of a traceback."""
    try:
        yield
    except errors as error:
        raise click.ClickException(str(error)) from None


def _split_queries(work: Workspace, split: str, n: int | None = None) -> dict[str, str]:
    """The split's judged queries with text, the first ``n`` by id if given; a CLI error if there are none."""
    queries = work.nfcorpus.queries(split)
    if not queries:
        raise click.ClickException(
            f"no {split} query has both judgments (qrels/{split}.tsv) and text "
            f"(queries.jsonl) in {work.nfcorpus.root}; check those two files"
        )
    _check_judged_are_indexed(
        work.backend.stats, work.nfcorpus.qrels(split), work.nfcorpus.qrels_path(split), work.nfcorpus.root
    )
    return {q: queries[q] for q in sorted(queries)[:n]} if n else queries


def _check_judged_are_indexed(
    stats: CorpusStats, qrels: Mapping[str, Mapping[str, int]], qrels_path: Path, corpus: Path
) -> None:
    """A CLI error when the index lacks half or more of the judged relevant documents, a warning for any.

    Scores against an index of another corpus would be near 0 and look like a result.
    """
    from es_rerank.ranking.neighbours import relevant_judgments

    judged = {d for docs in relevant_judgments(qrels).values() for d in docs}
    missing = sorted(d for d in judged if d not in stats)
    if not missing:
        return
    text = (
        f"{len(missing)} of the {len(judged)} documents judged relevant in {qrels_path} "
        f"(e.g. {missing[0]}) are not in the index {stats.version!r} ({stats.n_docs} documents)"
    )
    if 2 * len(missing) >= len(judged):
        raise click.ClickException(
            f"{text}: it holds another corpus. Build the index from this data first: "
            f"`esrr index build --data {corpus}`, or check that the judgments are of "
            f"{corpus}"
        )
    click.echo(f"warning: {text}; they count as not retrieved", err=True)


@click.command(name="select-features")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--ranker",
    default="delta",
    show_default=True,
    type=click.Choice(["delta", "linear"]),
    help="delta: train Delta-32 with the features (the paper's criterion); linear: a fast linear proxy.",
)
@click.option(
    "--max-features", default=3, show_default=True, type=click.IntRange(1, 18), help="Stop after this many features."
)
@click.option(
    "--max-epochs",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Epochs per trial (early stopping on dev).",
)
@click.option(
    "--patience",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Epochs without a dev improvement per trial.",
)
@click.option("--train-queries", type=click.IntRange(min=1), help="Use only the first N training queries (quick runs).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports/lex-selection"),
    show_default=True,
    help="Where selection-<ranker>.md and .json go.",
)
def select_features(
    data: Path | None,
    ranker: str,
    max_features: int,
    max_epochs: int,
    patience: int,
    train_queries: int | None,
    out: Path,
) -> None:
    """Greedy forward selection of Lex features on NFCorpus dev NDCG@20 (section 5.1)."""
    from es_rerank.lex import ALL_FEATURES, LEX3
    from training.data import TrainingError, build_candidates
    from training.feature_selection import delta_evaluator, greedy_select, linear_evaluator
    from training.train import TrainConfig

    writable_dir(out, "pass a folder you can write to as --out")
    work = open_workspace(data)
    train_config = replace(TrainConfig(), max_epochs=max_epochs, patience=patience)
    dev_qrels = work.nfcorpus.qrels("dev")
    train_q = _split_queries(work, "train", train_queries)
    train_c = build_candidates(train_q, work.nfcorpus.qrels("train"), work.backend, work.embeddings, ALL_FEATURES)
    dev_c = _with_relevant(
        build_candidates(_split_queries(work, "dev"), dev_qrels, work.backend, work.embeddings, ALL_FEATURES),
        work,
        "dev",
    )
    evaluate = (
        delta_evaluator(ALL_FEATURES, work.embeddings.vectors, train_c, dev_c, dev_qrels, work.doc_rows, train_config)
        if ranker == "delta"
        else linear_evaluator(ALL_FEATURES, train_c, dev_c, dev_qrels, train_config)
    )
    started = time.perf_counter()
    with _as_cli_error(TrainingError):
        steps = greedy_select(ALL_FEATURES, evaluate, max_features)
        seconds = time.perf_counter() - started
        paper = evaluate(LEX3)
    stem = out / f"selection-{ranker}"
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "command": _command(),
                "machine": machine_description(),
                "ranker": ranker,
                "train": asdict(train_config),
                "train_queries": len(train_q),
                "dev_queries": len(dev_c),
                "seconds": seconds,
                "steps": [asdict(s) for s in steps],
                "paper_lex3": {"features": list(LEX3), "dev_ndcg20": paper},
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    lines = [
        f"Command: `{_command()}`  ",
        f"Machine: {machine_description()}  ",
        f"Ranker: {ranker}; {len(train_q)} train / {len(dev_c)} dev queries; {seconds:.0f} s\n",
        "| step | feature added | dev NDCG@20 | runner-up |",
        "|---|---|---|---|",
    ]
    for i, step in enumerate(steps, 1):
        second = sorted(step.trials.items(), key=lambda kv: -kv[1])[1:2]
        runner = f"{second[0][0]} ({second[0][1]:.4f})" if second else ""
        lines.append(f"| {i} | {step.added} | {step.dev_ndcg20:.4f} | {runner} |")
    lines.append(f"\nThe paper's Lex3 ({', '.join(LEX3)}) with the same ranker: dev NDCG@20 {paper:.4f}.")
    report = "\n".join(lines) + "\n"
    stem.with_suffix(".md").write_text(report, encoding="utf-8")
    click.echo(report)


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
    from training.evaluate import evaluate_runs, first_stage_recall, write_report
    from training.served_eval import ServedEvaluationError

    if data is None and (queries_file or qrels_file):
        raise click.UsageError("--queries and --qrels name the parts of a collection given with --data")
    if data is None and split not in ("dev", "test"):
        raise click.BadParameter(
            f"{split!r}: NFCorpus is evaluated on dev or test (train trains the model)", param_hint="--split"
        )
    baselines = data is None if baselines is None else baselines
    extra_pairs = [_labelled_checkpoints(e, ensemble=False) for e in extras]
    ensemble_pairs = [_labelled_checkpoints(e, ensemble=True) for e in ensembles]
    _check_row_labels([label for label, _ in [*extra_pairs, *ensemble_pairs]])
    settings = load_settings()
    located = None if data is None else _locate_collection(data, split, queries_file, qrels_file)
    name = "nfcorpus" if located is None else located.index_name()
    out = out if out is not None else Path(f"reports/{name}-{split}")  # a dev run never overwrites test's
    runs_dir = settings.home / "runs" / (split if located is None else f"{name}/{split}")
    writable_dir(out, "pass a folder you can write to as --out")
    writable_dir(runs_dir, "make it a folder you can write to, or point ESRR_HOME elsewhere")
    work, queries, qrels, collection = _evaluation_collection(located, split, settings)
    neighbours = _evaluation_votes(work, queries)
    with _as_cli_error(ServedEvaluationError):
        served = _served_rows(work, queries, window, neighbours is not None)
    if served.skipped:
        click.echo(f"judged neighbours not applied: {served.skipped}")
    runs = dict(served.runs)
    adapted_default = None
    if adapted is not None:
        from training.served_eval import ADAPTED_PREFIX

        with _as_cli_error(ServedEvaluationError):
            other = _served_rows(work, queries, window, neighbours is not None, checkpoint=adapted)
        runs.update({ADAPTED_PREFIX + name: run for name, run in other.runs.items() if name not in served.runs})
        adapted_default = ADAPTED_PREFIX + other.default
    if baselines or extra_pairs or ensemble_pairs:
        runs.update(
            _research_runs(
                work,
                queries,
                qrels,
                split,
                window,
                {label: paths[0] for label, paths in extra_pairs},
                dict(ensemble_pairs),
                baselines,
                neighbours if served.skipped is None else None,
            )
        )
    rows = evaluate_runs(runs, qrels)
    recall = first_stage_recall(qrels, runs["BM25"], window)
    said = write_report(
        rows,
        runs,
        out,
        recall,
        _command(),
        machine_description(),
        runs_dir=runs_dir,
        split=split,
        collection=collection,
        depth=window,
        served_default=served.default,
    )
    click.echo((out / "table.md").read_text(encoding="utf-8").rsplit("\nVerdict: ", 1)[0].rstrip("\n"))
    click.echo(f"runs in {runs_dir}; report in {out}")
    click.echo(said)
    if adapted_default is not None:
        from training.evaluate import adaptation_verdict

        compared = adaptation_verdict(rows, served.default, adapted_default, f"{collection} {split}")
        with (out / "table.md").open("a", encoding="utf-8") as table:
            table.write(f"Adaptation: {compared}\n")
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        results.update(adapted_default=adapted_default, adaptation=compared)
        (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
        click.echo(compared)


def _locate_collection(data: Path, split: str, queries_file: Path | None, qrels_file: Path | None):
    """The judged collection at ``data`` (``JudgedCollection``), or a CLI error naming what is missing."""
    from index_setup.readers import CorpusFormatError
    from training.collection import CollectionError, JudgedCollection

    with _as_cli_error(CollectionError, CorpusFormatError, FileNotFoundError):
        return JudgedCollection.locate(data, split, queries_file, qrels_file)


def _evaluation_collection(
    located, split: str, settings: CommonSettings
) -> tuple[Workspace, dict[str, str], dict[str, dict[str, int]], str]:
    """The workspace (backend, embeddings), judged queries, judgments and name of the collection evaluated:
    NFCorpus on the served index when ``located`` is None, else ``located`` on an index of its own."""
    if located is None:
        work = open_workspace(None, settings)
        queries = _split_queries(work, split)
        return work, queries, dict(work.nfcorpus.qrels(split)), "NFCorpus"
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.readers import CorpusFormatError
    from training.data import DocumentRows

    with _as_cli_error(CorpusFormatError, FileNotFoundError, EmbeddingsError, ValueError):
        embeddings = load_current(settings)
        backend, built = located.backend(settings)
    click.echo(
        f"{'built' if built else 'reusing'} the index of {located.corpus} at {backend.version_dir} "
        f"({backend.stats.n_docs} documents)"
    )
    _check_judged_are_indexed(backend.stats, located.qrels, located.qrels_path, located.corpus)
    work = Workspace(settings, None, backend, embeddings, DocumentRows(backend.stats, embeddings))
    return work, located.queries, located.qrels, located.name


def _served_rows(
    work: Workspace, queries: Mapping[str, str], window: int, with_votes: bool, checkpoint: Path | None = None
):
    """The served pipeline's stages over the collection's index: the model (if trained; ``checkpoint`` instead of
    the served one if given), feedback, votes."""
    from es_rerank.ranking.assemble import served_pipeline
    from training.served_eval import served_runs
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
        return served_runs(pipeline, queries)
    finally:
        if pipeline.reranker is not None:
            pipeline.reranker.close()


def _research_runs(
    work: Workspace,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    split: str,
    window: int,
    extra_models: dict[str, Path],
    ensemble_models: dict[str, list[Path]],
    baselines: bool,
    neighbours: JudgedNeighbours | None,
) -> dict[str, Run]:
    """The paper's rows (baselines, trained variants) and the extra checkpoints, each with its twins."""
    from es_rerank.lex import KNOWN_FEATURES
    from training.data import build_candidates
    from training.evaluate import reverse_doc_id_scores, run_from_scores, title_bm25_scores, wmd_title_scores
    from worker.ensemble import ensemble_scores
    from worker.model import Checkpoint

    if os.environ.get("ESRR_CHECKPOINT", "").strip():  # what search serves need not be a built-in row
        click.echo(
            "note: ESRR_CHECKPOINT is set, but the Delta rows read <home>/models/<variant>.pt; evaluate "
            "the served model with --extra LABEL=PATH (or --ensemble for several)",
            err=True,
        )
    models: dict[str, Path] = {}
    if baselines:
        models = {label: checkpoint_path(work.settings, variant) for variant, label in VARIANT_NAMES.items()}
        for label, path in list(models.items()):
            if not path.is_file():
                click.echo(f"skipping {label}: no checkpoint at {path} (train it with `esrr train`)")
                del models[label]
    variant_of = {path: variant for variant, label in VARIANT_NAMES.items() if (path := models.get(label))}
    models.update(extra_models)
    paths = {*models.values(), *(path for members in ensemble_models.values() for path in members)}
    checkpoints = {path: _load_checkpoint(work, path, Checkpoint) for path in sorted(paths)}
    for path, variant in variant_of.items():
        _check_variant(path, checkpoints[path], variant)
    drmm = _load_drmm(work) if baselines else None
    # Only the Lex features some checkpoint reads: the 18 cost several times Lex3.
    lex_names = [n for n in KNOWN_FEATURES if any(n in c.config.lex_names for c in checkpoints.values())]
    candidates = _with_relevant(
        build_candidates(queries, qrels, work.backend, work.embeddings, lex_names, depth=window), work, split
    )
    bm25 = [c.bm25 for c in candidates]
    runs: dict[str, Run] = {}
    if baselines:
        runs = {
            "Uninformed (reverse doc id)": run_from_scores(candidates, reverse_doc_id_scores(candidates)),
            "BM25-Title": run_from_scores(candidates, title_bm25_scores(candidates, queries, work.backend.stats)),
            "WMD-Title": run_from_scores(
                candidates, wmd_title_scores(candidates, queries, work.backend.stats, work.embeddings)
            ),
        }
    if drmm is not None:
        from training.drmm import HistogramBuilder, build_histograms, drmm_scores

        builder = HistogramBuilder(work.backend.stats, work.embeddings, drmm.config)
        runs["DRMM"] = run_from_scores(
            candidates, drmm_scores(drmm.build_model(), build_histograms(candidates, queries, builder))
        )
    model_scores = {
        label: _checkpoint_scores(work, checkpoints[path], candidates, lex_names) for label, path in models.items()
    }
    runs.update({label: run_from_scores(candidates, scores) for label, scores in model_scores.items()})
    for label, members in ensemble_models.items():
        model_scores[label] = ensemble_scores(
            [_checkpoint_scores(work, checkpoints[path], candidates, lex_names) for path in members]
        )
        runs[label] = run_from_scores(candidates, model_scores[label])
    scored = {"BM25": bm25, **model_scores}
    twinned = {label: scored[label] for label in _twinned_rows([*extra_models, *ensemble_models]) if label in scored}
    if work.settings.feedback_weight > 0:
        from es_rerank.ranking.feedback import FeedbackParams

        fed = _feedback_scores(candidates, twinned, work.backend.stats, FeedbackParams.from_settings(work.settings))
        runs.update({label: run_from_scores(candidates, scores) for label, scores in fed.items()})
        twinned.update(fed)
    if neighbours is not None:
        runs.update(_fused_runs(neighbours, candidates, queries, twinned))
    return runs


def _twinned_rows(labels: Sequence[str]) -> list[str]:
    """Rows that get "+ candidate feedback" and "+ judged neighbours" twins: BM25, the served model, those asked for."""
    return ["BM25", VARIANT_NAMES["delta-32-lex3"], *labels]


def _check_row_labels(labels: Sequence[str]) -> None:
    """--extra/--ensemble labels must name new rows, each with a run file of its own."""
    from es_rerank.ranking.feedback import FEEDBACK_ROW_SUFFIX
    from es_rerank.ranking.neighbours import FUSED_ROW_SUFFIX
    from training.evaluate import run_tag

    built_in = {*BASELINE_ROWS, "DRMM", *VARIANT_NAMES.values()}
    suffixes = (FEEDBACK_ROW_SUFFIX, FUSED_ROW_SUFFIX)
    taken = sorted({label for label in labels if label in built_in or label.endswith(suffixes)})
    if taken:
        raise click.BadParameter(
            f"row name(s) {taken} are built-in rows (names ending in "
            f"{' or '.join(repr(s) for s in suffixes)} included); give the extra checkpoints "
            "other labels",
            param_hint="--extra/--ensemble",
        )
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise click.BadParameter(
            f"row name(s) {repeated} given twice; each row needs its own label", param_hint="--extra/--ensemble"
        )
    twins = [
        row + suffix
        for row in _twinned_rows(labels)
        for suffix in (FEEDBACK_ROW_SUFFIX, FUSED_ROW_SUFFIX, FEEDBACK_ROW_SUFFIX + FUSED_ROW_SUFFIX)
    ]
    rows = [*built_in, *labels, *twins]
    tags = [run_tag(row) for row in rows]
    sharing = sorted({row for row, tag in zip(rows, tags) if tags.count(tag) > 1} - built_in)
    if sharing:
        raise click.BadParameter(
            f"rows {sharing} differ only in punctuation or spaces and would share a run "
            "file; give labels that differ in letters or digits",
            param_hint="--extra/--ensemble",
        )
    too_long = sorted({row for row, tag in zip(rows, tags) if len(f"{tag}.run".encode()) > MAX_FILE_NAME_BYTES})
    if too_long:  # found now, not when the report is half written
        raise click.BadParameter(
            f"row(s) {[row[:40] + '...' for row in too_long]} make run file names longer than "
            f"{MAX_FILE_NAME_BYTES} bytes; give shorter labels",
            param_hint="--extra/--ensemble",
        )


def _evaluation_votes(work: Workspace, queries: Mapping[str, str]) -> JudgedNeighbours | None:
    """The votes file when `esrr neighbours build` has made one, checked to hold none of ``queries``' judgments."""
    from es_rerank.ranking.neighbours import JudgedNeighbours

    path = work.settings.neighbours_path
    if not path.is_file():
        click.echo(f"skipping judged neighbours: no file at {path} (build it with `esrr neighbours build`)")
        return None
    with _as_cli_error(ValueError):
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


def _feedback_scores(
    candidates: list[QueryCandidates],
    base_scores: Mapping[str, list[np.ndarray]],
    stats: CorpusStats,
    params: FeedbackParams,
) -> dict[str, list[np.ndarray]]:
    """Rows "<ranker> + candidate feedback": each ranker's scores with the votes of each hit's most similar hits."""
    from es_rerank.ranking.feedback import FEEDBACK_ROW_SUFFIX, document_vectors, with_feedback

    hits = [document_vectors([stats.doc_terms(int(row)) for row in c.stats_rows], stats) for c in candidates]
    return {
        label + FEEDBACK_ROW_SUFFIX: [with_feedback(s, v, params) for s, v in zip(scores, hits)]
        for label, scores in base_scores.items()
    }


def _fused_runs(
    neighbours: JudgedNeighbours,
    candidates: list[QueryCandidates],
    queries: Mapping[str, str],
    base_scores: Mapping[str, list[np.ndarray]],
) -> dict[str, Run]:
    """Rows "<ranker> + judged neighbours": each ranker's scores fused with the votes."""
    from es_rerank.ranking.neighbours import FUSED_ROW_SUFFIX, fuse
    from training.metrics import run_from_scores

    votes = [neighbours.scores(queries[c.query_id], c.doc_ids) for c in candidates]
    weight = neighbours.params.weight
    return {
        label + FUSED_ROW_SUFFIX: run_from_scores(candidates, [fuse(s, v, weight) for s, v in zip(scores, votes)])
        for label, scores in base_scores.items()
    }


def _load_drmm(work: Workspace) -> DRMMCheckpoint | None:
    """The trained DRMM baseline, None (with a note) when there is none."""
    from training.drmm import DRMMCheckpoint

    path = checkpoint_path(work.settings, DRMM_NAME)
    if not path.is_file():
        click.echo(f"skipping DRMM: no checkpoint at {path} (train it with `esrr train --variant drmm`)")
        return None
    return _load_checkpoint(work, path, DRMMCheckpoint)


def _load_checkpoint(work: Workspace, path: Path, kind: type[SavedModelT]) -> SavedModelT:
    """A checkpoint of ``kind`` trained on the workspace's embeddings, or a CLI error naming the fix."""
    with _as_cli_error(ValueError):
        checkpoint = kind.load(path)
    _check_embeddings(path, checkpoint.embeddings_version, work.embeddings.version)
    from worker.model import Checkpoint

    try:  # now, not after minutes of candidates and other models
        checkpoint.build_model(*([work.embeddings.vectors] if isinstance(checkpoint, Checkpoint) else []))
    except (ValueError, RuntimeError) as error:
        raise click.ClickException(
            f"{path} does not fit embeddings {work.embeddings.version}, or its weights are "
            f"damaged ({error}); retrain it with `esrr train` (and its --variant)"
        ) from None
    return checkpoint


def _check_variant(path: Path, checkpoint: Checkpoint, variant: str) -> None:
    """The checkpoint at a variant's own file is that variant, as its row's label says."""
    from worker.model import VARIANTS, DeltaConfig

    variant_config = DeltaConfig(**VARIANTS[variant])
    fields = ("lex_names", "use_difference", "use_delta_features")
    found = {name: getattr(checkpoint.config, name) for name in fields}
    if found != {name: getattr(variant_config, name) for name in fields}:
        raise click.ClickException(
            f"{path} is not a {variant} model (its config has {found}), so its row would "
            f"be mislabelled {VARIANT_NAMES[variant]!r}: retrain it with `esrr train "
            f"--variant {variant}`, or rename it and evaluate it with --extra LABEL=PATH"
        )


def _checkpoint_scores(
    work: Workspace, checkpoint: Checkpoint, candidates: list[QueryCandidates], lex_names: Sequence[str]
) -> list[np.ndarray]:
    """Scores of a Delta checkpoint for every candidate (whose Lex columns are ``lex_names``)."""
    from training.data import select_features
    from training.train import model_score_fn, score_candidates

    model = checkpoint.build_model(work.embeddings.vectors)
    mine = select_features(candidates, lex_names, checkpoint.config.lex_names)
    return score_candidates(model_score_fn(model), mine, work.doc_rows)


def _check_embeddings(path: Path, trained_on: str, current: str) -> None:
    if trained_on != current:
        raise click.ClickException(
            f"{path} was trained on embeddings {trained_on}, the current ones are {current}; retrain it"
        )


@click.command(name="shift")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder that receives one BEIR folder per condition.",
)
@click.option(
    "--condition",
    "conditions",
    multiple=True,
    type=click.Choice(["vid-desc", "no-titles", "topic-disjoint", "ohsumed-pseudo", "bc5cdr-pseudo"]),
    help="Conditions to write (default: the three NFCorpus ones).",
)
@click.option(
    "--text-data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The folder of the other biomedical text (the pseudo-query conditions; default: the one "
    "beside NFCorpus, ../shared/data).",
)
@click.option("--seed", default=13, show_default=True, type=click.IntRange(0), help="Seed of the splits and draws.")
def shift(data: Path | None, out: Path, conditions: tuple[str, ...], text_data: Path | None, seed: int) -> None:
    """Write shifted copies of NFCorpus (long queries, blank titles, held-out topics) for `esrr eval --data`."""
    from es_rerank.stats import Document
    from index_setup.nfcorpus import NFCorpus
    from index_setup.readers import read_queries
    from index_setup.text_sources import SOURCES, TextSourceError
    from training.shift import (
        CONDITIONS,
        PSEUDO_CONDITIONS,
        SPLITS,
        no_titles,
        pseudo_queries,
        topic_disjoint,
        vid_desc,
        write_condition,
    )

    writable_dir(out, "pass a folder you can write to as --out")
    with _as_cli_error(FileNotFoundError, ValueError, TextSourceError):
        nfcorpus = NFCorpus.locate(data)
        documents = list(nfcorpus.documents())
        qrels = {split: nfcorpus.qrels(split) for split in SPLITS}
        queries = nfcorpus.all_queries()
        for name in conditions or CONDITIONS:
            if name == "vid-desc":
                originals = nfcorpus.root / "original" / "queries"
                condition = vid_desc(
                    documents, {s: read_queries(originals / f"{s}.vid-desc.queries") for s in SPLITS}, qrels
                )
            elif name == "no-titles":
                condition = no_titles(documents, queries, qrels)
            elif name == "topic-disjoint":
                condition = topic_disjoint(documents, queries, qrels, seed)
            else:
                source = next(s for s in SOURCES if s.name == PSEUDO_CONDITIONS[name])
                files = source.files(text_data or nfcorpus.root.parent)
                if not files:
                    raise click.ClickException(
                        f"no {source.name} text ({source.pattern}) under "
                        f"{text_data or nfcorpus.root.parent}; pass --text-data DIR"
                    )
                texts = [t for path in files for t in source.reader(path)]
                condition = pseudo_queries(
                    name, [Document(t.doc_id, t.parts[0], " ".join(t.parts[1:])) for t in texts], seed=seed
                )
            target = write_condition(condition, out)
            counts = ", ".join(f"{len(condition.qrels[s])} {s}" for s in SPLITS)
            click.echo(f"{name}: {len(condition.documents)} documents, {counts} queries -> {target}")
