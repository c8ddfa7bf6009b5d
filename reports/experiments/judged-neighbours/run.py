"""Dev-only tuning: fuse BM25 or Delta-32-Lex3 scores with judged-neighbour votes.

    ESRR_HOME=artifacts python reports/experiments/judged-neighbours/run.py [CHECKPOINT]

The votes (``es_rerank.ranking.neighbours``) come from the NFCorpus train queries and
their judgments only; the grid below is scored on the dev queries, never on test.
CHECKPOINT defaults to the served Delta-32-Lex3 model. Writes ``results.jsonl``
beside this file (one line per grid point) and prints the best points.
"""

from __future__ import annotations

import json
import sys
from itertools import product
from pathlib import Path

from es_rerank.lex import LEX3
from es_rerank.ranking.neighbours import JudgedNeighbours, NeighbourParams, fuse
from training.api import (
    PAPER_NDCG20,
    build_candidates,
    checkpoint_path,
    mean_metric,
    model_score_fn,
    open_workspace,
    score_candidates,
)
from worker.model import Checkpoint

HERE = Path(__file__).parent
KS = (5, 10, 20, 50, 100)
POWERS = (1.0, 2.0, 3.0, 4.0)
WEIGHTS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0)


def main(checkpoint: Path | None) -> None:
    work = open_workspace(None)
    train_queries, train_qrels = work.nfcorpus.queries("train"), work.nfcorpus.qrels("train")
    dev_queries, dev_qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    dev = build_candidates(dev_queries, dev_qrels, work.backend, work.embeddings, LEX3, progress=False)
    model = Checkpoint.load(checkpoint or checkpoint_path(work.settings, "delta-32-lex3"))
    base_scores = {
        "BM25": [c.bm25 for c in dev],
        "Delta-32-Lex3": score_candidates(
            model_score_fn(model.build_model(work.embeddings.vectors)), dev, work.doc_rows
        ),
    }
    rows = []
    for k, power in product(KS, POWERS):
        neighbours = JudgedNeighbours(train_queries, train_qrels, NeighbourParams(k=k, power=power))
        votes = [neighbours.scores(dev_queries[c.query_id], c.doc_ids) for c in dev]
        for (base, scores), weight in product(base_scores.items(), WEIGHTS):
            fused = [fuse(s, v, weight) for s, v in zip(scores, votes)]
            rows.append(
                {
                    "base": base,
                    "k": k,
                    "power": power,
                    "weight": weight,
                    "dev_ndcg20": round(mean_metric(PAPER_NDCG20, dev_qrels, dev, fused), 4),
                }
            )
    with (HERE / "results.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    for base in base_scores:
        mine = [r for r in rows if r["base"] == base]
        alone = next(r for r in mine if r["weight"] == 0.0)
        print(base, "alone", alone["dev_ndcg20"], "best fused", max(mine, key=lambda r: r["dev_ndcg20"]))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
