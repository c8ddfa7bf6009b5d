"""Dev-only: leave NFCorpus's "marginally relevant" train documents out of the negatives.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/marginal-negatives/run.py SEED

The original release grades 28,775 train pairs "marginally relevant (topic/tag)"
(level 1 of ``original/qrels/train.3-2-1.qrel``); the graded train file the recipe
reads leaves them out, so the recipe samples them as negatives among the unjudged
documents. Here they get grade -1, which ``sample_triples`` uses neither as a positive
(grade > 0) nor as a negative (grade == 0). Everything else is the recipe. Appends one
JSON line per seed to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from index_setup.readers import read_qrels
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import build_candidates
from worker.training.train import TrainConfig, train_model

HERE = Path(__file__).parent


def main(seed: int) -> None:
    work = open_workspace(None)
    train_queries, train_qrels = work.nfcorpus.queries("train"), work.nfcorpus.qrels("train")
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    levels = read_qrels(work.nfcorpus.root / "original" / "qrels" / "train.3-2-1.qrel")
    marginal = {q: {d for d, g in docs.items() if g == 1} for q, docs in levels.items()}
    train = build_candidates(train_queries, train_qrels, work.backend, work.embeddings, LEX3, progress=False)
    left_out = 0
    for c in train:
        mask = np.array([d in marginal.get(c.query_id, ()) for d in c.doc_ids], dtype=bool) & (c.grades == 0)
        c.grades[mask] = -1
        left_out += int(mask.sum())
    dev = build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False)
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, dev_qrels, work.doc_rows,
                         replace(TrainConfig(), seed=seed), progress=False)
    row = {"seed": seed, "marginal_candidates_left_out": left_out,
           "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]))
