"""Dev-only experiment: reweight the listwise loss by how many judged documents a train query has.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/query-balance/run.py SEED ALPHA [MAX_EPOCHS]

NDCG@20 is a mean over queries, each counting once. The training loss is a mean over
groups (one per relevant retrieved document), so a train query with 300 relevant
documents weighs 100 times one with 3: the 10% of train queries with the most
judgments hold 56% of them. Here each group's weight sqrt(srel+) (the softmax recipe,
``esrr train --loss softmax``) is multiplied by n_q ** -ALPHA, n_q its query's number
of groups in the epoch, and rescaled so the mean weight of the epoch is unchanged (the
learning rate keeps its meaning). ALPHA 0 is the recipe; 1 gives every query the same
total weight; a negative ALPHA weighs queries with many judgments even more. Everything else is ``TrainConfig``'s defaults with the softmax loss and
early stopping on dev NDCG@20. Appends one JSON line per run to ``results.jsonl``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from worker.model import DeltaConfig
from worker.training import train as training
from worker.training.cli import open_workspace
from worker.training.data import Groups, sample_groups
from worker.training.train import TrainConfig, train_model

HERE = Path(__file__).parent


def balanced(groups: Groups, alpha: float) -> Groups:
    """``groups`` with each weight times n_q ** -alpha, rescaled to the same mean weight."""
    _, inverse, counts = np.unique(groups.query, return_inverse=True, return_counts=True)
    weight = groups.weight * counts[inverse].astype(np.float32) ** -alpha
    weight *= groups.weight.mean() / weight.mean()
    return Groups(groups.query, groups.docs, weight.astype(np.float32))


def main(seed: int, alpha: float, max_epochs: int = 8) -> None:
    work = open_workspace(None)
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    dev_qrels = work.nfcorpus.qrels("dev")
    # The training loop draws its groups through this module-level name; wrap it once.
    training.sample_groups = lambda *args, **kwargs: balanced(sample_groups(*args, **kwargs), alpha)
    settings = replace(TrainConfig(), seed=seed, loss="softmax", max_epochs=max_epochs)
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, dev_qrels, work.doc_rows, settings,
                         progress=False)
    row = {"seed": seed, "alpha": alpha, "max_epochs": max_epochs,
           "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4), "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), *map(int, sys.argv[3:]))
