"""Dev-only: the votes as a fourth Lex feature, learned by Delta-32-Lex3, against the fixed fusion.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/judged-neighbours/learned.py SEED

Trains Delta-32-Lex3 with the recipe's settings and one more feature column: the
judged-neighbour vote (default ``NeighbourParams``), left-one-out for each training
query so that no query votes for its own documents. ``DeltaConfig`` only accepts the 18
Lex names, so the appended column is declared as ``text_bm25``: the model reads columns
by position, not by name. Appends one JSON line per seed to
``learned.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from es_rerank.lex import LEX3
from es_rerank.ranking.neighbours import JudgedNeighbours, fuse
from training.commands.workspace import open_workspace
from training.data import QueryCandidates, build_candidates
from training.metrics import PAPER_NDCG20, mean_metric
from training.train import TrainConfig, model_score_fn, score_candidates, train_model
from worker.model import DeltaConfig

HERE = Path(__file__).parent
VOTE_COLUMN = "text_bm25"  # a placeholder name; the column holds the votes


def with_votes(
    candidates: list[QueryCandidates], queries: dict[str, str], neighbours: JudgedNeighbours, leave_out: bool
) -> list[QueryCandidates]:
    """The candidates with the judged-neighbour vote as an extra last Lex column."""
    out = []
    for c in candidates:
        votes = neighbours.scores(queries[c.query_id], c.doc_ids, exclude=c.query_id if leave_out else None)
        out.append(replace(c, lex=np.concatenate([c.lex, votes[:, None]], axis=1).astype(np.float32)))
    return out


def main(seed: int) -> None:
    work = open_workspace(None)
    train_queries, train_qrels = work.nfcorpus.queries("train"), work.nfcorpus.qrels("train")
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    neighbours = JudgedNeighbours(train_queries, train_qrels)
    train = with_votes(
        build_candidates(train_queries, train_qrels, work.backend, work.embeddings, LEX3, progress=False),
        train_queries,
        neighbours,
        leave_out=True,
    )
    dev = with_votes(
        build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False),
        dev_queries,
        neighbours,
        leave_out=False,
    )
    config = DeltaConfig(lex_names=(*LEX3, VOTE_COLUMN), embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(
        config,
        work.embeddings.vectors,
        train,
        dev,
        dev_qrels,
        work.doc_rows,
        replace(TrainConfig(), seed=seed),
        progress=False,
    )
    learned = score_candidates(model_score_fn(result.model), dev, work.doc_rows)
    weight = neighbours.params.weight
    row = {
        "seed": seed,
        "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
        "best_epoch": result.best_epoch,
        "learned_dev": round(result.best_dev, 4),
        "learned_fused_dev": round(
            mean_metric(PAPER_NDCG20, dev_qrels, dev, [fuse(s, c.lex[:, -1], weight) for s, c in zip(learned, dev)]), 4
        ),
    }
    print(json.dumps(row))
    with (HERE / "learned.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]))
