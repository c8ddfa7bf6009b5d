"""run.sh's figures in one place: the gateway's CPU per search and the served pipeline against issue 33's floors.

    python reports/profile/one-million/summary.py OUT --home HOME --steps '{"stages": {"seconds": 60, "load": [1, 2]}}'

Reads OUT/stages.json, OUT/bench-http.json and OUT/served-pipeline.json; writes OUT/summary.json and prints it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import click

# issue 33's floors (milliseconds): at 1M documents, and on NFCorpus (the gateway's CPU only)
FLOORS_AT_1M = {"gateway_cpu_p50_ms": 10.0, "served_pipeline_p50_ms": 40.0}
FLOORS_ON_NFCORPUS = {"gateway_cpu_p50_ms": 5.0}


def floors_for(documents: int) -> tuple[str, dict[str, float]]:
    """The floors that apply to a home of ``documents``, and how to name them."""
    if documents >= 1_000_000:
        return "at 1M documents", FLOORS_AT_1M
    return f"at {documents:,} documents (NFCorpus's floor)", FLOORS_ON_NFCORPUS


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _documents(home: Path) -> int:
    """How many documents the home's served index holds."""
    from es_rerank.stats import CorpusStats
    from es_rerank.versions import read_pointer

    root = home / "indexes" / "embedded"
    return CorpusStats.load(root / str(read_pointer(root)) / "stats").n_docs


def _commit() -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def summary(out: Path, home: Path, steps: dict[str, dict]) -> dict[str, Any]:
    """The headline figures of one run.sh run, with the floors and whether each is met."""
    stages, http, served = (_read(out / name) for name in ("stages.json", "bench-http.json", "served-pipeline.json"))
    figures: dict[str, Any] = {
        "machine": http.get("machine") or stages.get("machine") or served.get("machine"),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": _commit(),
        "home": str(home),
        "documents": _documents(home),
        "steps": steps,
    }
    if stages:
        figures["in_process_cpu_ms"] = {
            "queries": stages["queries"],
            "rounds": stages["rounds"],
            "total": stages["total_ms"],
            "stages": stages["stages_ms"],
        }
    if http:
        figures["served_http"] = {
            "queries": http["queries"],
            "rounds": http["rounds"],
            "gateway_cpu_ms": http.get("gateway_cpu_ms"),
            "latency_ms": http["latency_ms"],
            "took_ms": http["took_ms"],
            "searches_per_s": http["searches_per_s"]["median"],
            "rankers": http.get("rankers"),
        }
    if served:
        figures["served_pipeline"] = {
            key: served[key]
            for key in ("queries", "rounds", "bm25_p50_ms", "bm25_p99_ms", "served_p50_ms", "served_p99_ms")
        }
    measured = {
        "gateway_cpu_p50_ms": ((http.get("gateway_cpu_ms") or {}).get("p50")),
        "served_pipeline_p50_ms": served.get("served_p50_ms"),
    }
    figures["floors_at"], floors = floors_for(figures["documents"])
    figures["floors"] = {
        name: {
            "floor": floor,
            "measured": measured[name],
            "met": None if measured[name] is None else measured[name] <= floor,
        }
        for name, floor in floors.items()
    }
    return figures


@click.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--home", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--steps", default="{}", help="JSON: step -> its wall seconds and the 1-minute load before and after.")
def main(out: Path, home: Path, steps: str) -> None:
    """Write OUT/summary.json and print the figures against the floors."""
    figures = summary(out, home, json.loads(steps))
    (out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    click.echo(f"{figures['machine']} | {figures['documents']:,} documents | {figures['commit']} | {figures['when']}")
    if "in_process_cpu_ms" in figures:
        cpu = figures["in_process_cpu_ms"]
        click.echo(f"in-process thread CPU per search (stages.py, {cpu['queries']} queries x {cpu['rounds']}):")
        click.echo(f"  {'stage':<26} {'p50 ms':>8} {'mean ms':>8} {'share':>6}")
        for name, row in cpu["stages"].items():
            click.echo(
                f"  {name:<26} {row['p50']:>8.2f} {row['mean']:>8.2f} {row['mean'] / cpu['total']['mean']:>6.1%}"
            )
        click.echo(f"  {'total':<26} {cpu['total']['p50']:>8.2f} {cpu['total']['mean']:>8.2f}")
    if "served_http" in figures:
        http = figures["served_http"]
        click.echo(
            f"served over HTTP, one at a time ({http['queries']} queries x {http['rounds']}): latency p50 "
            f"{http['latency_ms']['p50']:.1f} ms, took p50 {http['took_ms']['p50']:.1f} ms, "
            f"{http['searches_per_s']:.1f} searches/s"
        )
    if "served_pipeline" in figures:
        pipeline = figures["served_pipeline"]
        click.echo(
            f"in-process served pipeline (scale.py, {pipeline['queries']} queries x {pipeline['rounds']}): BM25 "
            f"top-500 p50 {pipeline['bm25_p50_ms']:.1f} ms, pipeline p50 {pipeline['served_p50_ms']:.1f} ms, "
            f"p99 {pipeline['served_p99_ms']:.1f} ms"
        )
    for name, row in figures["floors"].items():
        shown = "not measured" if row["measured"] is None else f"{row['measured']:.2f} ms"
        verdict = {True: "met", False: "NOT met", None: "-"}[row["met"]]
        click.echo(f"floor {figures['floors_at']}, {name} <= {row['floor']:.0f} ms: {shown} ({verdict})")
    click.echo(
        "steps, wall seconds and 1-minute load average before/after: "
        + ", ".join(
            f"{name} {row['seconds']} s ({row['load'][0]}/{row['load'][1]})" for name, row in figures["steps"].items()
        )
    )


if __name__ == "__main__":
    main()
