"""Greedy selection of Lex features (section 5.1 of the Delta paper).

The paper chose Delta-32-Lex3's three features by greedy forward search over the
18 features of section 4.2.2, with NDCG@20 on the validation data as the
criterion, stopping at three to bound the run-time cost. ``greedy_select`` is that
search over any subset evaluator; ``delta_evaluator`` trains a Delta-32 model
with the candidate features (the paper's criterion) and ``linear_evaluator``
trains a pairwise linear ranker on the features alone, a fast proxy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from training.data import DocumentRows, QueryCandidates, lex_statistics, select_features
from training.metrics import Qrels
from training.train import TrainConfig, fit_pairwise, set_seeds, train_model
from worker.model import DeltaConfig

# A feature subset -> its dev NDCG@20.
SubsetEvaluator = Callable[[tuple[str, ...]], float]


@dataclass(frozen=True)
class SelectionStep:
    """One greedy step: the feature added, the dev metric it reached, and every trial."""

    added: str
    dev_ndcg20: float
    trials: dict[str, float]


def greedy_select(
    names: Sequence[str], evaluate: SubsetEvaluator, max_features: int = 3, progress: bool = True
) -> list[SelectionStep]:
    """Forward selection: at each step add the feature whose subset scores best."""
    if not 0 < max_features <= len(names):
        raise ValueError(f"max_features must be between 1 and {len(names)}, got {max_features}")
    chosen: tuple[str, ...] = ()
    steps = []
    for step in range(1, max_features + 1):
        trials = {}
        for name in tqdm(
            [n for n in names if n not in chosen], desc=f"step {step}", unit="subset", disable=not progress, leave=False
        ):
            trials[name] = evaluate((*chosen, name))
            if progress:
                tqdm.write(f"step {step}: {' + '.join((*chosen, name))}: dev NDCG@20 {trials[name]:.4f}")
        best = max(trials, key=lambda n: (trials[n], -names.index(n)))  # ties: the paper's order
        chosen = (*chosen, best)
        steps.append(SelectionStep(best, trials[best], trials))
    return steps


def delta_evaluator(
    all_names: Sequence[str],
    embeddings: np.ndarray,
    train: Sequence[QueryCandidates],
    dev: Sequence[QueryCandidates],
    dev_qrels: Qrels,
    doc_rows: DocumentRows,
    settings: TrainConfig,
) -> SubsetEvaluator:
    """Best dev NDCG@20 of a Delta-32 model trained with the subset's features (candidates carry ``all_names``)."""

    def evaluate(subset: tuple[str, ...]) -> float:
        config = DeltaConfig(lex_names=subset, embedding_dim=embeddings.shape[1])
        result = train_model(
            config,
            embeddings,
            select_features(train, all_names, subset),
            select_features(dev, all_names, subset),
            dev_qrels,
            doc_rows,
            settings,
            progress=False,
        )
        return result.best_dev

    return evaluate


def linear_evaluator(
    all_names: Sequence[str],
    train: Sequence[QueryCandidates],
    dev: Sequence[QueryCandidates],
    dev_qrels: Qrels,
    settings: TrainConfig,
) -> SubsetEvaluator:
    """Best dev NDCG@20 of a linear ranker on the subset's standardised features, same triples and loss."""

    def evaluate(subset: tuple[str, ...]) -> float:
        return train_linear_ranker(
            select_features(train, all_names, subset), select_features(dev, all_names, subset), dev_qrels, settings
        )

    return evaluate


class LinearLexRanker(torch.nn.Module):
    """score = w . standardised(Lex features), standardised with training-set statistics."""

    mean: torch.Tensor  # buffers (register_buffer), declared for the type checker
    std: torch.Tensor

    def __init__(self, train: Sequence[QueryCandidates]) -> None:
        super().__init__()
        mean, std = lex_statistics(train)
        self.register_buffer("mean", torch.from_numpy(mean).float())
        self.register_buffer("std", torch.from_numpy(std).float())
        self.weights = torch.nn.Parameter(torch.zeros(len(mean)))

    def forward(self, lex: torch.Tensor) -> torch.Tensor:
        """Scores [B] of Lex features [B, L]."""
        return ((lex - self.mean) / self.std) @ self.weights


def train_linear_ranker(
    train: Sequence[QueryCandidates], dev: Sequence[QueryCandidates], dev_qrels: Qrels, settings: TrainConfig
) -> float:
    """Best dev NDCG@20 of a ``LinearLexRanker`` trained with the Delta model's triples, loss and optimiser."""
    set_seeds(settings.seed)
    model = LinearLexRanker(train)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=settings.learning_rate, weight_decay=settings.l2_dense)

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        lex = np.stack([train[q].lex[d] for q, d in zip(query_index, doc_index)])
        return model(torch.from_numpy(lex).float())

    def score_dev() -> list[np.ndarray]:
        return [model(torch.from_numpy(c.lex).float()).numpy() for c in dev]

    return fit_pairwise(
        model, optimizer, train, score_pairs, score_dev, dev, dev_qrels, settings, progress=False
    ).best_dev
