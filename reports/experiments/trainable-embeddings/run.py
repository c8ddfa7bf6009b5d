"""Dev-only experiment: does fine-tuning the word vectors with the ranker help?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/trainable-embeddings/run.py SEED EMB_LR [LOSS]

The paper keeps the word2vec table frozen (section 3: only the convolutional and
feed-forward stages are trained). Here the table becomes a parameter of its own Adagrad
group (learning rate ``EMB_LR``, no L2); everything else is the recipe
(``TrainConfig`` defaults, ``LOSS`` hinge or softmax, early stopping on dev NDCG@20).
The embedding-only Delta-32 stays far below BM25 on dev (0.19 against 0.24): word2vec
on 21M tokens gives the Delta stage little relevance signal, which training on 2,590
judged queries might add. Appends one JSON line per run to ``results.jsonl`` beside
this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from es_rerank.lex import LEX3
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import batch_inputs
from worker.training.train import TrainConfig, fit_pairwise, model_score_fn, new_delta_model, score_candidates

HERE = Path(__file__).parent


def main(seed: int, embedding_lr: float, loss: str = "hinge") -> None:
    work = open_workspace(None)
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    dev_qrels = work.nfcorpus.qrels("dev")
    settings = replace(TrainConfig(), seed=seed, loss=loss)
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    model, optimizer = new_delta_model(config, work.embeddings.vectors, train, settings)
    vectors = model.embeddings.clone()  # the served table is a read-only memory map
    del model._buffers["embeddings"]
    model.embeddings = nn.Parameter(vectors)
    optimizer.add_param_group({"params": [model.embeddings], "lr": embedding_lr, "weight_decay": 0.0})

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        docs, query_rows, lex = batch_inputs(train, work.doc_rows, query_index, doc_index)
        return model(torch.from_numpy(docs), torch.from_numpy(query_rows), torch.from_numpy(lex))

    result = fit_pairwise(model, optimizer, train, score_pairs,
                          lambda: score_candidates(model_score_fn(model), dev, work.doc_rows),
                          dev, dev_qrels, settings, progress=False)
    moved = (result.model.embeddings.detach() - torch.from_numpy(np.asarray(work.embeddings.vectors)))
    row = {"seed": seed, "embedding_lr": embedding_lr, "loss": loss,
           "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4),
           "rows_changed": int((moved.abs().amax(dim=1) > 0).sum()),
           "mean_row_shift": round(float(moved.norm(dim=1)[moved.abs().amax(dim=1) > 0].mean()), 4),
           "mean_row_norm": round(float(np.linalg.norm(work.embeddings.vectors, axis=1).mean()), 4),
           "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), *sys.argv[3:])
