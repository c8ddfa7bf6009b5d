"""Dev-only experiment: two changes to Delta-32-Lex3's training data, one run per call.

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/query-scaling-and-desc/run.py VARIANT SEED

VARIANT is ``base`` (the recipe), ``qnorm`` (the abstract BM25 feature divided by its
maximum over the query's candidates, on train and dev), ``desc`` (the 812 train video
queries added a second time with their NutritionFacts video description as the query
text, same qrels) or ``qnorm+desc``. Appends one JSON line to ``results.jsonl`` beside
this file. Not part of the product: neither change beat the recipe on dev (README here).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from es_rerank.lex import LEX3
from worker.model import DeltaConfig
from worker.training.cli import open_workspace
from worker.training.data import QueryCandidates, build_candidates
from worker.training.train import TrainConfig, train_model

HERE = Path(__file__).parent
VARIANTS = ("base", "qnorm", "desc", "qnorm+desc")


def description_queries(nfcorpus_root: Path, train_queries: dict[str, str], qrels: dict) -> dict[str, str]:
    """Train video queries with their description as text, ids suffixed ``~desc``."""
    path = nfcorpus_root / "original" / "queries" / "train.vid-desc.queries"
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        query_id, text = line.split("\t", 1)
        if query_id in train_queries and query_id in qrels:
            out[f"{query_id}~desc"] = text
    return out


def scaled_by_query_max(candidates: list[QueryCandidates]) -> list[QueryCandidates]:
    """Column 0 (abstract BM25) divided by its maximum within each query."""
    out = []
    for c in candidates:
        lex = c.lex.copy()
        if len(lex):
            lex[:, 0] /= max(float(lex[:, 0].max()), 1e-6)
        out.append(replace(c, lex=lex))
    return out


def main(variant: str, seed: int) -> None:
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    work = open_workspace(None)
    train_qrels, dev_qrels = work.nfcorpus.qrels("train"), work.nfcorpus.qrels("dev")
    train_q = work.nfcorpus.queries("train")
    train = build_candidates(train_q, train_qrels, work.backend, work.embeddings, LEX3, progress=False)
    dev = build_candidates(work.nfcorpus.queries("dev"), dev_qrels, work.backend, work.embeddings, LEX3,
                           progress=False)
    if "desc" in variant:
        desc = description_queries(work.nfcorpus.root, train_q, train_qrels)
        desc_qrels = {q: train_qrels[q.removesuffix("~desc")] for q in desc}
        train += build_candidates(desc, desc_qrels, work.backend, work.embeddings, LEX3, progress=False)
    if "qnorm" in variant:
        train, dev = scaled_by_query_max(train), scaled_by_query_max(dev)
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    result = train_model(config, work.embeddings.vectors, train, dev, dev_qrels, work.doc_rows,
                         TrainConfig(seed=seed), progress=False)
    row = {"variant": variant, "seed": seed, "train_queries": len(train), "best_dev": round(result.best_dev, 4),
           "best_epoch": result.best_epoch, "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history]}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
