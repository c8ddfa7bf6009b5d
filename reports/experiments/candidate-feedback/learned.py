"""Dev-only: the candidate-feedback vote as a fourth Lex feature, learned by Delta-32-Lex3.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/candidate-feedback/learned.py SEED [LOSS]

Trains Delta-32-Lex3 with the recipe's settings (LOSS hinge by default, or softmax) and
one more feature column: each candidate's neighbour vote over the BM25 scores of its
query's top-500 (``neighbour_votes`` with the served k and ``document_vectors``), which
the first stage gives before the model runs. ``DeltaConfig`` only accepts the 18 Lex
names, so the appended column is declared as ``text_bm25``: the model reads columns by
position, not by name. Reports the learned model's dev NDCG@20 alone and with the fixed
feedback on top; appends one JSON line per run to ``learned.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import sparse

from es_rerank.lex import LEX3
from es_rerank.ranking.feedback import document_vectors, neighbour_votes, with_feedback
from es_rerank.stats import CorpusStats
from training.commands.workspace import open_workspace
from training.data import QueryCandidates
from training.metrics import PAPER_NDCG20, mean_metric
from training.train import TrainConfig, model_score_fn, score_candidates, train_model
from worker.model import DeltaConfig

HERE = Path(__file__).parent
VOTE_COLUMN = "text_bm25"  # a placeholder name; the column holds the votes


def window_vectors(stats: CorpusStats, c: QueryCandidates) -> sparse.csr_matrix:
    """The ``document_vectors`` of one query's candidates."""
    return document_vectors([stats.doc_terms(int(r)) for r in c.stats_rows], stats)


def with_vote_column(candidates: list[QueryCandidates], stats: CorpusStats, k: int) -> list[QueryCandidates]:
    """The candidates with the BM25 neighbour vote as an extra last Lex column."""
    return [
        replace(
            c,
            lex=np.concatenate([c.lex, neighbour_votes(window_vectors(stats, c), c.bm25, k)[:, None]], axis=1).astype(
                np.float32
            ),
        )
        for c in candidates
    ]


def main(seed: int, loss: str) -> None:
    work = open_workspace(None)
    stats, params = work.backend.stats, work.settings.feedback
    dev_qrels = work.nfcorpus.qrels("dev")
    train = with_vote_column(work.split_candidates("train", progress=False), stats, params.k)
    dev = with_vote_column(work.split_candidates("dev", progress=False), stats, params.k)
    config = DeltaConfig(lex_names=(*LEX3, VOTE_COLUMN), embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(
        config,
        work.embeddings.vectors,
        train,
        dev,
        dev_qrels,
        work.doc_rows,
        replace(TrainConfig(), seed=seed, loss=loss),
        progress=False,
    )
    learned = score_candidates(model_score_fn(result.model), dev, work.doc_rows)
    fed = [with_feedback(s, window_vectors(stats, c), params) for s, c in zip(learned, dev)]
    row = {
        "seed": seed,
        "loss": loss,
        "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
        "best_epoch": result.best_epoch,
        "learned_dev": round(result.best_dev, 4),
        "learned_with_feedback_dev": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, fed), 4),
    }
    print(json.dumps(row))
    with (HERE / "learned.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "hinge")
