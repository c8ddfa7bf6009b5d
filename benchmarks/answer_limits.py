"""What the heaviest answers cost a running gateway: the figures behind the answer limits (docs/operations.md).

Sends issue 32's output rows (a highlight field listed 1,000 times, thousands of ``_source``
patterns, 100-character tags on whole fields) and the largest legitimate requests (size 1,000
with the whole ``_source``, with highlight) to a gateway, one at a time, and prints each one's
status, answer bytes and the gateway process's CPU milliseconds for it (the run time of all
its threads, from ``/proc/<pid>/task/*/schedstat``; median of ``--repeat``):

    ESRR_HOME=<home> ESRR_GATEWAY_WINDOW=0 esrr serve --port 8000 & \
        python -m benchmarks.answer_limits --url http://127.0.0.1:8000 --pid $!

``--home`` (default ``ESRR_HOME``) names the embedded index the gateway serves, whose mean
stored ``_source`` and the weight of its 1,000 largest documents (the heaviest page of size
1,000 it can answer) are printed first.
"""

from __future__ import annotations

import json
import statistics
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import tantivy

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.machine import machine_description
from es_rerank.settings import CommonSettings

COMMON = {"match": {"text": "the of and in"}}
TAG = "x" * 100
ROWS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("size 1000, whole _source", "/_search", {"query": COMMON, "size": 1000}),
    (
        "size 200, highlight title+abstract (5 x 100)",
        "/_search",
        {"query": COMMON, "size": 200, "highlight": {"fields": {"title": {}, "abstract": {}}}},
    ),
    (
        "size 55, highlight whole title+abstract",
        "/_search",
        {"query": COMMON, "size": 55, "highlight": {"number_of_fragments": 0, "fields": {"title": {}, "abstract": {}}}},
    ),
    (
        "size 1000, highlight title+abstract (5 x 100)",
        "/_search",
        {"query": COMMON, "size": 1000, "highlight": {"fields": {"title": {}, "abstract": {}}}},
    ),
    (
        "size 1000, highlight whole title+abstract",
        "/_search",
        {
            "query": COMMON,
            "size": 1000,
            "highlight": {"number_of_fragments": 0, "fields": {"title": {}, "abstract": {}}},
        },
    ),
    (
        "issue: abstract listed 1,000 times, size 1000",
        "/_search",
        {"query": COMMON, "size": 1000, "highlight": {"fields": [{"abstract": {}}] * 1000}},
    ),
    (
        "issue: 100-char tags, whole fields, size 1000",
        "/_search",
        {
            "query": COMMON,
            "size": 1000,
            "highlight": {
                "number_of_fragments": 0,
                "pre_tags": [TAG],
                "post_tags": [TAG],
                "fields": {"title": {}, "abstract": {}},
            },
        },
    ),
    (
        "issue: 2,000 _source patterns, size 1000",
        "/_search",
        {"query": COMMON, "size": 1000, "_source": [f"f{n}*x" for n in range(2000)]},
    ),
    (
        "issue: 1,000 _source_includes (URL), size 1000",
        "/_search?size=1000&q=the&_source_includes=" + ",".join(f"a{n}" for n in range(1000)),
        None,
    ),
    (
        "256 _source patterns (the most allowed), size 1000",
        "/_search",
        {
            "query": COMMON,
            "size": 1000,
            "_source": {
                "includes": [f"*f{n}*x*y" for n in range(127)] + ["*"],
                "excludes": [f"a{n}*z" for n in range(128)],
            },
        },
    ),
]


def heaviest_page(backend: EmbeddedBackend, size: int = 1000) -> int:
    """The bytes of the ``size`` largest stored ``_source`` documents of the index."""
    searcher = backend._searcher
    hits = searcher.search(tantivy.Query.all_query(), backend.stats.n_docs).hits
    return sum(sorted((len(searcher.doc(address)["source"][0]) for _, address in hits), reverse=True)[:size])


def process_cpu_ns(pid: int) -> int:
    """The CPU nanoseconds all threads of process ``pid`` have run (Linux ``schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total


def send(url: str, path: str, body: dict[str, Any] | None) -> tuple[int, int]:
    """The status and answer bytes of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, len(response.read())
    except urllib.error.HTTPError as error:
        return error.code, len(error.read())


@click.command()
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway.")
@click.option("--pid", type=int, required=True, help="The gateway's process id (its CPU is read from /proc).")
@click.option(
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    help="ESRR_HOME of the index it serves (default: ESRR_HOME).",
)
@click.option("--repeat", default=5, show_default=True, help="Runs of each request; the median is shown.")
def bench_answer_limits(url: str, pid: int, home: Path | None, repeat: int) -> None:
    """Status, answer bytes and gateway CPU ms of the heaviest answers."""
    backend = EmbeddedBackend.open_current((home or CommonSettings().home) / "indexes" / "embedded")
    click.echo(
        f"{machine_description()}; index {backend.index}, {backend.stats.n_docs:,} documents, mean stored "
        f"_source {backend.mean_source_bytes:,.0f} bytes, 1,000 largest {heaviest_page(backend):,} bytes"
    )
    click.echo(f"{'request':52} {'status':>6} {'bytes':>12} {'CPU ms':>8}")
    for name, path, body in ROWS:
        cpu = []
        for _ in range(repeat):
            before = process_cpu_ns(pid)
            status, size = send(url.rstrip("/"), path, body)
            cpu.append((process_cpu_ns(pid) - before) / 1e6)
        click.echo(f"{name:52} {status:>6} {size:>12,} {statistics.median(cpu):>8.0f}")


if __name__ == "__main__":
    bench_answer_limits()
