"""The GPU scorer on the trained model and the real NFCorpus test windows.

export OUT_DIR (on the CPU machine, after `bash scripts/run.sh --train`, ESRR_HOME set):
    BM25 top-500 of every test query, the served Delta-32-Lex3 model's scores from the
    CPU scorer (timed), the checkpoint, and only the embedding rows those windows use
    (renumbered, so that the folder fits a GPU machine's transfer limit).
check OUT_DIR (on a CUDA machine): the GPU scorer's scores of the same windows, one query
    per call and 8 per call; prints the largest difference to the CPU scores, how many
    queries keep their exact top-20 order, and the time for the whole test split.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from es_rerank.machine import machine_description
from worker.model import Checkpoint
from worker.scorer import DeltaScorer


def export(out: Path) -> None:
    from training.api import build_candidates, checkpoint_path, open_workspace, split_queries

    work = open_workspace(None)
    path = checkpoint_path(work.settings, "delta-32-lex3")
    checkpoint = Checkpoint.load(path)
    model = checkpoint.build_model(work.embeddings.vectors)
    queries = split_queries(work, "test")
    candidates = build_candidates(
        queries, work.nfcorpus.qrels("test"), work.backend, work.embeddings, checkpoint.config.lex_names
    )
    requests = [(c.query_rows, work.doc_rows[c.stats_rows], c.lex) for c in candidates]
    scorer = DeltaScorer.from_model(model, "cpu")
    start = time.perf_counter()
    scores = [scorer.score(*request) for request in requests]
    cpu_s = time.perf_counter() - start
    used = np.unique(np.concatenate([np.concatenate([q, d.ravel()]) for q, d, _ in requests] + [[0]]))
    out.mkdir(parents=True, exist_ok=True)
    np.savez(
        out / "windows.npz",
        table=np.asarray(work.embeddings.vectors)[used],
        query=np.searchsorted(used, np.stack([q for q, _, _ in requests])),
        docs=np.searchsorted(used, np.concatenate([d for _, d, _ in requests])).astype(np.int32),
        lex=np.concatenate([lex for _, _, lex in requests]),
        sizes=[len(d) for _, d, _ in requests],
        cpu_scores=np.concatenate(scores),
    )
    shutil.copy(path, out / "model.pt")
    (out / "cpu.json").write_text(
        json.dumps(
            {
                "machine": machine_description(),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "queries": len(requests),
                "documents": int(sum(len(d) for _, d, _ in requests)),
                "cpu_seconds": cpu_s,
            },
            indent=2,
        )
    )
    print(
        f"{len(requests)} queries, {len(used)} embedding rows; CPU scorer {cpu_s:.2f} s "
        f"({cpu_s / len(requests) * 1e3:.1f} ms a query) -> {out}"
    )


def check(out: Path) -> None:
    data = np.load(out / "windows.npz")
    model = Checkpoint.load(out / "model.pt").build_model(data["table"])
    bounds = np.cumsum(data["sizes"])[:-1]
    requests = list(zip(data["query"], np.split(data["docs"].astype(np.int64), bounds), np.split(data["lex"], bounds)))
    expected = np.split(data["cpu_scores"], bounds)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "queries": len(requests)}
    for label, graphs in (("dense, CUDA graphs", True), ("dense, eager", False)):
        scorer = DeltaScorer(model, torch.device("cuda"), layout="dense", cuda_graphs=graphs)
        for per_call in (1, 8):
            calls = [requests[i : i + per_call] for i in range(0, len(requests), per_call)]
            for call in calls[:3]:
                scorer.score_many(call)  # warm-up (and graph capture)
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                got = [s for call in calls for s in scorer.score_many(call)]
                runs.append(time.perf_counter() - start)
            diff = max(float(np.abs(g - e).max(initial=0.0)) for g, e in zip(got, expected))
            differs = [_top20_difference(g, e, request) for g, e, request in zip(got, expected, requests)]
            same_top20 = sum(d is None for d in differs)
            row = {
                "seconds_median": float(np.median(runs)),
                "ms_per_query": float(np.median(runs)) / len(requests) * 1e3,
                "max_abs_diff_vs_cpu": diff,
                "queries_same_top20": int(same_top20),
                "top20_differences": [d for d in differs if d is not None],
            }
            report[f"{label}, {per_call} per call"] = row
            print(
                f"{label:18} {per_call} per call: {row['seconds_median']:.3f} s for {len(requests)} queries "
                f"({row['ms_per_query']:.2f} ms a query), max|GPU - CPU| {diff:.1e}, "
                f"same top-20 order {same_top20}/{len(requests)}; elsewhere {row['top20_differences']}"
            )
    (out / "gpu.json").write_text(json.dumps(report, indent=2))


def _top20_difference(got: np.ndarray, expected: np.ndarray, request: tuple) -> dict | None:
    """Where the GPU's top 20 leaves the CPU's order, and whether the documents there are copies."""
    gpu, cpu = np.argsort(-got, kind="stable")[:20], np.argsort(-expected, kind="stable")[:20]
    if np.array_equal(gpu, cpu):
        return None
    rank = int(np.flatnonzero(gpu != cpu)[0])
    a, b = int(cpu[rank]), int(gpu[rank])
    _, docs, lex = request
    return {
        "rank": rank,
        "cpu_score_gap": float(expected[a] - expected[b]),
        "gpu_score_gap": float(got[a] - got[b]),
        "same_tokens_and_lex": bool(np.array_equal(docs[a], docs[b]) and np.array_equal(lex[a], lex[b])),
    }


if __name__ == "__main__":
    {"export": export, "check": check}[sys.argv[1]](Path(sys.argv[2]))
