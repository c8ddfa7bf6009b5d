"""The gateway's own glue, old against new: CPU per served request of two gateways without the model, paired.

Starts ``esrr serve`` twice, the code of ``--old`` (a tree of the repository: ``git archive 841026a | tar -x -C
/tmp/glue-old``) and of ``--new`` (default: this checkout), both BM25 only (``ESRR_GATEWAY_RERANK=false``,
``ESRR_GATEWAY_WINDOW=0``: no worker, no window), so that what is measured is what surrounds the ranking: waitress,
Flask, the app's hooks and middleware, the metrics, parsing the request, the page and the JSON. Every NFCorpus dev
query is sent to both in two forms, ``GET /_search?q=...&size=10`` and ``POST /_search`` with a ``match`` body,
old and new alternately first, one request at a time; each request's CPU is read from the gateway's threads'
``schedstat`` (``benchmarks.gateway_process``). The first pass is untimed and compares the two answers byte for
byte (``took`` set to 0) and their headers' names: a difference is printed and fails the run (exit 1).

    python reports/profile/glue_ab.py --old /tmp/glue-old --rounds 3 --json-out reports/profile/glue/ab.json
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import ab_gateways  # the sibling script (its folder is on the path when run as a script)
import click

from benchmarks.gateway_process import ProcessCpu

REPO = Path(__file__).resolve().parents[2]
BM25_ONLY = {"ESRR_GATEWAY_RERANK": "false", "ESRR_GATEWAY_WINDOW": "0"}
FORMS = ("GET q=", "POST match")
_TOOK = re.compile(rb'"took":\d+')
_VARYING_HEADERS = {"date", "x-opaque-id", "content-length"}  # the length follows `took`'s digits


@contextmanager
def gateway(code: Path, port: int, log: Path) -> Iterator[tuple[str, ProcessCpu]]:
    """``esrr serve`` of the code under ``code`` on ``port``, BM25 only, until it answers; its URL and process."""
    with ab_gateways.gateway(code, port, log, BM25_ONLY) as served:
        yield served


def send(pool: Any, url: str, form: str, query: str) -> Any:
    """One search of ``query`` in ``form``: the urllib3 response (read whole)."""
    if form == "GET q=":
        return pool.request("GET", f"{url}/_search?{urlencode({'q': query, 'size': 10})}")
    body = json.dumps({"query": {"match": {"text": query}}, "size": 10})
    return pool.request("POST", f"{url}/_search", body=body, headers={"Content-Type": "application/json"})


def difference(old: Any, new: Any) -> str | None:
    """What differs between two answers to one request (``took`` and the headers' values aside), or None."""
    if old.status != new.status:
        return f"status {old.status} against {new.status}"
    if _TOOK.sub(b'"took":0', old.data) != _TOOK.sub(b'"took":0', new.data):
        return f"body\n  old {old.data[:300]!r}\n  new {new.data[:300]!r}"
    names = [{name.lower() for name in response.headers} for response in (old, new)]
    if names[0] != names[1]:
        return f"headers {sorted(names[0] ^ names[1])}"
    fixed = [
        {name.lower(): value for name, value in r.headers.items() if name.lower() not in _VARYING_HEADERS}
        for r in (old, new)
    ]
    if fixed[0] != fixed[1]:
        return f"header values {fixed[0]} against {fixed[1]}"
    return None


def summary(old: list[float], new: list[float], rounds: int) -> dict[str, Any]:
    """p50 and mean of each, the ratio of the means (whole and per round) and the median of the paired ratios."""
    per_round = len(old) // rounds
    return {
        "old_ms": {"p50": statistics.median(old), "mean": statistics.fmean(old)},
        "new_ms": {"p50": statistics.median(new), "mean": statistics.fmean(new)},
        "ratio_of_means": statistics.fmean(new) / statistics.fmean(old),
        "ratio_of_p50": statistics.median(new) / statistics.median(old),
        "median_of_pairs": statistics.median(n / o for o, n in zip(old, new) if o > 0),
        "of_means_per_round": [
            statistics.fmean(new[i : i + per_round]) / statistics.fmean(old[i : i + per_round])
            for i in range(0, per_round * rounds, per_round)
        ],
    }


@click.command()
@click.option("--old", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--new", type=click.Path(exists=True, file_okay=False, path_type=Path), default=REPO, show_default=True)
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=3, show_default=True, help="Timed passes, after one that compares the answers.")
@click.option("--ports", default="8411,8412", show_default=True, help="The old and the new gateway's ports.")
@click.option("--json-out", type=click.Path(path_type=Path), default=None, help="Write the figures as JSON.")
def main(old: Path, new: Path, queries: int, rounds: int, ports: str, json_out: Path | None) -> None:
    """CPU per served request of two gateway versions without the model, paired request by request."""
    import urllib3

    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    texts = dev_query_texts(None, load_settings(CommonSettings), queries)
    old_port, new_port = (int(port) for port in ports.split(","))
    pool = urllib3.PoolManager(maxsize=2, retries=False, timeout=urllib3.Timeout(30))
    differ: list[str] = []
    spent: dict[str, dict[str, list[float]]] = {form: {"old": [], "new": []} for form in FORMS}
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        served = {
            "old": stack.enter_context(gateway(old, old_port, logs / "old.log")),
            "new": stack.enter_context(gateway(new, new_port, logs / "new.log")),
        }
        for query in texts:
            for form in FORMS:
                found = difference(*(send(pool, served[name][0], form, query) for name in ("old", "new")))
                if found is not None:
                    differ.append(f"{form} {query!r}: {found}")
        for round_number in range(rounds):
            for number, query in enumerate(texts):
                order = ("old", "new") if (number + round_number) % 2 == 0 else ("new", "old")
                for form in FORMS:
                    for name in order:
                        url, cpu = served[name]
                        before = cpu.thread_ns()
                        response = send(pool, url, form, query)
                        spent[form][name].append((cpu.thread_ns() - before) / 1e6)
                        if response.status != 200:
                            raise click.ClickException(f"{name} answered {response.status}: {response.data[:300]!r}")
    figures = {
        "machine": machine_description(),
        "old": str(old),
        "new": str(new),
        "queries": len(texts),
        "rounds": rounds,
        "answers_differ": len(differ),
        "forms": {form: summary(spent[form]["old"], spent[form]["new"], rounds) for form in FORMS},
    }
    click.echo(f"{figures['machine']} | {len(texts)} dev queries x {rounds} rounds x 2 forms, BM25 only, paired")
    click.echo(f"{'form':<11} {'old p50':>8} {'old mean':>9} {'new p50':>8} {'new mean':>9} {'means':>6} {'pairs':>6}")
    for form, row in figures["forms"].items():
        click.echo(
            f"{form:<11} {row['old_ms']['p50']:>8.3f} {row['old_ms']['mean']:>9.3f} {row['new_ms']['p50']:>8.3f} "
            f"{row['new_ms']['mean']:>9.3f} {row['ratio_of_means']:>6.3f} {row['median_of_pairs']:>6.3f}"
            f"  (by round: {', '.join(f'{r:.3f}' for r in row['of_means_per_round'])})"
        )
    click.echo(f"answers: {'byte for byte the same' if not differ else f'{len(differ)} differ'}")
    for line in differ[:10]:
        click.echo(f"differs: {line}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
