"""Dev-only: does Delta-32-Lex3 gain from reading the abstract's best-matching passage instead of its start?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/query-window/run.py SEED MODE [LOSS]

The paper's Delta stage reads a document's first N = 50 tokens: the title and the
start of the abstract. Where the query's words sit further down, the Delta stage never
sees them (only the Lex features do); reading 200 tokens instead added nothing
(``../longer-documents/``). Here the model still reads 50 tokens, but per (query,
document) pair: the title, then the contiguous stretch of the abstract that fills the
rest and holds the most query-term IDF (each occurrence counted; the earliest such
stretch wins, so a document without a match reads exactly its first 50 tokens).

MODE ``first`` builds the same rows through the same code with the stretch pinned at the
abstract's start; it must reproduce the recipe's dev curve (the control). MODE
``window`` is the variant. LOSS is ``hinge`` (default) or ``softmax``. Appends one JSON
line per run to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from es_rerank.stats import FIRST_TOKENS, CorpusStats
from es_rerank.text import embedding_tokens, tokenize
from worker.inputs import term_rows
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import QueryCandidates
from worker.training.train import TrainConfig, fit_pairwise, model_score_fn, new_delta_model

HERE = Path(__file__).parent
MODES = ("first", "window")


def best_stretch(abstract: np.ndarray, weight_of: dict[int, float], width: int) -> int:
    """Start of the ``width``-token stretch of ``abstract`` with the most query weight (earliest on ties)."""
    weights = np.fromiter((weight_of.get(int(t), 0.0) for t in abstract), dtype=np.float64, count=len(abstract))
    sums = np.convolve(weights, np.ones(width), mode="valid")  # [len - width + 1] window totals
    return int(np.argmax(sums))  # argmax takes the first maximum: no match -> 0, the recipe's rows


def pair_rows(stats: CorpusStats, rows_of_term: np.ndarray, query: str, cand: QueryCandidates,
              mode: str) -> np.ndarray:
    """int64 [n, N] embedding rows each candidate shows the Delta stage for this query."""
    query_terms = np.unique(stats.vocab.lookup(tokenize(query)))
    weight_of = dict(zip(query_terms.tolist(), stats.idf(query_terms).tolist()))
    out = np.zeros((len(cand.stats_rows), FIRST_TOKENS), dtype=np.int64)
    for i, row in enumerate(cand.stats_rows):
        terms = stats.doc_terms(int(row))
        title = np.asarray(terms.title_ids)[:FIRST_TOKENS]
        abstract = np.asarray(terms.abstract_ids)
        width = FIRST_TOKENS - len(title)
        start = 0
        if mode == "window" and width > 0 and len(abstract) > width:
            start = best_stretch(abstract, weight_of, width)
        shown = np.concatenate([title, abstract[start:start + width]])
        out[i, :len(shown)] = rows_of_term[shown]
    return out


def main(seed: int, mode: str, loss: str = "hinge") -> None:
    if mode not in MODES:
        raise SystemExit(f"MODE must be one of {MODES}, got {mode!r}")
    work = open_workspace(None)
    stats = work.backend.stats
    # title_ids and abstract_ids are lexical terms; the model reads their embedding-path forms
    rows_of_term = term_rows(embedding_tokens(list(stats.vocab.terms)), work.embeddings)
    train_queries, dev_queries = work.nfcorpus.queries("train"), work.nfcorpus.queries("dev")
    dev_qrels = work.nfcorpus.qrels("dev")
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    started = time.perf_counter()
    train_rows = [pair_rows(stats, rows_of_term, train_queries[c.query_id], c, mode) for c in train]
    dev_rows = [pair_rows(stats, rows_of_term, dev_queries[c.query_id], c, mode) for c in dev]
    build_s = time.perf_counter() - started
    if mode == "first":  # the control must show the model exactly what the recipe shows it
        for cand, rows in zip(dev, dev_rows):
            assert np.array_equal(rows, work.doc_rows[cand.stats_rows]), cand.query_id
    moved = float(np.mean(np.concatenate([np.any(r != work.doc_rows[c.stats_rows], axis=1) for c, r in zip(dev, dev_rows)])))

    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    settings = replace(TrainConfig(), seed=seed, loss=loss)
    model, optimizer = new_delta_model(config, work.embeddings.vectors, train, settings)

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray):
        import torch

        docs = np.stack([train_rows[q][d] for q, d in zip(query_index, doc_index)])
        queries = np.stack([train[q].query_rows for q in query_index])
        lex = np.stack([train[q].lex[d] for q, d in zip(query_index, doc_index)])
        return model(torch.from_numpy(docs), torch.from_numpy(queries), torch.from_numpy(lex))

    def score_dev() -> list[np.ndarray]:
        score = model_score_fn(model)
        return [score(cand.query_rows, rows, cand.lex) for cand, rows in zip(dev, dev_rows)]

    result = fit_pairwise(model, optimizer, train, score_pairs, score_dev, dev, dev_qrels, settings, progress=False)
    row = {"seed": seed, "mode": mode, "loss": loss, "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4),
           "dev_pairs_changed": round(moved, 4), "rows_build_s": round(build_s), "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
