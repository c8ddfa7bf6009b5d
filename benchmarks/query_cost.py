"""What one embedded search costs at the edges of the query limits: CPU and resident memory per request.

The figures behind ``QueryLimits`` (es_rerank/backends/query_tree.py): sloppy phrases of
the index's most frequent words, many wildcard terms, long wildcard patterns, many
terms, and fuzzy words and prefixes (``--only fuzzy``), each searched once in a child process of its own
under an address-space cap (``--cap-mb``), so that a case that would allocate without bound fails there (killed or
refused) and never takes down this process or the machine. Each child opens the index,
warms it with one search, then runs the case through ``EmbeddedBackend.prepare`` and
``first_stage`` (500 hits, the gateway's window) with the limits switched off, and
reports its thread CPU time and how much its resident memory grew.

    python -m benchmarks.query_cost --index <home>/indexes/embedded [--cap-mb 3000] [--only phrase]

With ``--gateway URL --pid PID`` it sends a running gateway (``esrr serve`` on that index, its
process PID) the costliest searches the default limits allow, one after another and then
from 4 threads at once, and prints the gateway's resident memory and CPU before and after.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    _ = backend.text_words  # the words fuzzy cases expand to, read once per version: left out of the timed search
    before = _rss_bytes()
    started = time.thread_time()
    with using_limits(UNLIMITED):
        answer = backend.first_stage(backend.prepare(body), WINDOW)
    cpu_s = time.thread_time() - started
    return {
        "cpu_ms": round(cpu_s * 1000, 1),
        "rss_growth_mb": round((_rss_bytes() - before) / 2**20, 1),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "hits": len(answer.hits),
    }


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
                yield (
                    "phrase",
                    f"{length} words cycling {cycle} slop {slop}",
                    {"query": {"match_phrase": {"text": {"query": text, "slop": slop}}}},
                )
    for pattern in (
        "gree*",
        "tumo?r",
        "g*",
        "a?????",
        "?",
        "??????",
        "*a",
        "*a*",
        "*?*?",
        "*?*?*?*?",
        "a* c* p* s*",
        "a*?*?*?* c*?*?*?* p*?*?*?* s*?*?*?*",
        "a* c* p* s* t* m* d* r*",
    ):
        yield "wildcard", pattern, {"query": {"query_string": {"query": pattern}}}
    for marks in (6, 10, 20, 40, 64, 100):
        yield "wildcard", f"1 pattern of {marks} '?'", {"query": {"query_string": {"query": "?" * marks}}}
    for count in (8, 16, 32, 64, 128, 255):
        yield (
            "wildcard",
            f"{count} patterns ??????",
            {
                "query": {
                    "query_string": {
                        "query": " ".join(
                            f"{'?' * 6}{chr(97 + n % 26)}" if n >= 26 else "?" * 6 + chr(97 + n) for n in range(count)
                        )
                    }
                }
            },
        )
    for count in (8, 16, 32, 64):
        yield (
            "wildcard",
            f"{count} patterns *a*e*i*",
            {"query": {"query_string": {"query": " ".join(f"*{chr(97 + n % 26)}*e*i*" for n in range(count))}}},
        )
    for count, edits, expansions in ((10, "AUTO", 50), (20, 2, 50), (1, 2, 1024), (4, 2, 256)):
        yield (
            "fuzzy",
            f"{count} frequent words, fuzziness {edits}, max_expansions {expansions}",
            {
                "query": {
                    "match": {
                        "text": {"query": " ".join(words[:count]), "fuzziness": edits, "max_expansions": expansions}
                    }
                }
            },
        )
    for expansions in (50, 1000):
        yield (
            "fuzzy",
            f"phrase prefix of a frequent word and a letter, max_expansions {expansions}",
            {"query": {"match_phrase_prefix": {"text": {"query": f"{words[0]} c", "max_expansions": expansions}}}},
        )
    yield (
        "fuzzy",
        "3 one-letter prefixes (bool_prefix)",
        {"query": {"bool": {"should": [{"match_bool_prefix": {"text": letter}} for letter in "acp"]}}},
    )
    for name, body in allowed_worst(words).items():
        yield "allowed", name, body
    for count in (256, 1024, 2048, 4096):
        yield "terms", f"{count} distinct frequent words (OR)", {"query": {"match": {"text": " ".join(words[:count])}}}
        yield (
            "terms",
            f"{count} distinct frequent words (AND)",
            {"query": {"match": {"text": {"query": " ".join(words[:count]), "operator": "and"}}}},
        )


def allowed_worst(words: list[str]) -> dict[str, dict[str, Any]]:
    """The costliest search of each kind the default ``QueryLimits`` let through (issue 32's rows, at the limits)."""
    from es_rerank.backends.query_tree import DEFAULT_LIMITS

    cycled = " ".join((words[:2] * 10)[:10])
    allowed = DEFAULT_LIMITS.max_wildcard_terms
    wildcards = f"{allowed} one-letter wildcards of {min(8, DEFAULT_LIMITS.max_wildcard_marks)} marks"
    worst: dict[str, Any] = {
        "phrase: 10 frequent words x slop 40 (cost 400)": {"query": {"query_string": {"query": f'"{cycled}"~40'}}},
        wildcards: {
            "query": {
                "query_string": {
                    "query": " ".join(
                        letter + "*?*?*?*?"[: DEFAULT_LIMITS.max_wildcard_marks] for letter in "acpstmdr"[:allowed]
                    )
                }
            }
        },
        "256 distinct frequent words": {"query": {"match": {"text": " ".join(words[:256])}}},
        # ESRR_GATEWAY_MAX_QUERY_TERMS counts each fuzzy word as its max_expansions: 20 x 50 = 1,000 of 1,024.
        "20 fuzzy frequent words (2 edits, 50 expansions each)": {
            "query": {"match": {"text": {"query": " ".join(words[:20]), "fuzziness": 2}}}
        },
        "256 words in 128 groups": {
            "query": {
                "query_string": {"query": " AND ".join(f"({a} OR {b})" for a, b in zip(words[:256:2], words[1:256:2]))}
            }
        },
    }
    # The three kinds together, within the 256 words of ESRR_GATEWAY_MAX_QUERY_WORDS (10 + 3 + 240).
    worst["phrase, wildcards and 240 words at once"] = {
        "query": {
            "bool": {
                "should": [
                    worst["phrase: 10 frequent words x slop 40 (cost 400)"]["query"],
                    worst[wildcards]["query"],
                    {"match": {"text": " ".join(words[:240])}},
                ]
            }
        }
    }
    return worst


def _process(pid: int) -> tuple[float, float]:
    """Resident MB and CPU seconds (user + system) of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return rss_kb / 1024, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(f"{url}/_search", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def gateway_memory(url: str, pid: int, index: str, repeats: int) -> None:
    """Print the gateway's RSS and CPU per request around ``repeats`` of each allowed worst case, then 4 threads."""
    cases = allowed_worst(frequent_words(index, 300))
    for body in cases.values():  # warm: first requests set up caches that are no request's growth
        _post(url, body)
    start_rss, _ = _process(pid)
    print(json.dumps({"phase": "warm", "rss_mb": round(start_rss, 1)}), flush=True)
    for name, body in cases.items():
        rss, cpu = _process(pid)
        statuses = {_post(url, body) for _ in range(repeats)}
        after_rss, after_cpu = _process(pid)
        print(
            json.dumps(
                {
                    "case": name,
                    "statuses": sorted(statuses),
                    "cpu_ms_per_request": round((after_cpu - cpu) * 1000 / repeats, 1),
                    "rss_mb": round(after_rss, 1),
                    "rss_growth_mb": round(after_rss - rss, 1),
                }
            ),
            flush=True,
        )
    threads = [
        threading.Thread(target=lambda: [_post(url, body) for _ in range(repeats // 2) for body in cases.values()])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(1)
    end_rss, _ = _process(pid)
    print(
        json.dumps(
            {
                "phase": "after 4 threads",
                "rss_mb": round(end_rss, 1),
                "growth_since_warm_mb": round(end_rss - start_rss, 1),
            }
        ),
        flush=True,
    )


def _child(index: str, body: dict[str, Any], cap_mb: int, timeout_s: float) -> dict[str, Any]:
    cap = cap_mb * 2**20
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.query_cost", "--index", index, "--case", json.dumps(body)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
        )
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
@click.option("--only", default=None, help="one family: phrase, wildcard, fuzzy, allowed or terms")
@click.option("--gateway", default=None, help="a running gateway's URL: measure its memory instead")
@click.option("--pid", default=None, type=int, help="the gateway's process id (with --gateway)")
@click.option("--repeats", default=20, show_default=True, help="requests of each case (with --gateway)")
@click.option("--case", "case_body", default=None, hidden=True, help="run one body here (the child's side)")
def main(
    index: str,
    cap_mb: int,
    timeout_s: float,
    only: str | None,
    gateway: str | None,
    pid: int | None,
    repeats: int,
    case_body: str | None,
) -> None:
    """Print one JSON line per case: family, name, outcome, CPU ms, RSS growth and peak."""
    if gateway is not None:
        if pid is None:
            raise click.UsageError("--gateway needs --pid, the gateway process's id")
        gateway_memory(gateway.rstrip("/"), pid, index, repeats)
        return
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
