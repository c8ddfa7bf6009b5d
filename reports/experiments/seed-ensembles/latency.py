"""What an ensemble costs at serving: the real NFCorpus test windows scored by 1, 3 and 5 members.

    ESRR_HOME=artifacts python reports/experiments/seed-ensembles/latency.py CHECKPOINT [CHECKPOINT ...]

The BM25 top-500 of every test query, scored on the CPU one query per call, by the first
checkpoint alone and by ``EnsembleScorer`` over the first 3 and all given checkpoints (the
worker's serving path); rounds interleaved, median over rounds. Appends one JSON line to
``latency.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from es_rerank.machine import machine_description
from training.api import build_candidates, open_workspace, split_queries
from worker.ensemble import EnsembleScorer
from worker.model import Checkpoint
from worker.scorer import DeltaScorer

HERE = Path(__file__).parent
ROUNDS = 5


def main(paths: list[Path]) -> None:
    work = open_workspace(None)
    checkpoints = [Checkpoint.load(path) for path in paths]
    scorers = [DeltaScorer.from_model(c.build_model(work.embeddings.vectors), "cpu") for c in checkpoints]
    candidates = build_candidates(
        split_queries(work, "test"),
        work.nfcorpus.qrels("test"),
        work.backend,
        work.embeddings,
        checkpoints[0].config.lex_names,
        progress=False,
    )
    requests = [(c.query_rows, work.doc_rows[c.stats_rows], c.lex) for c in candidates]
    rankers = {
        "1 model": scorers[0],
        "3 models": EnsembleScorer(scorers[:3]),
        f"{len(scorers)} models": EnsembleScorer(scorers),
    }
    seconds: dict[str, list[float]] = {name: [] for name in rankers}
    for _ in range(ROUNDS):
        for name, ranker in rankers.items():
            start = time.perf_counter()
            for request in requests:
                ranker.score(*request)
            seconds[name].append(time.perf_counter() - start)
    single = statistics.median(seconds["1 model"])
    row = {
        "machine": machine_description(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "queries": len(requests),
        "documents": sum(len(d) for _, d, _ in requests),
        "checkpoints": [str(p) for p in paths],
        "rounds": ROUNDS,
        "split_seconds": {name: [round(s, 3) for s in values] for name, values in seconds.items()},
        "ms_per_query_median": {
            name: round(statistics.median(v) / len(requests) * 1e3, 2) for name, v in seconds.items()
        },
        "ratio_to_one_model": {name: round(statistics.median(v) / single, 2) for name, v in seconds.items()},
    }
    print(json.dumps(row, indent=2))
    with (HERE / "latency.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main([Path(arg) for arg in sys.argv[1:]])
