"""Dev-only: Delta-32-Lex3 trained with a listwise softmax loss instead of the pairwise hinge.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/listwise-loss/run.py SEED [NEGATIVES]

Each epoch every retrieved relevant train document D+ meets NEGATIVES (default 8)
non-relevant documents drawn uniformly from its query's BM25 top-500, as in the recipe;
the loss of that group is sqrt(srel+) * (logsumexp(s+, s-_1..s-_K) - s+), the softmax
cross-entropy of picking D+ (srel of section 4.1; the non-relevant have srel 0, so the
weight is the recipe's sqrt(srel+ - srel-)). Model, optimiser, L2, dropout, minibatch of
256 groups and early stopping on dev NDCG@20 are the recipe's. Appends one JSON line per
run to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from es_rerank.lex import LEX3
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import batch_inputs, build_candidates, scaled_relevance
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import TrainConfig, model_score_fn, new_delta_model, score_candidates

HERE = Path(__file__).parent


def sample_groups(train, rng: np.random.Generator, negatives: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index [G], candidate index [G, 1 + K] with D+ first, weight [G]) in random order."""
    parts = []
    for qi, cand in enumerate(train):
        positives = np.flatnonzero(cand.grades > 0)
        pool = np.flatnonzero((cand.grades == 0) & (cand.bm25 > 0))
        if len(positives) == 0 or len(pool) == 0:
            continue
        drawn = rng.choice(pool, size=(len(positives), negatives), replace=len(pool) < negatives * len(positives))
        docs = np.concatenate([positives[:, None], drawn], axis=1)  # [P, 1 + K]
        parts.append((np.full(len(positives), qi), docs, np.sqrt(scaled_relevance(cand.grades)[positives])))
    query, docs, weight = (np.concatenate(column) for column in zip(*parts))
    order = rng.permutation(len(query))
    return query[order], docs[order], weight[order].astype(np.float32)


def main(seed: int, negatives: int) -> None:
    work = open_workspace(None)
    settings = TrainConfig(seed=seed)
    train_queries, train_qrels = work.nfcorpus.queries("train"), work.nfcorpus.qrels("train")
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    train = build_candidates(train_queries, train_qrels, work.backend, work.embeddings, LEX3, progress=False)
    dev = build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False)
    model, optimizer = new_delta_model(DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1]),
                                       work.embeddings.vectors, train, settings)
    rng = np.random.default_rng(seed)
    history, best, stale = [], -1.0, 0
    for epoch in range(1, settings.max_epochs + 1):
        query, docs, weight = sample_groups(train, rng, negatives)
        model.train()
        for start in range(0, len(query), settings.batch_size):
            batch = slice(start, start + settings.batch_size)
            group_size = docs.shape[1]
            inputs = batch_inputs(train, work.doc_rows, np.repeat(query[batch], group_size), docs[batch].ravel())
            scores = model(*(torch.from_numpy(a) for a in inputs)).view(-1, group_size)  # [B, 1 + K]
            loss = (torch.from_numpy(weight[batch]) * (torch.logsumexp(scores, dim=1) - scores[:, 0])).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            dev_ndcg = mean_metric(PAPER_NDCG20, dev_qrels, dev,
                                   score_candidates(model_score_fn(model), dev, work.doc_rows))
        history.append(round(dev_ndcg, 4))
        print(f"seed {seed} epoch {epoch}: dev NDCG@20 {dev_ndcg:.4f}", flush=True)
        if dev_ndcg > best:
            best, stale = dev_ndcg, 0
        else:
            stale += 1
            if stale >= settings.patience:
                break
    row = {"seed": seed, "negatives": negatives, "dev_per_epoch": history,
           "best_epoch": history.index(round(best, 4)) + 1, "best_dev": round(best, 4)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8)
