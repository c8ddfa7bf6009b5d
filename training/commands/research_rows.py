"""``esrr eval``'s research rows: the paper's baselines, the trained variants and the checkpoints asked for,
each with its candidate-feedback and judged-neighbour twins."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from training.commands.row_labels import twinned_rows
from training.commands.variants import DRMM_NAME, VARIANT_NAMES, checkpoint_path
from training.commands.workspace import Workspace, as_cli_error, check_embeddings, with_relevant

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy as np

    from es_rerank.ranking.feedback import FeedbackParams
    from es_rerank.ranking.neighbours import JudgedNeighbours
    from es_rerank.stats import CorpusStats
    from training.data import QueryCandidates
    from training.drmm import DRMMCheckpoint
    from training.metrics import Run
    from worker.model import Checkpoint, SavedModelT


@dataclass(frozen=True)
class JudgedQueries:
    """The queries evaluated, their judgments, the split they come from and how deep each ranker reorders."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    split: str
    window: int


@dataclass(frozen=True)
class ResearchRows:
    """The rows asked for beside the served ones."""

    extra_models: dict[str, Path] = field(default_factory=dict)  # --extra LABEL=CHECKPOINT
    ensemble_models: dict[str, list[Path]] = field(default_factory=dict)  # --ensemble LABEL=CHECKPOINT,...
    baselines: bool = False  # the paper's baselines and every trained variant
    neighbours: JudgedNeighbours | None = None  # the votes, when they apply to this collection


def trained_variants(work: Workspace) -> dict[str, Path]:
    """The paper's Delta rows whose checkpoints exist, by label; a note for each one missing."""
    models = {label: checkpoint_path(work.settings, variant) for variant, label in VARIANT_NAMES.items()}
    for label, path in list(models.items()):
        if not path.is_file():
            click.echo(f"skipping {label}: no checkpoint at {path} (train it with `esrr train`)")
            del models[label]
    return models


def load_checkpoint(work: Workspace, path: Path, kind: type[SavedModelT]) -> SavedModelT:
    """A checkpoint of ``kind`` trained on the workspace's embeddings, or a CLI error naming the fix."""
    with as_cli_error(ValueError):
        checkpoint = kind.load(path)
    check_embeddings(path, checkpoint.embeddings_version, work.embeddings.version)
    from training.drmm import DRMMCheckpoint
    from worker.model import Checkpoint

    try:  # now, not after minutes of candidates and other models
        if isinstance(checkpoint, Checkpoint):
            checkpoint.build_model(work.embeddings.vectors)
        elif isinstance(checkpoint, DRMMCheckpoint):
            checkpoint.build_model()  # DRMM reads histograms, not the embedding table
    except (ValueError, RuntimeError) as error:
        raise click.ClickException(
            f"{path} does not fit embeddings {work.embeddings.version}, or its weights are "
            f"damaged ({error}); retrain it with `esrr train` (and its --variant)"
        ) from None
    return checkpoint


def load_drmm(work: Workspace) -> DRMMCheckpoint | None:
    """The trained DRMM baseline, None (with a note) when there is none."""
    from training.drmm import DRMMCheckpoint

    path = checkpoint_path(work.settings, DRMM_NAME)
    if not path.is_file():
        click.echo(f"skipping DRMM: no checkpoint at {path} (train it with `esrr train --variant drmm`)")
        return None
    return load_checkpoint(work, path, DRMMCheckpoint)


def check_variant(path: Path, checkpoint: Checkpoint, variant: str) -> None:
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


def checkpoint_scores(
    work: Workspace, checkpoint: Checkpoint, candidates: list[QueryCandidates], lex_names: Sequence[str]
) -> list[np.ndarray]:
    """Scores of a Delta checkpoint for every candidate (whose Lex columns are ``lex_names``)."""
    from training.data import select_features
    from training.train import model_score_fn, score_candidates

    model = checkpoint.build_model(work.embeddings.vectors)
    mine = select_features(candidates, lex_names, checkpoint.config.lex_names)
    return score_candidates(model_score_fn(model), mine, work.doc_rows)


def feedback_scores(
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


def fused_runs(
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


def baseline_runs(
    work: Workspace, judged: JudgedQueries, candidates: list[QueryCandidates], drmm: DRMMCheckpoint | None
) -> dict[str, Run]:
    """The paper's baselines: uninformed, BM25 and WMD on titles, and DRMM when it was trained."""
    from training.drmm import HistogramBuilder, build_histograms, drmm_scores
    from training.evaluate import reverse_doc_id_scores, run_from_scores, title_bm25_scores, wmd_title_scores

    stats, queries = work.backend.stats, judged.queries
    runs = {
        "Uninformed (reverse doc id)": run_from_scores(candidates, reverse_doc_id_scores(candidates)),
        "BM25-Title": run_from_scores(candidates, title_bm25_scores(candidates, queries, stats)),
        "WMD-Title": run_from_scores(candidates, wmd_title_scores(candidates, queries, stats, work.embeddings)),
    }
    if drmm is not None:
        builder = HistogramBuilder(stats, work.embeddings, drmm.config)
        runs["DRMM"] = run_from_scores(
            candidates, drmm_scores(drmm.build_model(), build_histograms(candidates, queries, builder))
        )
    return runs


def model_scores_by_row(
    work: Workspace,
    models: Mapping[str, Path],
    ensembles: Mapping[str, list[Path]],
    checkpoints: Mapping[Path, Checkpoint],
    candidates: list[QueryCandidates],
    lex_names: Sequence[str],
) -> dict[str, list[np.ndarray]]:
    """Each model row's and each ensemble row's scores for every candidate (whose Lex columns are ``lex_names``)."""
    from worker.ensemble import ensemble_scores

    scores = {
        label: checkpoint_scores(work, checkpoints[path], candidates, lex_names) for label, path in models.items()
    }
    for label, members in ensembles.items():
        scores[label] = ensemble_scores(
            [checkpoint_scores(work, checkpoints[path], candidates, lex_names) for path in members]
        )
    return scores


def candidate_lex_names(checkpoints: Iterable[Checkpoint]) -> list[str]:
    """Only the Lex features some checkpoint reads: the 18 cost several times Lex3."""
    from es_rerank.lex import KNOWN_FEATURES

    read = [c.config.lex_names for c in checkpoints]
    return [n for n in KNOWN_FEATURES if any(n in names for names in read)]


def twin_runs(
    work: Workspace,
    judged: JudgedQueries,
    candidates: list[QueryCandidates],
    twinned: dict[str, list[np.ndarray]],
    neighbours: JudgedNeighbours | None,
) -> dict[str, Run]:
    """The "+ candidate feedback" and "+ judged neighbours" rows of the rows that get twins."""
    from training.metrics import run_from_scores

    runs: dict[str, Run] = {}
    if work.settings.feedback_weight > 0:
        from es_rerank.ranking.feedback import FeedbackParams

        fed = feedback_scores(candidates, twinned, work.backend.stats, FeedbackParams.from_settings(work.settings))
        runs.update({label: run_from_scores(candidates, scores) for label, scores in fed.items()})
        twinned = {**twinned, **fed}
    if neighbours is not None:
        runs.update(fused_runs(neighbours, candidates, judged.queries, twinned))
    return runs


def research_runs(work: Workspace, judged: JudgedQueries, rows: ResearchRows) -> dict[str, Run]:
    """The paper's rows (baselines, trained variants) and the extra checkpoints, each with its twins."""
    from training.data import build_candidates
    from training.metrics import run_from_scores
    from worker.model import Checkpoint

    if os.environ.get("ESRR_CHECKPOINT", "").strip():  # what search serves need not be a built-in row
        click.echo(
            "note: ESRR_CHECKPOINT is set, but the Delta rows read <home>/models/<variant>.pt; evaluate "
            "the served model with --extra LABEL=PATH (or --ensemble for several)",
            err=True,
        )
    models = trained_variants(work) if rows.baselines else {}
    variant_of = {path: variant for variant, label in VARIANT_NAMES.items() if (path := models.get(label))}
    models.update(rows.extra_models)
    paths = {*models.values(), *(path for members in rows.ensemble_models.values() for path in members)}
    checkpoints = {path: load_checkpoint(work, path, Checkpoint) for path in sorted(paths)}
    for path, variant in variant_of.items():
        check_variant(path, checkpoints[path], variant)
    drmm = load_drmm(work) if rows.baselines else None
    lex_names = candidate_lex_names(checkpoints.values())
    candidates = with_relevant(
        build_candidates(judged.queries, judged.qrels, work.backend, work.embeddings, lex_names, depth=judged.window),
        work,
        judged.split,
    )
    runs = baseline_runs(work, judged, candidates, drmm) if rows.baselines else {}
    model_scores = model_scores_by_row(work, models, rows.ensemble_models, checkpoints, candidates, lex_names)
    runs.update({label: run_from_scores(candidates, scores) for label, scores in model_scores.items()})
    scored = {"BM25": [c.bm25 for c in candidates], **model_scores}
    labels = [*rows.extra_models, *rows.ensemble_models]
    twinned = {label: scored[label] for label in twinned_rows(labels) if label in scored}
    runs.update(twin_runs(work, judged, candidates, twinned, rows.neighbours))
    return runs
