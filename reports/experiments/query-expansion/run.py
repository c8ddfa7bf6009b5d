"""Dev-only: does Delta-32-Lex3 gain from query words taken from the top BM25 hits (pseudo-relevance feedback)?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/query-expansion/run.py SEED MODE

The model reads M = 7 query words; NFCorpus queries are mostly shorter (titles of a few
words), so several of the Delta stage's query slots hold padding. Here the free slots
are filled with the heaviest words of the query's BM25 top 10: the sum of those hits'
``document_vectors`` rows (unit-length (1 + log tf) * idf over title + abstract, the
candidate feedback's vectors), leaving out words already in the query and words without
a vector. Each document word of the Delta stage can then match a feedback word as well
as a query word. The Lex features still see the query alone.

MODE ``none`` runs the recipe through this script (the control); ``prf`` is the
variant. Hinge loss, everything else the recipe. Appends one JSON line per run to
``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.embeddings import UNK
from es_rerank.feedback import document_vectors
from es_rerank.lex import LEX3
from es_rerank.payload import QUERY_LEN
from es_rerank.stats import CorpusStats
from es_rerank.text import embedding_tokens, tokenize
from worker.inputs import term_rows
from worker.model import PAD_ID, DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import QueryCandidates
from worker.training.train import TrainConfig, train_model

HERE = Path(__file__).parent
MODES = ("none", "prf")
FEEDBACK_DOCS = 10


def expanded(cand: QueryCandidates, stats: CorpusStats, rows_of_term: np.ndarray) -> QueryCandidates:
    """The candidates with their query's free slots filled by the heaviest known words of its BM25 top 10."""
    free = np.flatnonzero(cand.query_rows == PAD_ID)
    if len(free) == 0 or len(cand.stats_rows) == 0:
        return cand
    top = [stats.doc_terms(int(row)) for row in cand.stats_rows[:FEEDBACK_DOCS]]  # candidates keep BM25's order
    weights = np.asarray(document_vectors(top, stats).sum(axis=0)).ravel()  # [vocab]
    taken = set(cand.query_rows.tolist())
    rows = cand.query_rows.copy()
    slot = 0
    for term in np.argsort(-weights, kind="stable"):
        if slot == len(free) or weights[term] <= 0:
            break
        row = int(rows_of_term[term])
        if row in taken or row == UNK:
            continue
        rows[free[slot]] = row
        taken.add(row)
        slot += 1
    return replace(cand, query_rows=rows)


def main(seed: int, mode: str) -> None:
    if mode not in MODES:
        raise SystemExit(f"MODE must be one of {MODES}, got {mode!r}")
    work = open_workspace(None)
    stats = work.backend.stats
    rows_of_term = term_rows(embedding_tokens(list(stats.vocab.terms)), work.embeddings)
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    if mode == "prf":
        train = [expanded(c, stats, rows_of_term) for c in train]
        dev = [expanded(c, stats, rows_of_term) for c in dev]
    queries = work.nfcorpus.queries("dev")
    words = [len(embedding_tokens(tokenize(queries[c.query_id]))) for c in dev]
    filled = [int((c.query_rows != PAD_ID).sum()) for c in dev]
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, work.nfcorpus.qrels("dev"), work.doc_rows,
                         replace(TrainConfig(), seed=seed), progress=False)
    row = {"seed": seed, "mode": mode, "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4),
           "dev_query_words_mean": round(float(np.mean(np.minimum(words, QUERY_LEN))), 2),
           "dev_query_slots_filled_mean": round(float(np.mean(filled)), 2), "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
