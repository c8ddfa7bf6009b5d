"""Two versions of the scoring worker side by side: each one's CPU per task at four in flight, and their scores.

Starts ``esrr worker start`` twice, the code of ``--old`` (a tree of the repository, e.g. ``git archive 89ffa9f |
tar -x -C /tmp/old``) and of ``--new`` (default: this checkout), each on a queue of its own (``ESRR_QUEUE`` with
``-old`` / ``-new`` added) of the environment's Redis, both with the environment's other ``ESRR_*`` settings (a
served home, ``ESRR_DEVICE=cpu``, ``ESRR_TORCH_THREADS=1``: as ``reports/bench/vs-b2f3ea0/run.sh`` runs it).
The payloads are the gateway's for the NFCorpus dev queries (``micro_worker.recorded_payloads``), sent through
the gateway's own sender (``WorkerReranker``), ``--in-flight`` at a time. They go in blocks of ``--block``
payloads, each block to one worker then the other (which goes first alternates), and each worker's CPU for a
block is read from its threads' ``schedstat`` (every thread: Celery's consumer, the pool's, the batcher): the
worker's whole CPU per task, Celery's machinery included, as a same-run ratio. Only one worker has work at a
time; the other's idle polling counts in neither.

The first pass is untimed and compares every payload's scores between the two: they must be equal (exit 1 if
not, with the largest difference).

    python reports/profile/ab_workers.py --old /tmp/old --rounds 3 --json-out reports/profile/ab-workers.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.gateway_process import threads_cpu_ns

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from micro_worker import recorded_payloads  # noqa: E402


@contextmanager
def worker(code: Path, queue: str, log: Path) -> Iterator[int]:
    """``esrr worker start`` of the code under ``code`` on ``queue`` until it is ready; its pid."""
    env = {**os.environ, "PYTHONPATH": str(code), "ESRR_QUEUE": queue}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from es_rerank.cli import main; main()", "worker", "start"],
            cwd=code,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 300
        while b"ready." not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise click.ClickException(f"the worker of {code} did not start; its log: {log}")
            time.sleep(0.2)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def scores_of(reranker: Any, payload: dict[str, Any]) -> np.ndarray:
    """The worker's scores for ``payload``, through the gateway's sender."""
    from es_rerank.payload import result_scores

    return result_scores(reranker.answer(payload, time.monotonic() + 30), int(payload["n"]))


@click.command()
@click.option("--old", "old", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--new", "new", type=click.Path(exists=True, file_okay=False, path_type=Path), default=REPO)
@click.option("--queries", default=324, show_default=True, help="The first dev queries (each with a window).")
@click.option("--rounds", default=2, show_default=True, help="Timed passes over the payloads.")
@click.option("--block", default=16, show_default=True, help="Payloads per measured block.")
@click.option("--in-flight", default=4, show_default=True, help="Tasks sent at a time.")
@click.option("--json-out", type=click.Path(path_type=Path), default=None)
def main(old: Path, new: Path, queries: int, rounds: int, block: int, in_flight: int, json_out: Path | None) -> None:
    """Each worker's CPU per task, block by block, old and new alternated; their scores compared."""
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description
    from es_rerank.ranking.broker import client_app
    from es_rerank.ranking.dispatch import WorkerReranker

    settings = load_settings(GatewaySettings)
    payloads = recorded_payloads(queries)
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    with ExitStack() as stack, ThreadPoolExecutor(in_flight) as pool:
        pids, rerankers = {}, {}
        for name, code in (("old", old), ("new", new)):
            queue = f"{settings.queue}-{name}"
            pids[name] = stack.enter_context(worker(code, queue, logs / f"ab-workers-{name}.log"))
            rerankers[name] = WorkerReranker(client_app(settings), queue, 30.0, settings.lex_features)
            stack.callback(rerankers[name].close)
        worst, differing = 0.0, 0
        for payload in payloads:  # untimed: warm, and the scores compared
            old_scores, new_scores = (scores_of(rerankers[name], payload) for name in ("old", "new"))
            gap = float(np.max(np.abs(old_scores - new_scores))) if len(old_scores) else 0.0
            worst, differing = max(worst, gap), differing + (gap > 0)
        spent: dict[str, list[float]] = {"old": [], "new": []}
        blocks = [payloads[start : start + block] for start in range(0, len(payloads), block)]
        for number, chunk in enumerate(blocks * rounds):
            for name in ("old", "new") if number % 2 == 0 else ("new", "old"):
                before = threads_cpu_ns({pids[name]})
                list(pool.map(scores_of, [rerankers[name]] * len(chunk), chunk))
                spent[name].append((threads_cpu_ns({pids[name]}) - before) / 1e6 / len(chunk))
    old_ms, new_ms = np.array(spent["old"]), np.array(spent["new"])
    lines = [
        f"{machine_description()} | {len(payloads)} dev queries' payloads x {rounds} rounds, blocks of {block}, "
        f"{in_flight} in flight; the worker's CPU (all threads) per task; load {os.getloadavg()[0]:.1f}",
        f"old ({old}): p50 {np.median(old_ms):.3f} ms, mean {old_ms.mean():.3f}",
        f"new ({new}): p50 {np.median(new_ms):.3f} ms, mean {new_ms.mean():.3f}",
        f"new / old: ratio of the means {new_ms.mean() / old_ms.mean():.3f}, of the p50 "
        f"{np.median(new_ms) / np.median(old_ms):.3f}, median of the paired blocks {np.median(new_ms / old_ms):.3f}",
        f"scores: {differing} of {len(payloads)} payloads differ, by at most {worst:.3g}",
    ]
    click.echo("\n".join(lines))
    if json_out is not None:
        json_out.write_text(
            json.dumps({"lines": lines, "old_ms": spent["old"], "new_ms": spent["new"], "worst": worst}, indent=1)
            + "\n",
            encoding="utf-8",
        )
    if worst > 1e-4:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
