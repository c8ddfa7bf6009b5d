"""Dev-only experiment: does averaging the weights of successive epochs beat the best epoch?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/weight-averaging/run.py SEED

Trains Delta-32-Lex3 with the recipe's settings for ``TrainConfig().max_epochs`` epochs
(no early stopping) and after every epoch scores on dev both the model as trained and
the running mean of its weights since epoch 1 (stochastic weight averaging,
``torch.optim.swa_utils.AveragedModel``). Three seed ensembles gained 1-2 points over
their members (README); an average of one run's weights costs one model at serving.
Appends one JSON line per seed to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel

from es_rerank.lex import LEX3
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import batch_inputs, sample_triples
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import (TrainConfig, model_score_fn, new_delta_model, score_candidates,
                                   train_epoch)

HERE = Path(__file__).parent


def main(seed: int) -> None:
    work = open_workspace(None)
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    dev_qrels = work.nfcorpus.qrels("dev")
    settings = replace(TrainConfig(), seed=seed)
    model, optimizer = new_delta_model(DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1]),
                                       work.embeddings.vectors, train, settings)
    averaged = AveragedModel(model)  # buffers (the Lex standardisation) are copied, not averaged

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        docs, query_rows, lex = batch_inputs(train, work.doc_rows, query_index, doc_index)
        return model(torch.from_numpy(docs), torch.from_numpy(query_rows), torch.from_numpy(lex))

    def dev_ndcg(scored: torch.nn.Module) -> float:
        scored.eval()
        with torch.no_grad():
            return round(mean_metric(PAPER_NDCG20, dev_qrels, dev,
                                     score_candidates(model_score_fn(scored), dev, work.doc_rows)), 4)

    rng = np.random.default_rng(seed)
    trained, mean_weights = [], []
    for epoch in range(1, settings.max_epochs + 1):
        triples = sample_triples(train, rng, settings.max_positives, settings.negatives,
                                 settings.negatives_drawn)
        train_epoch(model, optimizer, triples.as_groups(), score_pairs, "hinge", settings.batch_size, epoch,
                    progress=False)
        averaged.update_parameters(model)
        trained.append(dev_ndcg(model))
        mean_weights.append(dev_ndcg(averaged.module))
    row = {"seed": seed, "dev_per_epoch": trained, "averaged_dev_per_epoch": mean_weights,
           "best_epoch_dev": max(trained), "best_averaged_dev": max(mean_weights)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]))
