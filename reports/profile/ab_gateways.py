"""Two versions of the gateway served side by side: the CPU each spends per search, paired query by query, and
whether they rank the same.

Starts ``esrr serve`` twice on this machine, the code of ``--old`` (a tree of the repository, e.g.
``git archive 76791bc | tar -x -C /tmp/old``) and of ``--new`` (default: this checkout), both with the
environment's ``ESRR_*`` settings, so both send to the same worker and read the same index. Every NFCorpus
dev query goes to both, alternately first, one search at a time; the gateway's CPU for each search is read
from its threads' ``schedstat`` (``benchmarks.gateway_process``), so old and new meet the same moment's load
and the figure is a same-run ratio. The first pass is untimed, and compares each query's top 10 (ids and
``_score``) between the two: a query whose ids differ is printed and fails the run (exit 1); scores that
differ with the same ids are counted, with the largest difference relative to the score.

    python reports/profile/ab_gateways.py --old /tmp/old --rounds 3 --json-out reports/profile/ab.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click
import numpy as np

from benchmarks.gateway_process import ProcessCpu
from benchmarks.http import search_once

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def gateway(
    code: Path, port: int, log: Path, settings: Mapping[str, str] | None = None
) -> Iterator[tuple[str, ProcessCpu]]:
    """``esrr serve`` of the code under ``code`` on ``port`` (``settings``: ``ESRR_*`` beside the environment's) until
    it answers; its URL and measured process."""
    import urllib3

    env = {**os.environ, **(settings or {}), "PYTHONPATH": str(code)}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from es_rerank.cli import main; main()", "serve", "--port", str(port)],
            cwd=code,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise click.ClickException(f"the gateway of {code} exited; its log: {log}")
            try:
                urllib3.request("GET", f"{url}/_esrr/health", timeout=5.0, retries=False)
                break
            except urllib3.exceptions.HTTPError:
                if time.monotonic() > deadline:
                    raise click.ClickException(
                        f"the gateway of {code} did not answer in 120 s; its log: {log}"
                    ) from None
                time.sleep(0.2)
        yield url, ProcessCpu(process.pid)
    finally:
        process.terminate()
        process.wait(30)


def top(pool: Any, url: str, query: str, k: int) -> list[tuple[str, float]]:
    """The ids and scores of ``query``'s top ``k``."""
    response = pool.request("GET", f"{url}/_search?{urlencode({'q': query, 'size': k})}")
    body = json.loads(response.data)
    if response.status != 200 or "fallback" in body.get("esrr", {}):
        raise click.ClickException(f"{query!r} was not reranked by {url}: {response.status} {body}")
    return [(hit["_id"], hit["_score"]) for hit in body["hits"]["hits"]]


@click.command()
@click.option(
    "--old",
    "old",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="A tree of the old code.",
)
@click.option(
    "--new",
    "new",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=REPO,
    show_default=True,
    help="A tree of the new code.",
)
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=3, show_default=True, help="Timed passes, after one that compares rankings.")
@click.option("--ports", default="8401,8402", show_default=True, help="The old and the new gateway's ports.")
@click.option("-k", "k", default=10, show_default=True, help="Hits per search.")
@click.option("--json-out", type=click.Path(path_type=Path), default=None, help="Write the figures as JSON.")
def main(old: Path, new: Path, queries: int, rounds: int, ports: str, k: int, json_out: Path | None) -> None:
    """CPU per search of two gateway versions, paired query by query, and whether their rankings agree."""
    import urllib3

    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    texts = dev_query_texts(None, load_settings(CommonSettings), queries)
    old_port, new_port = (int(port) for port in ports.split(","))
    pool = urllib3.PoolManager(maxsize=2, retries=False, timeout=urllib3.Timeout(30))
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        served = {
            "old": stack.enter_context(gateway(old, old_port, logs / "old.log")),
            "new": stack.enter_context(gateway(new, new_port, logs / "new.log")),
        }
        tops = {
            query: (top(pool, served["old"][0], query, k), top(pool, served["new"][0], query, k)) for query in texts
        }
        differ = [query for query, (was, now) in tops.items() if [i for i, _ in was] != [i for i, _ in now]]
        rescored = [query for query, (was, now) in tops.items() if was != now and query not in differ]
        score_change = max(
            (abs(a - b) / max(abs(a), 1e-9) for q in rescored for (_, a), (_, b) in zip(*tops[q])), default=0.0
        )
        for query in differ[:10]:
            click.echo(f"differs: {query!r}\n  old {tops[query][0]}\n  new {tops[query][1]}")
        spent: dict[str, list[float]] = {"old": [], "new": []}
        for round_number in range(rounds):
            for number, query in enumerate(texts):
                order = ("old", "new") if (number + round_number) % 2 == 0 else ("new", "old")
                for name in order:
                    url, cpu = served[name]
                    before = cpu.thread_ns()
                    search_once(pool, url, query, k)
                    spent[name].append((cpu.thread_ns() - before) / 1e6)
    old_ms, new_ms = np.array(spent["old"]), np.array(spent["new"])
    figures = {
        "machine": machine_description(),
        "old": str(old),
        "new": str(new),
        "queries": len(texts),
        "rounds": rounds,
        "rankings_differ": len(differ),
        "scores_differ": {"queries": len(rescored), "largest_relative": score_change},
        "cpu_ms": {
            name: {"p50": float(np.median(ms)), "mean": float(ms.mean())}
            for name, ms in (("old", old_ms), ("new", new_ms))
        },
        "ratio": {
            "of_means": float(new_ms.mean() / old_ms.mean()),
            "median_of_pairs": float(np.median(new_ms / old_ms)),
            "of_means_per_round": [
                float(n.mean() / o.mean()) for o, n in zip(np.split(old_ms, rounds), np.split(new_ms, rounds))
            ],
        },
    }
    click.echo(
        f"{figures['machine']} | {len(texts)} dev queries x {rounds} rounds, one search at a time, old and new in turn"
    )
    click.echo(f"{'':<6} {'CPU p50 ms':>10} {'mean ms':>8}")
    for name in ("old", "new"):
        row = figures["cpu_ms"][name]
        click.echo(f"{name:<6} {row['p50']:>10.2f} {row['mean']:>8.2f}")
    ratio = figures["ratio"]
    by_round = ", ".join(f"{r:.3f}" for r in ratio["of_means_per_round"])
    click.echo(
        f"new/old: {ratio['of_means']:.3f} of the means ({by_round} by round), "
        f"{ratio['median_of_pairs']:.3f} median of the pairs"
    )
    click.echo(f"rankings (top {k} ids): {'the same' if not differ else f'{len(differ)} queries differ'}")
    click.echo(f"scores: {len(rescored)} queries' differ, by at most {score_change:.2g} of the score")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
