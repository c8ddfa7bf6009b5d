"""What one embedded search costs at the edges of the query limits: CPU and resident memory per request.

The figures behind ``QueryLimits`` (es_rerank/backends/query_tree.py): sloppy phrases of
the index's most frequent words, many wildcard terms, long wildcard patterns and many
terms, each searched once in a child process of its own under an address-space cap
(``--cap-mb``), so that a case that would allocate without bound fails there (killed or
refused) and never takes down this process or the machine. Each child opens the index,
warms it with one search, then runs the case through ``EmbeddedBackend.prepare`` and
``first_stage`` (500 hits, the gateway's window) with the limits switched off, and
reports its thread CPU time and how much its resident memory grew.

    python -m benchmarks.query_cost --index <home>/indexes/embedded [--cap-mb 3000] [--only phrase]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import click

WINDOW = 500


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def run_case(index: str, body: dict[str, Any]) -> dict[str, Any]:
    """One search of ``body`` on the index at ``index`` (in this process): CPU seconds, RSS growth, hits."""
    import time

    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.backends.query_tree import UNLIMITED, using_limits

    backend = EmbeddedBackend.open_current(Path(index))
    backend.first_stage(backend.prepare({"query": {"match": {"text": "vitamin d"}}}), WINDOW)  # warm
    before = _rss_bytes()
    started = time.thread_time()
    with using_limits(UNLIMITED):
        answer = backend.first_stage(backend.prepare(body), WINDOW)
    cpu_s = time.thread_time() - started
    return {"cpu_ms": round(cpu_s * 1000, 1), "rss_growth_mb": round((_rss_bytes() - before) / 2**20, 1),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "hits": len(answer.hits)}


def frequent_words(index: str, count: int) -> list[str]:
    """The ``count`` words found in most documents of the index's corpus (the costliest to intersect)."""
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.text import tokenize

    backend = EmbeddedBackend.open_current(Path(index))
    rows = backend.sources(backend.stats.doc_ids_at(list(range(backend.stats.n_docs))))
    frequency: Counter[str] = Counter()
    for source in rows:
        frequency.update(set(tokenize(f"{source.get('title', '')} {source.get('abstract', '')}")))
    return [word for word, _ in frequency.most_common(count)]


def cases(words: list[str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(family, name, search body) of every measured case."""
    # A phrase repeating the most frequent words is the sloppy phrase scorer's worst case: every position of
    # each word may pair with every other within the slop (distinct words cost far less; issue 32).
    for cycle in (2, 4):
        for length in (4, 8, 12, 16, 20):
            for slop in (10, 25, 50, 100):
                text = " ".join((words[:cycle] * length)[:length])
                yield "phrase", f"{length} words cycling {cycle} slop {slop}", {
                    "query": {"match_phrase": {"text": {"query": text, "slop": slop}}}}
    for marks in (6, 10, 20, 40, 64, 100):
        yield "wildcard", f"1 pattern of {marks} '?'", {"query": {"query_string": {"query": "?" * marks}}}
    for count in (8, 16, 32, 64, 128, 255):
        yield "wildcard", f"{count} patterns ??????", {"query": {"query_string": {"query": " ".join(
            f"{'?' * 6}{chr(97 + n % 26)}" if n >= 26 else "?" * 6 + chr(97 + n) for n in range(count))}}}
    for count in (8, 16, 32, 64):
        yield "wildcard", f"{count} patterns *a*e*i*", {"query": {"query_string": {"query": " ".join(
            f"*{chr(97 + n % 26)}*e*i*" for n in range(count))}}}
    for count in (256, 1024, 2048, 4096):
        yield "terms", f"{count} distinct frequent words (OR)", {"query": {"match": {"text": " ".join(
            words[:count])}}}
        yield "terms", f"{count} distinct frequent words (AND)", {"query": {"match": {"text": {
            "query": " ".join(words[:count]), "operator": "and"}}}}


def _child(index: str, body: dict[str, Any], cap_mb: int, timeout_s: float) -> dict[str, Any]:
    cap = cap_mb * 2**20
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.query_cost", "--index", index, "--case",
                               json.dumps(body)], capture_output=True, text=True, timeout=timeout_s,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    except subprocess.TimeoutExpired:
        return {"outcome": f"over {timeout_s:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1][:80]
        return {"outcome": f"died ({done.returncode}): {last}"}
    return {"outcome": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


@click.command()
@click.option("--index", required=True, help="an embedded index root (<home>/indexes/embedded)")
@click.option("--cap-mb", default=3000, show_default=True, help="address-space cap of each child")
@click.option("--timeout-s", default=10.0, show_default=True)
@click.option("--only", default=None, help="one family: phrase, wildcard or terms")
@click.option("--case", "case_body", default=None, hidden=True, help="run one body here (the child's side)")
def main(index: str, cap_mb: int, timeout_s: float, only: str | None, case_body: str | None) -> None:
    """Print one JSON line per case: family, name, outcome, CPU ms, RSS growth and peak."""
    if case_body is not None:
        print(json.dumps(run_case(index, json.loads(case_body))))
        return
    words = frequent_words(index, 4096)
    print(json.dumps({"frequent_words": words[:24]}), flush=True)
    for family, name, body in cases(words):
        if only is None or family == only:
            print(json.dumps({"family": family, "case": name, **_child(index, body, cap_mb, timeout_s)}), flush=True)


if __name__ == "__main__":
    main()
