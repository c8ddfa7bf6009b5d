"""Dev-only: does a second, different learned ranker add to Delta-32-Lex3's order?

    pip install lightgbm==4.7.0   # this experiment only; the product does not use it
    ESRR_HOME=artifacts python reports/experiments/lambdamart-fusion/run.py [CHECKPOINT ...]

The seed ensembles gain mostly with their second member, and two seeds of one recipe
make similar mistakes. LambdaMART (LightGBM's lambdarank, the usual learning-to-rank
baseline) over all 18 Lex features of section 4.2.2 sees the documents differently:
every field, exact and bigram matches, no embeddings, trees instead of a network. It is
trained on the train split's BM25 top-500 with the graded train labels (gains 0, 1, 3
as in the paper's NDCG), early-stopped on dev NDCG@20 as ``esrr train`` is. Then, per
dev query and each checkpoint given,

    score(d) = z(model)(d) + w * z(lambdamart)(d)      z: standardised within the query

over a grid of w, alone and with the served candidate feedback after the fusion.
Appends one JSON line per row to ``results.jsonl`` beside this file. Test is never read.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import lightgbm as lgb
import numpy as np

from es_rerank.feedback import document_vectors, with_feedback
from es_rerank.lex import ALL_FEATURES, LEX3
from es_rerank.neighbours import standardised
from worker.ensemble import ensemble_scores
from worker.model import Checkpoint
from worker.training.cli import open_workspace
from worker.training.data import QueryCandidates
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import model_score_fn, score_candidates

HERE = Path(__file__).parent
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
PARAMS = {"objective": "lambdarank", "label_gain": [0, 1, 3], "eval_at": [20], "learning_rate": 0.05,
          "num_leaves": 31, "min_data_in_leaf": 50, "feature_fraction": 0.8, "bagging_fraction": 0.8,
          "bagging_freq": 1, "lambdarank_truncation_level": 40, "num_threads": 2, "seed": 13, "verbose": -1}
LEX3_COLUMNS = [ALL_FEATURES.index(name) for name in LEX3]


def lightgbm_set(candidates: list[QueryCandidates], reference: lgb.Dataset | None = None) -> lgb.Dataset:
    """All candidates of the queries as one LightGBM ranking set (one group per query)."""
    kept = [c for c in candidates if len(c.doc_ids)]
    return lgb.Dataset(np.concatenate([c.lex for c in kept]), label=np.concatenate([c.grades for c in kept]).clip(0, 2),
                       group=[len(c.doc_ids) for c in kept], feature_name=list(ALL_FEATURES), reference=reference,
                       free_raw_data=False)


def lambdamart_scores(train: list[QueryCandidates], dev: list[QueryCandidates]) -> tuple[list[np.ndarray], dict]:
    """LambdaMART's scores of every dev candidate, and how the model came out."""
    train_set = lightgbm_set(train)
    dev_set = lightgbm_set(dev, reference=train_set)
    start = time.perf_counter()
    booster = lgb.train(PARAMS, train_set, num_boost_round=1000, valid_sets=[dev_set], valid_names=["dev"],
                        callbacks=[lgb.early_stopping(50, verbose=False)])
    info = {"trees": booster.best_iteration, "train_s": round(time.perf_counter() - start, 1),
            "importance_gain": dict(zip(ALL_FEATURES, np.round(booster.feature_importance("gain"), 1).tolist()))}
    return [booster.predict(c.lex, num_iteration=booster.best_iteration).astype(np.float32) if len(c.doc_ids)
            else np.zeros(0, np.float32) for c in dev], info


def fused(base: list[np.ndarray], other: list[np.ndarray], weight: float) -> list[np.ndarray]:
    """z(base) + weight * z(other), per query."""
    return [(standardised(b) + weight * standardised(o)).astype(np.float32) for b, o in zip(base, other)]


def main(checkpoints: list[Path]) -> None:
    work = open_workspace(None)
    dev_qrels = work.nfcorpus.qrels("dev")
    train = work.split_candidates("train", lex_names=ALL_FEATURES, progress=False)
    dev = work.split_candidates("dev", lex_names=ALL_FEATURES, progress=False)
    lambdamart, info = lambdamart_scores(train, dev)

    def ndcg(scores: list[np.ndarray]) -> float:
        return round(mean_metric(PAPER_NDCG20, dev_qrels, dev, scores), 4)

    stats, params = work.backend.stats, work.settings.feedback
    windows = [document_vectors([stats.doc_terms(int(r)) for r in c.stats_rows], stats) for c in dev]
    rows = [{"base": "BM25", "dev_ndcg20": ndcg([c.bm25 for c in dev])},
            {"base": "LambdaMART", **info, "dev_ndcg20": ndcg(lambdamart),
             "feedback_dev_ndcg20": ndcg([with_feedback(s, w, params) for s, w in zip(lambdamart, windows)])}]
    print(rows[-1])
    dev_lex3 = [replace(c, lex=c.lex[:, LEX3_COLUMNS]) for c in dev]
    bases = {}
    for path in checkpoints:
        model = Checkpoint.load(path).build_model(work.embeddings.vectors)
        bases[path.stem] = score_candidates(model_score_fn(model), dev_lex3, work.doc_rows)
    if len(bases) > 1:
        bases["ensemble"] = ensemble_scores(list(bases.values()))
    for name, base in bases.items():
        for weight in WEIGHTS:
            scores = fused(base, lambdamart, weight)
            rows.append({"base": name, "lambdamart_weight": weight, "dev_ndcg20": ndcg(scores),
                         "feedback_dev_ndcg20": ndcg([with_feedback(s, w, params) for s, w in zip(scores, windows)])})
            print(rows[-1])
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main([Path(arg) for arg in sys.argv[1:]])
