"""Dev-only: does Delta-32-Lex3 gain from a final BM25 interpolation or a shallower rerank depth?

    ESRR_HOME=artifacts python reports/experiments/interpolation-and-depth/run.py [CHECKPOINT ...]

For every checkpoint (default: the served Delta-32-Lex3 model) and for the mean of
their standardised scores (the ensemble), scores the NFCorpus dev queries with
  - interpolation: (1 - a) * z(model) + a * z(BM25), z = standardised within the query;
  - depth: the model reorders only the BM25 top-d; the rest keep BM25 order below it.
Writes ``results.jsonl`` beside this file and prints the best points. Test is never read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from es_rerank.neighbours import standardised
from worker.model import Checkpoint
from worker.training.cli import checkpoint_path, open_workspace
from worker.training.data import build_candidates
from worker.ensemble import ensemble_scores
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import model_score_fn, score_candidates

HERE = Path(__file__).parent
ALPHAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
DEPTHS = (20, 50, 100, 200, 300, 500)


def interpolated(model: np.ndarray, bm25: np.ndarray, alpha: float) -> np.ndarray:
    """(1 - alpha) * z(model) + alpha * z(BM25) for one query."""
    return ((1 - alpha) * standardised(model) + alpha * standardised(bm25)).astype(np.float32)


def reranked_to_depth(model: np.ndarray, bm25: np.ndarray, depth: int) -> np.ndarray:
    """The model orders the BM25 top-``depth``; every lower hit keeps its BM25 rank beneath them."""
    if len(bm25) == 0:
        return np.zeros(0, dtype=np.float32)
    order = np.argsort(-bm25, kind="stable")
    top, rest = order[:depth], order[depth:]
    scores = np.empty(len(bm25), dtype=np.float64)
    z = standardised(model[top])
    scores[top] = z - z.min() + len(rest) + 1  # every reranked hit above every other
    scores[rest] = np.arange(len(rest), 0, -1)
    return scores.astype(np.float32)


def main(checkpoints: list[Path]) -> None:
    work = open_workspace(None)
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    dev = build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False)
    bm25 = [c.bm25 for c in dev]
    models = {}
    for path in checkpoints or [checkpoint_path(work.settings, "delta-32-lex3")]:
        model = Checkpoint.load(path).build_model(work.embeddings.vectors)
        models[path.stem] = score_candidates(model_score_fn(model), dev, work.doc_rows)
    if len(models) > 1:
        models["ensemble"] = ensemble_scores(list(models.values()))
    rows = [{"model": "BM25", "dev_ndcg20": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, bm25), 4)}]
    for name, scores in models.items():
        for alpha in ALPHAS:
            fused = [interpolated(s, b, alpha) for s, b in zip(scores, bm25)]
            rows.append({"model": name, "alpha": alpha, "depth": 500,
                         "dev_ndcg20": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, fused), 4)})
        for depth in DEPTHS:
            cut = [reranked_to_depth(s, b, depth) for s, b in zip(scores, bm25)]
            rows.append({"model": name, "alpha": 0.0, "depth": depth,
                         "dev_ndcg20": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, cut), 4)})
    with (HERE / "results.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    for row in rows:
        print(row)


if __name__ == "__main__":
    main([Path(arg) for arg in sys.argv[1:]])
