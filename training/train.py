"""Training (sections 3.4, 4.2): weighted pairwise max-margin loss (or, as an option, a
listwise softmax loss), Adagrad with separate L2 on conv and dense weights, early
stopping on dev NDCG@20.

``fit_pairwise`` is the loop; ``train_model`` runs it for a Delta model, and the
baselines (``feature_selection``'s linear ranker, ``drmm``) run it for theirs.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import torch
from tqdm import tqdm

from training.data import (
    SOFTMAX_NEGATIVES,
    DocumentRows,
    Groups,
    QueryCandidates,
    TrainingError,
    batch_inputs,
    lex_statistics,
    sample_groups,
    sample_triples,
)
from training.metrics import PAPER_NDCG20, mean_metric
from worker.model import DeltaConfig, DeltaModel

# (query rows [M], document rows [n, N], raw Lex features [n, L]) -> scores [n]
ScoreFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; defaults chosen on NFCorpus dev only (reports/tuning.md)."""

    max_epochs: int = 8
    patience: int = 3  # epochs without a dev improvement before stopping
    batch_size: int = 256  # triples (or groups) per minibatch (section 3.4)
    learning_rate: float = 0.05
    l2_conv: float = 1e-4
    l2_dense: float = 1e-4
    max_positives: int | None = None  # relevant documents drawn per query and epoch (None: all)
    negatives: str = "uniform"  # see data.sample_triples
    negatives_per_positive: int | None = None  # None: 1 for the hinge loss (balanced), 8 for softmax
    loss: str = "hinge"  # "hinge": the paper's weighted max-margin; "softmax": listwise, see softmax_loss
    seed: int = 13
    threads: int | None = None
    # Where a Delta model trains (cpu, cuda, cuda:N). The CPU is the default: the recipe's
    # tables were trained there, and a CUDA run draws other dropout masks (other weights).
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {LOSSES}")

    @property
    def negatives_drawn(self) -> int:
        """Non-relevant documents drawn per relevant one and epoch."""
        return self.negatives_per_positive or (SOFTMAX_NEGATIVES if self.loss == "softmax" else 1)


LOSSES = ("hinge", "softmax")

GivenT = TypeVar("GivenT")


def _given(value: GivenT | None, default: GivenT) -> GivenT:
    """``value`` when it was given, else ``default``."""
    return default if value is None else value


@dataclass(frozen=True)
class TrainOverrides:
    """The ``TrainConfig`` fields given on the command line (``esrr train``); None keeps the base config's value."""

    max_epochs: int | None = None
    patience: int | None = None
    learning_rate: float | None = None
    l2_conv: float | None = None
    l2_dense: float | None = None
    max_positives: int | None = None
    negatives: str | None = None
    negatives_per_positive: int | None = None
    loss: str | None = None
    seed: int | None = None
    device: str | None = None

    def applied_to(self, base: TrainConfig) -> TrainConfig:
        """``base`` with each value given here in place of its own."""
        return replace(
            base,
            max_epochs=_given(self.max_epochs, base.max_epochs),
            patience=_given(self.patience, base.patience),
            learning_rate=_given(self.learning_rate, base.learning_rate),
            l2_conv=_given(self.l2_conv, base.l2_conv),
            l2_dense=_given(self.l2_dense, base.l2_dense),
            max_positives=_given(self.max_positives, base.max_positives),
            negatives=_given(self.negatives, base.negatives),
            negatives_per_positive=_given(self.negatives_per_positive, base.negatives_per_positive),
            loss=_given(self.loss, base.loss),
            seed=_given(self.seed, base.seed),
            device=_given(self.device, base.device),
        )


def pairwise_hinge_loss(positive: torch.Tensor, negative: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean of weight * max(0, 1 - s(Q, D+) + s(Q, D-)) over a batch of triples."""
    return (weight * torch.relu(1.0 - positive + negative)).mean()


def softmax_loss(scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean of weight * -log softmax(s(Q, D+), s(Q, D-_1), ..) over groups; ``scores`` [G, 1 + K], D+ first."""
    return (weight * (torch.logsumexp(scores, dim=1) - scores[:, 0])).mean()


def group_loss(loss: str, scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The training loss named ``loss`` of groups' scores [G, 1 + K] (hinge: K = 1)."""
    if loss == "softmax":
        return softmax_loss(scores, weight)
    return pairwise_hinge_loss(scores[:, 0], scores[:, 1], weight)


def set_seeds(seed: int) -> None:
    """Seed python, numpy and torch for repeatable runs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def model_score_fn(model: DeltaModel) -> ScoreFn:
    """Scores from the fast serving scorer (tested equal to the reference forward) for ``model``'s weights."""
    from worker.scorer import DeltaScorer

    model.eval()
    # On the model's device; a scorer made for one dev pass captures no CUDA graphs (one per window shape
    # would cost more than it saves). On the CPU this is the scorer the recipe always used.
    scorer = DeltaScorer(model, model.embeddings.device, cuda_graphs=False)
    return scorer.score


def score_candidates(score: ScoreFn, candidates: Sequence[QueryCandidates], doc_rows: DocumentRows) -> list[np.ndarray]:
    """Model scores for every candidate of every query."""
    return [score(cand.query_rows, doc_rows[cand.stats_rows], cand.lex) for cand in candidates]


@dataclass
class TrainResult:
    """The best model found and the training curve."""

    model: torch.nn.Module
    best_epoch: int
    best_dev: float
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def curve(self) -> dict[str, object]:
        """The dev curve, best epoch, best dev NDCG@20 and seconds, rounded for a results record."""
        return {
            "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in self.history],
            "best_epoch": self.best_epoch,
            "best_dev": round(self.best_dev, 4),
            "seconds": round(self.seconds),
        }


# (query index [B], candidate index [B]) into the training candidates -> scores [B]
PairScoreFn = Callable[[np.ndarray, np.ndarray], torch.Tensor]


def set_lex_standardisation(model: DeltaModel, candidates: Sequence[QueryCandidates]) -> None:
    """Store the training candidates' Lex feature mean and spread in the model (it standardises its input)."""
    if not model.config.lex_names:
        return
    mean, std = lex_statistics(candidates)
    model.lex_mean.copy_(torch.from_numpy(mean))
    model.lex_std.copy_(torch.from_numpy(std))


def new_delta_model(
    config: DeltaConfig, embeddings: np.ndarray, train: Sequence[QueryCandidates], settings: TrainConfig
) -> tuple[DeltaModel, torch.optim.Optimizer]:
    """A freshly seeded Delta model standardising ``train``'s Lex features, and its Adagrad (L2 per stage)."""
    set_seeds(settings.seed)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    model = DeltaModel(config, embeddings)
    set_lex_standardisation(model, train)
    model.to(settings.device)  # before the optimizer, which holds the parameters
    return model, delta_optimizer(model, settings)


def delta_optimizer(model: DeltaModel, settings: TrainConfig) -> torch.optim.Optimizer:
    """Adagrad over a Delta model's convolution and dense stages, each with its own L2 coefficient."""
    return torch.optim.Adagrad(
        [
            {"params": model.conv_parameters(), "weight_decay": settings.l2_conv},
            {"params": model.dense_parameters(), "weight_decay": settings.l2_dense},
        ],
        lr=settings.learning_rate,
    )


def train_model(
    config: DeltaConfig,
    embeddings: np.ndarray,
    train: Sequence[QueryCandidates],
    dev: Sequence[QueryCandidates],
    dev_qrels: Mapping[str, Mapping[str, int]],
    doc_rows: DocumentRows,
    settings: TrainConfig = TrainConfig(),
    progress: bool = True,
) -> TrainResult:
    """Train a Delta model with early stopping on dev NDCG@20 (exponential gain) and return the best one.

    It trains on ``settings.device`` and comes back on the CPU, where checkpoints are saved from.
    """
    model, optimizer = new_delta_model(config, embeddings, train, settings)
    result = fit_pairwise(
        model,
        optimizer,
        train,
        pair_scorer(model, train, doc_rows),
        lambda: score_candidates(model_score_fn(model), dev, doc_rows),
        dev,
        dev_qrels,
        settings,
        progress,
    )
    result.model.to("cpu")
    return result


def pair_scorer(model: DeltaModel, train: Sequence[QueryCandidates], doc_rows: DocumentRows) -> PairScoreFn:
    """The model's scores of training pairs (query index, document index), on the model's device."""
    device = model.embeddings.device

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        docs, query_rows, lex = (
            torch.from_numpy(a).to(device) for a in batch_inputs(train, doc_rows, query_index, doc_index)
        )
        return model(docs, query_rows, lex)

    return score_pairs


def fine_tune_model(
    model: DeltaModel,
    train: Sequence[QueryCandidates],
    dev: Sequence[QueryCandidates],
    dev_qrels: Mapping[str, Mapping[str, int]],
    doc_rows: DocumentRows,
    settings: TrainConfig,
    progress: bool = True,
) -> TrainResult:
    """Go on training a trained Delta model (``esrr train --adapt``), early-stopped on dev NDCG@20.

    The model keeps the Lex standardisation it was trained with, so the new checkpoint reads its
    inputs on the served model's scale; only the optimiser starts afresh.
    """
    set_seeds(settings.seed)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    model.to(settings.device)
    result = fit_pairwise(
        model,
        delta_optimizer(model, settings),
        train,
        pair_scorer(model, train, doc_rows),
        lambda: score_candidates(model_score_fn(model), dev, doc_rows),
        dev,
        dev_qrels,
        settings,
        progress,
    )
    result.model.to("cpu")
    return result


def fit_pairwise(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train: Sequence[QueryCandidates],
    score_pairs: PairScoreFn,
    score_dev: Callable[[], list[np.ndarray]],
    dev: Sequence[QueryCandidates],
    dev_qrels: Mapping[str, Mapping[str, int]],
    settings: TrainConfig,
    progress: bool = True,
) -> TrainResult:
    """The loop every ranker shares: fresh triples (or groups) each epoch, the weighted loss, early stopping on dev."""
    rng = np.random.default_rng(settings.seed)
    started = time.perf_counter()
    # The best epoch's weights, not a deepcopy of the model: that would also copy the frozen
    # embedding table (a non-persistent buffer, ~100 MB for NFCorpus) at every improvement.
    best, best_state = TrainResult(model, -1, -1.0), None
    stale = 0
    for epoch in range(1, settings.max_epochs + 1):
        if settings.loss == "softmax":
            groups = sample_groups(train, rng, settings.max_positives, settings.negatives, settings.negatives_drawn)
        else:
            groups = sample_triples(
                train, rng, settings.max_positives, settings.negatives, settings.negatives_drawn
            ).as_groups()
        loss = train_epoch(model, optimizer, groups, score_pairs, settings.loss, settings.batch_size, epoch, progress)
        if not math.isfinite(loss):
            raise TrainingError(
                f"the training loss became {loss} in epoch {epoch}; lower the learning rate "
                f"({settings.learning_rate}) or the L2 coefficients"
            )
        model.eval()
        with torch.no_grad():
            dev_ndcg = mean_metric(PAPER_NDCG20, dev_qrels, dev, score_dev())
        best.history.append(
            {"epoch": epoch, "loss": loss, "dev_ndcg20": dev_ndcg, "seconds": time.perf_counter() - started}
        )
        if progress:
            tqdm.write(f"epoch {epoch}: loss {loss:.4f}  dev NDCG@20 {dev_ndcg:.4f}")
        if dev_ndcg > best.best_dev:
            best_state = {name: value.detach().clone() for name, value in model.state_dict().items()}
            best.best_epoch, best.best_dev, stale = epoch, dev_ndcg, 0
        else:
            stale += 1
            if stale >= settings.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    best.model.eval()
    best.seconds = time.perf_counter() - started
    return best


def train_epoch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    groups: Groups,
    score_pairs: PairScoreFn,
    loss_name: str,
    batch_size: int,
    epoch: int,
    progress: bool,
) -> float:
    """One pass over the groups in minibatches; returns the mean weighted loss."""
    model.train()
    total, count = 0.0, 0
    width = groups.docs.shape[1]  # 1 + K
    bar = tqdm(
        range(0, len(groups.query), batch_size), desc=f"epoch {epoch}", unit="batch", disable=not progress, leave=False
    )
    for start in bar:
        batch = slice(start, start + batch_size)
        queries = groups.query[batch]
        # Column by column (all D+, then all first D-, ...): for triples this is the order the
        # recipe always scored in, so dropout draws, and the trained weights, stay as they were.
        scores = score_pairs(np.tile(queries, width), groups.docs[batch].T.ravel())  # [(1 + K) B]
        weight = torch.from_numpy(groups.weight[batch]).to(scores.device)
        loss = group_loss(loss_name, scores.view(width, -1).T, weight)  # [B, 1 + K]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(queries)
        count += len(queries)
        bar.set_postfix(loss=f"{total / count:.4f}")
    return total / max(count, 1)
