"""The cyclic garbage collector's CPU per served search, CPython's settings against ``esrr serve``'s, alternated.

Builds the app as ``esrr serve`` does (its files leased, a worker through the ``ESRR_*`` broker), warms it with
30 searches, then sends each NFCorpus dev query as ``GET /_search?q=...&size=10`` through Flask's test client
twice: once with CPython's settings (nothing frozen, the young generation collected every 700 containers) and
once as ``server.settle_heap`` leaves them (``gc.freeze`` of what was built, every 7,000), which goes first
alternating. Each search's thread CPU, and each collection's by ``gc.callbacks``.

    python reports/profile/gc_time.py --queries 324 --rounds 2
"""

from __future__ import annotations

import gc
import statistics
import time
from urllib.parse import urlencode

import click


@click.command()
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=2, show_default=True, help="Passes over the queries.")
def main(queries: int, rounds: int) -> None:
    """Thread CPU per search and the collector's part of it, each way."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.cli import _leased_served_search
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.gateway.server import GC_YOUNG_THRESHOLD
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    settings = load_settings(GatewaySettings)
    client = create_app(_leased_served_search(settings), settings).test_client()
    texts = dev_query_texts(None, load_settings(CommonSettings), queries)
    for text in texts[:30]:
        client.get(f"/_search?{urlencode({'q': text, 'size': 10})}")
    gc.collect()
    defaults = gc.get_threshold()
    ways = {
        "CPython defaults": lambda: (gc.unfreeze(), gc.set_threshold(*defaults)),
        "as served": lambda: (gc.freeze(), gc.set_threshold(GC_YOUNG_THRESHOLD, *defaults[1:])),
    }
    collector = [0, 0]  # (started, spent) of the collection under way and of the search's collections

    def timed(phase: str, _info: dict) -> None:
        if phase == "start":
            collector[0] = time.thread_time_ns()
        else:
            collector[1] += time.thread_time_ns() - collector[0]

    gc.callbacks.append(timed)
    spent: dict[str, list[tuple[int, int]]] = {name: [] for name in ways}
    for round_number in range(rounds):
        for number, text in enumerate(texts):
            names = list(ways) if (number + round_number) % 2 == 0 else list(reversed(ways))
            for name in names:
                ways[name]()
                collector[1] = 0
                before = time.thread_time_ns()
                response = client.get(f"/_search?{urlencode({'q': text, 'size': 10})}")
                spent[name].append((time.thread_time_ns() - before, collector[1]))
                if response.status_code != 200:
                    raise click.ClickException(f"{text!r}: {response.status_code}")
    gc.callbacks.remove(timed)
    click.echo(f"{machine_description()} | {len(texts)} searches x {rounds} rounds, each way in turn, thread CPU")
    for name, rows in spent.items():
        totals, collections = [row[0] / 1e6 for row in rows], [row[1] / 1e6 for row in rows]
        click.echo(
            f"{name:<17} search p50 {statistics.median(totals):.3f} ms, mean {statistics.fmean(totals):.3f} ms; "
            f"the collector's mean {statistics.fmean(collections):.3f} ms"
        )
    means = {name: statistics.fmean(row[0] for row in rows) for name, rows in spent.items()}
    click.echo(f"as served / defaults: {means['as served'] / means['CPython defaults']:.3f} of the means")


if __name__ == "__main__":
    main()
