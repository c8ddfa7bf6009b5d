"""The served pipeline's p50/p99 on a built home, exactly as ``esrr bench scale`` measures it (its ``serve`` step).

``benchmarks.scale.child_serve`` opens the home's index, times BM25 top-500 and the in-process served pipeline
(``served_pipeline`` with a random-weight Delta-32-Lex3 scored in-process, candidate feedback on, no votes, one
torch thread) over the first NFCorpus dev queries in file order. It writes its own model and embeddings into the
home it is given, so it is given a scratch home whose ``indexes`` is a link to the real one: the served home's
model and embeddings stay as they are.

    python reports/profile/one-million/served_pipeline.py --home /tmp/onem-home --queries 100 --rounds 2 \
        --json-out reports/profile/one-million/served-pipeline.json
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import click


@click.command()
@click.option("--home", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--queries", "n_queries", default=100, show_default=True, help="NFCorpus dev queries, in file order.")
@click.option("--rounds", default=2, show_default=True, help="Timed passes (after one untimed pass).")
@click.option("--json-out", type=click.Path(path_type=Path), default=None, help="Write the figures as JSON.")
def main(home: Path, n_queries: int, rounds: int, json_out: Path | None) -> None:
    """BM25 top-500 and served-pipeline latency on ``home``'s index, as `esrr bench scale` gives them."""
    from benchmarks.scale import child_serve
    from es_rerank.machine import machine_description
    from index_setup.nfcorpus import NFCorpus

    queries = list(NFCorpus.locate(None).queries("dev").values())[:n_queries]  # scale.py's choice and order
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="onem-scale-") as scratch:
        (Path(scratch) / "indexes").symlink_to((home / "indexes").resolve(), target_is_directory=True)
        figures = child_serve(scratch, queries, rounds)
    figures = {
        "machine": machine_description(),
        "home": str(home),
        "queries": len(queries),
        "rounds": rounds,
        **figures,
        "load": [load_before, os.getloadavg()[0]],
    }
    click.echo(
        f"{figures['machine']} | {len(queries)} dev queries x {rounds} rounds | BM25 top-500 p50 "
        f"{figures['bm25_p50_ms']:.1f} ms, p99 {figures['bm25_p99_ms']:.1f} ms | served pipeline p50 "
        f"{figures['served_p50_ms']:.1f} ms, p99 {figures['served_p99_ms']:.1f} ms | load {figures['load']}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
