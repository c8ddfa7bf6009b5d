"""Ranking metrics, all through ir_measures (pytrec_eval); none is computed by hand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import ir_measures
import numpy as np
from ir_measures import AP, Measure, P, R, nDCG

if TYPE_CHECKING:
    from training.data import QueryCandidates

# The paper's NDCG (section 4.4.1): gain 2^rel - 1. trec_eval's ndcg_cut uses gain = rel, as BEIR reports.
PAPER_NDCG20 = nDCG(gains={0: 0, 1: 1, 2: 3, 3: 7}) @ 20
TREC_NDCG20 = nDCG @ 20
NDCG10 = nDCG @ 10  # BEIR's headline measure: what `esrr eval`'s verdict is about
MAP = AP
P5 = P @ 5
RECALL500 = R @ 500
REPORT_MEASURES = (NDCG10, PAPER_NDCG20, TREC_NDCG20, MAP, P5)
HEADLINE = NDCG10
MEASURE_LABELS = {
    NDCG10: "nDCG@10",
    PAPER_NDCG20: "NDCG@20 (2^rel-1)",
    TREC_NDCG20: "NDCG@20 (trec_eval)",
    MAP: "MAP",
    P5: "P@5",
    RECALL500: "Recall@500",
}

Run = dict[str, dict[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


def run_from_scores(candidates: Sequence[QueryCandidates], scores: Sequence[np.ndarray]) -> Run:
    """query id -> {doc id: score} for candidates (``QueryCandidates``) and their scores."""
    return {c.query_id: dict(zip(c.doc_ids, map(float, s))) for c, s in zip(candidates, scores)}


def per_query(measure: Measure, qrels: Qrels, run: Run) -> dict[str, float]:
    """Value of ``measure`` for every judged query; a query with no hits scores 0."""
    values = {q: 0.0 for q in qrels}
    for metric in ir_measures.iter_calc([measure], qrels, run):
        values[metric.query_id] = metric.value
    return values


def mean_metric(
    measure: Measure, qrels: Qrels, candidates: Sequence[QueryCandidates], scores: Sequence[np.ndarray]
) -> float:
    """Mean of ``measure`` over the queries of ``candidates``."""
    run = run_from_scores(candidates, scores)
    judged = {c.query_id: qrels.get(c.query_id, {}) for c in candidates}
    return float(np.mean(list(per_query(measure, judged, run).values())))


def write_trec_run(run: Run, path: str | Path, tag: str) -> None:
    """Write a TREC run file: ``qid Q0 docid rank score tag``, ties by decreasing doc id."""
    with open(path, "w", encoding="utf-8") as out:
        for query_id in sorted(run):
            by_id_descending = sorted(run[query_id].items(), reverse=True)
            ranked = sorted(by_id_descending, key=lambda item: -item[1])  # stable: ties keep id order
            for rank, (doc_id, score) in enumerate(ranked, 1):
                out.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
