"""run.sh's figures of several homes side by side (e.g. NFCorpus and 1M): which stages grow with the corpus.

    python reports/profile/one-million/compare.py reports/profile/one-million/smoke/nfcorpus \
        reports/profile/one-million/smoke/1m

Each folder is one run.sh output (its summary.json, and gateway-stacks' samples when a flame graph was taken);
prints Markdown tables: each stage's in-process thread CPU per search (p50 and mean), the ratio of the last
folder's mean to the first's, then the served figures.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # reports/profile: stacks.py
from stacks import STAGES, stage_samples


def _label(figures: dict) -> str:
    return f"{figures['documents']:,} docs"


@click.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
def main(folders: tuple[Path, ...]) -> None:
    """Print the stage table and the served figures of each folder's summary.json."""
    runs = [json.loads((folder / "summary.json").read_text(encoding="utf-8")) for folder in folders]
    labels = [_label(run) for run in runs]
    click.echo(
        "| stage | " + " | ".join(f"{label} p50 | {label} mean" for label in labels) + " | last / first (means) |"
    )
    click.echo("|---|" + "---|---|" * len(runs) + "---|")
    stages = runs[0]["in_process_cpu_ms"]["stages"]
    rows = [(name, [run["in_process_cpu_ms"]["stages"][name] for run in runs]) for name in stages]
    rows.append(("total", [run["in_process_cpu_ms"]["total"] for run in runs]))
    for name, cells in rows:
        first, last = cells[0]["mean"], cells[-1]["mean"]
        ratio = f"{last / first:.2f}" if first > 0.005 else "-"
        click.echo(
            f"| {name} | " + " | ".join(f"{cell['p50']:.2f} | {cell['mean']:.2f}" for cell in cells) + f" | {ratio} |"
        )
    click.echo()
    click.echo("| figure | " + " | ".join(labels) + " |")
    click.echo("|---|" + "---|" * len(runs))
    served = [
        ("gateway CPU per search, one at a time, p50 ms", lambda r: r["served_http"]["gateway_cpu_ms"]["p50"]),
        ("gateway CPU per search, mean ms", lambda r: r["served_http"]["gateway_cpu_ms"]["mean"]),
        ("HTTP latency p50 ms (one at a time)", lambda r: r["served_http"]["latency_ms"]["p50"]),
        ("took p50 ms", lambda r: r["served_http"]["took_ms"]["p50"]),
        ("in-process served pipeline p50 ms (scale.py)", lambda r: r["served_pipeline"]["served_p50_ms"]),
        ("BM25 top-500 p50 ms (scale.py)", lambda r: r["served_pipeline"]["bm25_p50_ms"]),
        ("whole run, s", lambda r: r["steps"]["whole run"]["seconds"]),
    ]
    for name, read in served:
        click.echo(f"| {name} | " + " | ".join(_shown(read, run) for run in runs) + " |")
    loads = [
        ", ".join(f"{step} {row['load'][0]:.1f}/{row['load'][1]:.1f}" for step, row in run.get("steps", {}).items())
        for run in runs
    ]
    click.echo("| 1-min load before/after each step | " + " | ".join(loads) + " |")
    stacks = [folder / "gateway.collapsed.gz" for folder in folders]
    if all(path.is_file() for path in stacks):
        counts = [stage_samples(path) for path in stacks]
        click.echo()
        click.echo("| stage (py-spy samples of the served gateway, --gil) | " + " | ".join(labels) + " |")
        click.echo("|---|" + "---|" * len(runs))
        for name in dict.fromkeys([name for name, _ in STAGES] + ["other"]):
            shares = [f"{count[name] / sum(count.values()):.1%}" for count in counts]
            click.echo(f"| {name} | " + " | ".join(shares) + " |")
        click.echo("| samples | " + " | ".join(str(sum(count.values())) for count in counts) + " |")


def _shown(read: Callable[[dict], float], run: dict) -> str:
    try:
        return f"{read(run):.1f}"
    except (KeyError, TypeError):  # a figure that run did not measure
        return "-"


if __name__ == "__main__":
    main()
