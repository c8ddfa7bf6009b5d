"""The scale-out runs' table: per N gateway processes and searches in flight, the medians over the runs.

python reports/bench/scale-out/table.py [DIR]
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def row(n: int, c: int, figures: list[dict[str, Any]], one: dict[tuple[int, str], float]) -> str:
    """One markdown row: medians over the runs; searches/s over one process's at ``c`` in flight of the same run."""

    def median(values: Any) -> float:
        return statistics.median(list(values))

    rates = [f["searches_per_s"]["median"] for f in figures]
    ratios = [f["searches_per_s"]["median"] / one[(c, f["run"])] for f in figures]
    return (
        f"| {n} | {c} | {len(figures)} | {median(rates):.1f} | {median(ratios):.2f} "
        f"({', '.join(f'{r:.2f}' for r in ratios)}) | {median(f['latency_ms']['p50'] for f in figures):.1f} ms | "
        f"{median(f['latency_ms']['p99'] for f in figures):.1f} ms | "
        f"{median(f['gateway_cpu_ms_per_search']['median'] for f in figures):.2f} ms | "
        f"{median(f['gateway_cpu_ms']['p50'] for f in figures):.2f} ms | {worker_ms(figures)} |"
    )


def worker_ms(figures: list[dict[str, Any]]) -> str:
    """The worker's CPU ms per search over the runs that recorded it (their median), or a dash."""
    spent = [
        (after - before) * 1000 / searches for before, after, searches in (f["worker"] for f in figures if f["worker"])
    ]
    return f"{statistics.median(spent):.2f} ms ({len(spent)} runs)" if spent else "-"


def main() -> None:
    """Print the table and the machine."""
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
    runs: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(directory.glob("N*-c*-run*.json")):
        n, c, run = re.match(r"N(\d+)-c(\d+)-run(\d+)", path.name).groups()
        worker = path.with_suffix(".worker")
        recorded = [float(x) for x in worker.read_text().split()] if worker.exists() else None
        runs[(int(n), int(c))].append({**json.loads(path.read_text()), "run": run, "worker": recorded})
    one = {(c, f["run"]): f["searches_per_s"]["median"] for (n, c), figures in runs.items() if n == 1 for f in figures}
    print(
        "| processes | in flight | runs | searches/s | to 1 process, same run (each run) | latency p50 | p99 | "
        "gateway CPU per search (in flight) | one at a time, p50 | worker CPU per search |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (n, c), figures in sorted(runs.items(), key=lambda item: (item[0][1], item[0][0])):
        print(row(n, c, figures, one))
    print(f"\n{', '.join(sorted({f['machine'] for figures in runs.values() for f in figures}))}")


if __name__ == "__main__":
    main()
