"""Click models that correct for position bias, fitted by expectation-maximisation (EM), vectorised with numpy.

Both models say a result is clicked when it is **examined** and **attractive**, independently:
P(click) = P(examined) x P(attractive). Attractiveness ``alpha`` belongs to the (query,
document) pair, what the judgments are made of; examination ``gamma`` belongs to where the
result was shown:

- **PBM**, the position-based model: ``gamma`` depends on the position only.
- **UBM**, the user browsing model (Dupret and Piwowarski, 2008): on the position and on the
  distance to the last click above it in the same impression (a person who just clicked at
  position 3 looks at position 4 more surely than one who skipped 1 to 3).

- **DCM**, UBM under the dependent click model's assumption (Guo, Liu and Wang, 2009): a
  person reads down the page until a first click, so a result with no click above it is
  examined (``gamma = 1``); after a click, examination is fitted per position and distance.

With a ranker that always shows a query the same page, a pair is only ever seen at one
position, and PBM cannot tell a document clicked little from a position looked at little
(any ``gamma`` of that position fits, ``alpha`` taking up the rest); it needs rankings that
change (a ranker that learns, an experiment's arms). UBM and DCM also see how the clicks
above a result change from session to session. DCM's assumption pins the examination
before the first click outright, so it judges from one fixed ranking without relying on the
EM's starting point; it underrates results people leave unread without clicking anything
(abandoned pages), which errs towards judging less, not more. Hence DCM is ``esrr learn``'s
default (on cascade clicks under a fixed ranking, ``tests/learning/test_click_model.py``,
UBM comes out as close; PBM does not). PBM and UBM hold the first position with no click
above as examined, which fixes the scale that the product leaves free.

EM (Chuklin, Markov and de Rijke, *Click Models for Web Search*, 2015, chapter 4): a clicked
result was examined and attractive; an unclicked one was attractive with probability
``alpha (1 - gamma) / (1 - alpha gamma)`` and examined with ``gamma (1 - alpha) / (1 -
alpha gamma)``; the M-step averages those per pair and per examination class. Attractiveness
takes one pseudo-click in two pseudo-views (a Beta(2, 2) prior's MAP estimate), so a pair shown once is not
certain either way and never reaches exactly 0 or 1.

Written here, not taken from a library: PyPI's click-model packages are unmaintained and
Python 2 era (clickmodels 2014, pyclickmodels 2021 in Cython, gecasmo 0.0.1) or bring JAX
(clax-models); the whole fit is a few ``np.bincount`` calls per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

ModelName = Literal["dcm", "ubm", "pbm"]
MODELS: tuple[ModelName, ...] = ("dcm", "ubm", "pbm")
PRIOR_CLICKS, PRIOR_VIEWS = 1.0, 2.0


@dataclass(frozen=True)
class FittedClickModel:
    """Attractiveness per pair, examination per class (``examination_class`` says which class a result is in)."""

    name: ModelName
    attractiveness: np.ndarray  # float64 [pairs]
    examination: np.ndarray  # float64 [classes]
    classes: np.ndarray  # int64 [shown]: each shown result's examination class
    iterations: int
    converged: bool
    max_rank: int

    def examination_by_position(self) -> list[float]:
        """P(examined) at each position (1 first), averaged over the results shown there."""
        ranks = self.classes if self.name == "pbm" else self.classes // (self.max_rank + 1)
        shown = np.bincount(ranks, minlength=self.max_rank)
        total = np.bincount(ranks, weights=self.examination[self.classes], minlength=self.max_rank)
        return [float(t / s) if s else float("nan") for t, s in zip(total, shown)]


def examination_classes(
    name: ModelName, rank: np.ndarray, clicked: np.ndarray, impression: np.ndarray, max_rank: int
) -> np.ndarray:
    """Each shown result's examination class: its rank (PBM), or rank and distance to the last click above (UBM,
    DCM): ``rank * (max_rank + 1) + distance``, the distance being ``rank + 1`` when nothing above was clicked."""
    if name == "pbm":
        return rank.astype(np.int64)
    # The last clicked position above each result of its impression: a running maximum over the impression's
    # results in rank order, offset per impression so it never carries over from the one before.
    order = np.lexsort((rank, impression))
    step = max_rank + 2
    group = np.cumsum(np.r_[True, impression[order][1:] != impression[order][:-1]])  # 1, 2, ... per impression
    value = group * step + np.where(clicked[order], rank[order] + 1, 0)
    running = np.maximum.accumulate(value)
    above = np.r_[0, running[:-1]]  # the running maximum before this result
    last_click = np.where(above // step == group, above - group * step, 0)  # 0: no click above; else its rank + 1
    distance = np.empty(len(rank), dtype=np.int64)
    distance[order] = rank[order] + 1 - last_click  # 1 .. rank + 1
    return rank.astype(np.int64) * (max_rank + 1) + distance


def fit_click_model(
    name: ModelName,
    pair: np.ndarray,
    rank: np.ndarray,
    clicked: np.ndarray,
    impression: np.ndarray,
    n_pairs: int,
    *,
    max_rank: int,
    max_iterations: int = 100,
    tolerance: float = 1e-4,
) -> FittedClickModel:
    """Fit ``name`` (``dcm``, ``ubm`` or ``pbm``) by EM to shown results (``pair``, 0-based ``rank`` below ``max_rank``,
    ``clicked``, ``impression``); stops when no parameter moves more than ``tolerance`` in an iteration."""
    if name not in MODELS:
        raise ValueError(f"click model {name!r} is not one of {', '.join(MODELS)}")
    if len(rank) and (rank.min() < 0 or rank.max() >= max_rank):
        raise ValueError(f"ranks must lie in 0..{max_rank - 1}")
    classes = examination_classes(name, rank, clicked, impression, max_rank)
    n_classes = max_rank if name == "pbm" else max_rank * (max_rank + 1)
    always_seen = np.zeros(n_classes, dtype=bool)
    if name == "dcm":  # every position with nothing clicked above it
        always_seen[np.arange(max_rank) * (max_rank + 2) + 1] = True
    else:  # the first position, nothing clicked above it
        always_seen[0 if name == "pbm" else 1] = True
    shown_pair = np.bincount(pair, minlength=n_pairs).astype(np.float64)
    shown_class = np.bincount(classes, minlength=n_classes).astype(np.float64)
    alpha = np.full(n_pairs, 0.5)
    gamma = np.where(always_seen, 1.0, 0.5)
    converged, iteration = False, 0
    while not converged and iteration < max_iterations:
        iteration += 1
        a, g = alpha[pair], gamma[classes]
        denominator = 1.0 - a * g  # > 0: alpha < 1 under its prior
        attractive = np.where(clicked, 1.0, a * (1.0 - g) / denominator)
        examined = np.where(clicked, 1.0, g * (1.0 - a) / denominator)
        new_alpha = (np.bincount(pair, weights=attractive, minlength=n_pairs) + PRIOR_CLICKS) / (
            shown_pair + PRIOR_VIEWS
        )
        seen = np.bincount(classes, weights=examined, minlength=n_classes)
        new_gamma = np.where(shown_class > 0, seen / np.maximum(shown_class, 1.0), gamma)
        new_gamma[always_seen] = 1.0
        change = max(
            float(np.abs(new_alpha - alpha).max(initial=0.0)), float(np.abs(new_gamma - gamma).max(initial=0.0))
        )
        alpha, gamma = new_alpha, new_gamma
        converged = change < tolerance
    return FittedClickModel(name, alpha, gamma, classes, iteration, converged, max_rank)
