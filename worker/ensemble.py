"""Several trained Delta models served as one ranker: the mean of their scores,
each standardised within the request first.

This is the combination `esrr eval --ensemble` measures (per query over the BM25
top-500; reports/nfcorpus-softmax*/): three seeds of one recipe rank better than any
of them alone. Standardising puts members whose raw scores sit on different scales
on one footing, so an ensemble's scores order the documents of one request and are
not comparable across requests (a single model's raw scores are).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from es_rerank.ranking.neighbours import standardised
from worker.scorer import DeltaScorer, Request


def ensemble_scores(members: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Per query, the mean of the members' scores, each standardised within the query first.

    A query whose scores are all equal contributes zeros.
    """
    return [
        np.mean([standardised(scores) for scores in per_member], axis=0).astype(np.float32)
        for per_member in zip(*members)
    ]


class EnsembleScorer:
    """``DeltaScorer``'s ``score_many`` over several scorers, combined by ``ensemble_scores``."""

    def __init__(self, members: Sequence[DeltaScorer]) -> None:
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two scorers, got {len(members)}")
        devices = {str(member.device) for member in members}
        if len(devices) > 1:
            raise ValueError(f"ensemble members must share one device, got {sorted(devices)}")
        self.members = tuple(members)

    @property
    def device(self) -> torch.device:
        """The device all members score on."""
        return self.members[0].device

    def __len__(self) -> int:
        return len(self.members)

    def score(self, query_rows: np.ndarray, doc_rows: np.ndarray, lex: np.ndarray | None) -> np.ndarray:
        """Ensemble scores float32 [n] of n documents for one query (see ``DeltaScorer.score``)."""
        return self.score_many([(query_rows, doc_rows, lex)])[0]

    def score_many(self, requests: Sequence[Request]) -> list[np.ndarray]:
        """One float32 ensemble score array per (query_rows, doc_rows, lex) request."""
        return ensemble_scores([member.score_many(requests) for member in self.members])
