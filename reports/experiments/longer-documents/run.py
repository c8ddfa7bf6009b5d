"""Dev-only: does Delta-32-Lex3 gain from reading more than the first 50 document tokens?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/longer-documents/run.py SEED N

The paper's N = 50 covers the title and the first sentences of an abstract (NFCorpus
documents have a median of 237 words). Here every document's first N embedding-path
tokens are looked up from the corpus text (the index statistics keep only the first 50),
and Delta-32-Lex3 is trained with ``doc_len=N`` and the recipe's other settings.
Appends one JSON line per run to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from es_rerank.text import embedding_tokens, tokenize
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import build_candidates
from worker.training.train import TrainConfig, train_model

HERE = Path(__file__).parent


class LongDocumentRows:
    """[n_docs, N] embedding rows of every document's first N tokens, 0-padded (``DocumentRows`` for any N)."""

    def __init__(self, work, n_tokens: int) -> None:
        stats = work.backend.stats
        self.rows = np.zeros((stats.n_docs, n_tokens), dtype=np.int32)
        for doc in work.nfcorpus.documents():
            tokens = embedding_tokens((tokenize(doc.title) + tokenize(doc.abstract))[:n_tokens])
            ids = work.embeddings.lookup(tokens)
            self.rows[stats.row(doc.doc_id), :len(ids)] = ids

    def __getitem__(self, stats_rows: np.ndarray) -> np.ndarray:
        return self.rows[stats_rows].astype(np.int64)


def main(seed: int, n_tokens: int) -> None:
    work = open_workspace(None)
    doc_rows = LongDocumentRows(work, n_tokens)
    train_queries, train_qrels = work.nfcorpus.queries("train"), work.nfcorpus.qrels("train")
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    train = build_candidates(train_queries, train_qrels, work.backend, work.embeddings, LEX3, progress=False)
    dev = build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False)
    config = DeltaConfig(lex_names=LEX3, doc_len=n_tokens, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, dev_qrels, doc_rows,
                         replace(TrainConfig(), seed=seed), progress=False)
    row = {"seed": seed, "doc_len": n_tokens, "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4), "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
