"""Dev-only experiment: distil an ensemble of softmax-trained Delta-32-Lex3 models into one.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/distillation/run.py SEED ALPHA TEACHER.pt...

The seed ensembles beat every single model (README: +0.004 to +0.006 NDCG@20 on test) at
two or three times the serving cost. Here one student learns from the teachers as well as
from the judgments: each training group's loss (the softmax recipe, ``esrr train --loss
softmax``) becomes (1 - ALPHA) * that loss + ALPHA * KL(teacher || student), the two
distributions being softmax over the group's documents of the teachers' ensemble scores
(each member standardised within the query, as ``esrr eval --ensemble``) and of the
student's scores. ALPHA 0 is the recipe, run through this same script as the control.
The teachers score the training candidates once, before training. Everything else is
``TrainConfig``'s defaults with the softmax loss and early stopping on dev NDCG@20.
Appends one JSON line per run to ``results.jsonl`` beside this file and saves the model as
``<home>/models/distilled-sSEED-aALPHA.pt``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from es_rerank.lex import LEX3
from worker.ensemble import ensemble_scores
from worker.model import Checkpoint, DeltaConfig
from worker.training import train as training
from worker.training.cli import open_workspace
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import TrainConfig, model_score_fn, score_candidates, softmax_loss, train_model

HERE = Path(__file__).parent


def distillation_loss(alpha: float, teacher: torch.Tensor, scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(1 - alpha) * the recipe's softmax loss + alpha * KL(softmax(teacher) || softmax(scores)), over groups [G, 1 + K]."""
    target = torch.log_softmax(teacher, dim=1)
    kl = (target.exp() * (target - torch.log_softmax(scores, dim=1))).sum(dim=1).mean()
    return (1 - alpha) * softmax_loss(scores, weight) + alpha * kl


def main(seed: int, alpha: float, teachers: list[Path]) -> None:
    work = open_workspace(None)
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    dev_qrels = work.nfcorpus.qrels("dev")
    models = [Checkpoint.load(path).build_model(work.embeddings.vectors) for path in teachers]
    teacher = ensemble_scores([score_candidates(model_score_fn(m), train, work.doc_rows) for m in models])
    teacher_dev = ensemble_scores([score_candidates(model_score_fn(m), dev, work.doc_rows) for m in models])
    del models

    # train_epoch scores each batch through score_pairs, then calls group_loss with the scores
    # only: record the batch's (query, candidate) pairs on the way, to look up the teachers'.
    batch: dict[str, np.ndarray] = {}
    original_epoch = training.train_epoch

    def recording_epoch(model, optimizer, groups, score_pairs, *args, **kwargs):
        def recorded(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
            batch["query"], batch["doc"] = query_index, doc_index
            return score_pairs(query_index, doc_index)
        return original_epoch(model, optimizer, groups, recorded, *args, **kwargs)

    def group_loss(loss: str, scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        width = scores.shape[1]
        taught = np.fromiter((teacher[q][d] for q, d in zip(batch["query"], batch["doc"])), dtype=np.float32,
                             count=len(batch["query"]))
        return distillation_loss(alpha, torch.from_numpy(taught).view(width, -1).T, scores, weight)  # [G, 1 + K]

    training.train_epoch, training.group_loss = recording_epoch, group_loss
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, dev_qrels, work.doc_rows,
                         replace(TrainConfig(), seed=seed, loss="softmax"), progress=False)
    row = {"seed": seed, "alpha": alpha, "teachers": [path.name for path in teachers],
           "teachers_dev": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, teacher_dev), 4), **result.curve()}
    # Kept for a test evaluation (`esrr eval --extra`) should dev say it is worth one.
    Checkpoint(config, result.model.state_dict(), work.embeddings.version, work.backend.stats.version,
               {"dev_ndcg20": result.best_dev, "best_epoch": result.best_epoch, "train_seconds": result.seconds}).save(
        work.settings.models_dir / f"distilled-s{seed}-a{alpha:g}.pt")
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), [Path(arg) for arg in sys.argv[3:]])
