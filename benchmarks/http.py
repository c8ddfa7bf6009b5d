"""``esrr bench http``: a running gateway's latency and throughput, as its HTTP clients see them.

Sends the NFCorpus dev queries as ``POST /_search`` with a ``match`` on ``text`` (what the site page and
the application libraries send for typed words) to a gateway (``esrr serve``),
``--concurrency`` at a time over kept-alive connections, and times each request. Each
response's ``took`` is the gateway's own time from retrieval to the final order, so
"HTTP and JSON" (latency minus took, request by request) is what serving over HTTP
adds, measured in the same run; ``took`` is in whole milliseconds, as Elasticsearch
gives it, so that difference is exact only on average (p50 within 0.5 ms). A search that fell
back to BM25 order, or failed, stops the benchmark: its time would not be the served model's.

``--forms`` sends each query in other request forms too, alternated form by form within
every round, so their latencies compare in the same run: ``q`` (``GET ?q=``, the keyword
search, in Lucene's syntax: a dev query such as "... Protein?" is a wildcard there, as in
Elasticsearch, and takes the heavy lane), ``match`` (``POST {"query": {"match": {"text": ...}}}``,
the default) and ``site`` (the site
page's Query DSL request: a ``bool`` with the text clause, ``highlight`` of title and
abstract and ``terms`` aggregations on year and publication type, without the year and type
filters, which NFCorpus's documents have no values for).

``--events`` times what recording the site's events costs a search: each query is
searched twice in turn, as is and as ``<form>+events``, where the search is followed by
the page's report of it (its impression to ``POST /_esrr/events``, and a click on its
first hit for every other query), so the writer thread stores them while the next
searches run; which of the two goes first alternates query by query. The searches'
latencies compare in the same run and moment (``paired_difference_ms``: on minus off,
per query); the reports' own latency is ``events_ms``; searches/s are of both together.
The gateway must record events (``ESRR_EVENTS=true``, the default).

The gateway's own CPU per search, beside latency and throughput: user + system CPU of the
gateway's processes (the one serving ``--url``'s port, found in ``/proc`` when it runs on this
machine, or ``--gateway-pid``, with its children under ``--processes N``), never the worker's
scoring or the client's. ``gateway_cpu_ms_per_search`` is each timed pass's CPU (clock ticks of
``/proc/<pid>/stat``) over its searches, at the run's concurrency; with ``--events`` a pass's
CPU includes the reports it recorded. ``gateway_cpu_ms`` is one more pass of the first form,
one search at a time and untimed, each search's CPU read from its threads' ``schedstat`` (exact
to the nanosecond) before and after it: the distribution per search (p50, p99).
"""

from __future__ import annotations

import json
import secrets
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import click
import numpy as np

from benchmarks.gateway_process import GatewayError, ProcessCpu, serving_pid
from benchmarks.queries import dev_query_options
from es_rerank.backends.base import MAX_K
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description


class GatewayFailed(RuntimeError):
    """A search through the gateway did not return reranked hits."""


FORMS = ("q", "match", "site")


def site_request(query: str, k: int) -> dict[str, Any]:
    """The site page's request for ``query`` (issue 26's contract) without its filters."""
    return {
        "query": {"bool": {"must": [{"match": {"text": {"query": query}}}]}},
        "from": 0,
        "size": k,
        "highlight": {"encoder": "html", "fields": {"title": {}, "abstract": {}}},
        "aggs": {
            "year": {"terms": {"field": "year", "size": 50}},
            "publication_types": {"terms": {"field": "publication_types", "size": 20}},
        },
    }


def search_once(pool: Any, url: str, query: str, k: int, form: str = "q") -> tuple[float, float, str]:
    """One search in one request ``form``: client-side ms, the gateway's ``took`` ms, and the ranker that answered."""
    elapsed_ms, took_ms, ranker, _ = _search(pool, url, query, k, form)
    return elapsed_ms, took_ms, ranker


def search_and_report(
    pool: Any, url: str, query: str, k: int, form: str, session: str, click: bool
) -> tuple[float, float, str, float]:
    """``search_once``, then the page's report of it: its impression and, when ``click``, a click on its first hit;
    the search's figures and the report's client-side ms."""
    elapsed_ms, took_ms, ranker, ids = _search(pool, url, query, k, form)
    impression = secrets.token_hex(8)
    events: list[dict[str, Any]] = [
        {
            "type": "impression",
            "impression_id": impression,
            "session_id": session,
            "query": query,
            "ranker": ranker,
            "results": [{"id": doc, "position": place} for place, doc in enumerate(ids, 1)],
        }
    ]
    if click and ids:
        events.append(
            {"type": "click", "impression_id": impression, "session_id": session, "id": ids[0], "position": 1}
        )
    started = time.perf_counter()
    response = pool.request(
        "POST",
        f"{url}/_esrr/events",
        body=json.dumps(events).encode("utf-8"),
        headers={"Content-Type": "text/plain;charset=UTF-8"},
    )  # as sendBeacon sends a string
    reported_ms = (time.perf_counter() - started) * 1000
    if response.status != 202:
        raise GatewayFailed(
            f"the events of {query!r} were refused: HTTP {response.status}: "
            f"{response.data[:300]!r} (the gateway needs ESRR_EVENTS=true)"
        )
    return elapsed_ms, took_ms, ranker, reported_ms


def _search(pool: Any, url: str, query: str, k: int, form: str) -> tuple[float, float, str, list[str]]:
    started = time.perf_counter()
    if form == "q":
        response = pool.request("GET", f"{url}/_search?{urlencode({'q': query, 'size': k})}")
    else:
        body = {"query": {"match": {"text": query}}, "size": k} if form == "match" else site_request(query, k)
        response = pool.request(
            "POST",
            f"{url}/_search",
            body=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
    elapsed_ms = (time.perf_counter() - started) * 1000
    try:
        body = json.loads(response.data)
    except ValueError:
        raise GatewayFailed(f"{query!r}: HTTP {response.status}, and not JSON: {response.data[:200]!r}") from None
    if response.status != 200:
        raise GatewayFailed(f"{query!r}: HTTP {response.status}: {body.get('error', {}).get('reason', body)}")
    if "fallback" in body["esrr"]:
        raise GatewayFailed(f"{query!r} was not reranked: {body['esrr']['fallback']}")
    return elapsed_ms, float(body["took"]), body["esrr"]["ranker"], [hit["_id"] for hit in body["hits"]["hits"]]


def run_rounds(
    url: str,
    queries: list[str],
    k: int,
    rounds: int,
    concurrency: int,
    forms: tuple[str, ...] = ("match",),
    events: bool = False,
    gateway: ProcessCpu | None = None,
) -> dict[str, Any]:
    """Every query once untimed in each form, then ``rounds`` timed passes at ``concurrency``, the forms taking
    turns within each round; the figures of the first form, and of every form under ``forms``. With ``events``,
    each form also as ``<form>+events``: every search followed by its report (``search_and_report``). With the
    ``gateway``'s processes, their CPU per search in each timed pass, and per search one at a time (``cpu_pass``)."""
    import urllib3

    pool = urllib3.PoolManager(maxsize=concurrency, retries=False, timeout=urllib3.Timeout(30))
    session = secrets.token_hex(16)
    timed_forms = [name for form in forms for name in ((form, f"{form}+events") if events else (form,))]
    timed: dict[str, dict[str, list]] = {
        name: {"latency": [], "took": [], "per_second": [], "events": [], "cpu": []} for name in timed_forms
    }
    cpu_s: Callable[[], float] = gateway.seconds if gateway is not None else lambda: 0.0

    def one(name: str, number: int, query: str) -> tuple[float, float, str, float | None]:
        form, reported = name.split("+")[0], name.endswith("+events")
        if reported:
            return search_and_report(pool, url, query, k, form, session, click=number % 2 == 0)
        return (*search_once(pool, url, query, k, form), None)

    def everyone(name: str) -> list[tuple[float, float, str, float | None]]:
        return list(threads.map(lambda numbered: one(name, *numbered), enumerate(queries)))

    def pair(form: str, number: int, query: str) -> tuple[tuple, tuple]:
        """One query without and with its report, back to back (which goes first alternates), so that both meet
        the same moment's load."""
        names = (form, f"{form}+events")
        first, second = names if number % 2 == 0 else names[::-1]
        results = {first: one(first, number, query)}
        results[second] = one(second, number, query)
        return results[form], results[f"{form}+events"]

    def record(
        name: str, results: list[tuple[float, float, str, float | None]], per_second: float, cpu_ms: float
    ) -> None:
        timed[name]["per_second"].append(per_second)
        timed[name]["cpu"].append(cpu_ms)
        timed[name]["latency"] += [ms for ms, _, _, _ in results]
        timed[name]["took"] += [ms for _, ms, _, _ in results]
        timed[name]["events"] += [ms for _, _, _, ms in results if ms is not None]

    differences: dict[str, list[float]] = {form: [] for form in forms}
    with ThreadPoolExecutor(concurrency) as threads:
        rankers = {ranker for name in timed_forms for _, _, ranker, _ in everyone(name)}
        for round_number in range(rounds):
            # Each round reverses the last one's order, so that no form always runs right after another.
            if events:  # each query off and on in turn: a difference per query, under the same load
                for form in forms if round_number % 2 == 0 else forms[::-1]:
                    started, cpu_before = time.perf_counter(), cpu_s()
                    pairs = list(threads.map(pair, [form] * len(queries), range(len(queries)), queries))
                    per_second = 2 * len(queries) / (time.perf_counter() - started)
                    cpu_ms = (cpu_s() - cpu_before) * 1000 / (2 * len(queries))  # the reports' CPU included
                    record(form, [off for off, _ in pairs], per_second, cpu_ms)
                    record(f"{form}+events", [on for _, on in pairs], per_second, cpu_ms)
                    differences[form] += [on[0] - off[0] for off, on in pairs]
                continue
            for name in timed_forms if round_number % 2 == 0 else timed_forms[::-1]:
                started, cpu_before = time.perf_counter(), cpu_s()
                results = everyone(name)
                elapsed, cpu_ms = time.perf_counter() - started, (cpu_s() - cpu_before) * 1000 / len(queries)
                record(name, results, len(queries) / elapsed, cpu_ms)
    figures = {form: _figures(values, gateway is not None) for form, values in timed.items()}
    for form, paired in differences.items():
        if paired:
            figures[f"{form}+events"]["paired_difference_ms"] = _spread(paired)
    one_at_a_time = (
        {} if gateway is None else {"gateway_cpu_ms": _spread(cpu_pass(pool, url, queries, k, forms[0], gateway))}
    )
    return {
        "rankers": sorted(rankers),
        "concurrency": concurrency,
        **figures[forms[0]],
        **one_at_a_time,
        **({"forms": figures} if len(timed) > 1 else {}),
    }


def cpu_pass(pool: Any, url: str, queries: list[str], k: int, form: str, gateway: ProcessCpu) -> list[float]:
    """The gateway's CPU ms for each query searched once in ``form``, one at a time (its threads' CPU before and
    after each search: all of it is that search's, and the gateway's idle threads' few microseconds)."""
    spent = []
    for query in queries:
        before = gateway.thread_ns()
        search_once(pool, url, query, k, form)
        spent.append((gateway.thread_ns() - before) / 1e6)
    return spent


def gateway_processes(url: str, pid: int | None) -> tuple[ProcessCpu | None, str]:
    """The gateway's processes whose CPU is measured (``pid``, else the one serving ``url``'s port on this machine),
    and how they were found or why none was."""
    if pid is not None:
        gateway = ProcessCpu(pid)
        return gateway, f"pid {pid} (--gateway-pid) and its children: {sorted(gateway.pids)}"
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None, f"not measured: {parts.hostname} is not this machine's loopback; pass --gateway-pid if it is"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = serving_pid(port)
    if found is None:
        return None, (
            f"not measured: no single process of this user listens on port {port}; pass --gateway-pid "
            "(a gateway behind a proxy: the gateway's own pid)"
        )
    gateway = ProcessCpu(found)
    return gateway, f"pid {found} (serving port {port}) and its children: {sorted(gateway.pids)}"


def _figures(timed: dict[str, list], cpu: bool = False) -> dict[str, Any]:
    overhead = np.array(timed["latency"]) - np.array(timed["took"])
    return {
        "searches": len(timed["latency"]),
        "latency_ms": _spread(timed["latency"]),
        "took_ms": _spread(timed["took"]),
        "http_and_json_ms": _spread(overhead),
        "searches_per_s": {"per_round": timed["per_second"], "median": statistics.median(timed["per_second"])},
        **(
            {"gateway_cpu_ms_per_search": {"per_round": timed["cpu"], "median": statistics.median(timed["cpu"])}}
            if cpu
            else {}
        ),
        **({"events_ms": _spread(timed["events"])} if timed["events"] else {}),
    }


def _spread(ms: Any) -> dict[str, float]:
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)), "mean": float(np.mean(ms))}


@click.command(name="http")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway.")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, MAX_K), help="Hits per search.")
@click.option(
    "--concurrency", default=1, show_default=True, type=click.IntRange(1, 256), help="Searches in flight at once."
)
@click.option(
    "--forms",
    default="match",
    show_default=True,
    help=f"Request forms, comma-separated, timed in turns in the same run: {', '.join(FORMS)}.",
)
@click.option(
    "--events",
    is_flag=True,
    help="Also time each form with every search followed by its impression "
    "(and a click every other search) to POST /_esrr/events, in the same run (needs ESRR_EVENTS=true).",
)
@click.option(
    "--gateway-pid",
    type=click.IntRange(min=1),
    default=None,
    help="The gateway process whose CPU (with its children's) is measured; default: the one listening on "
    "--url's port, when that is on this machine.",
)
@dev_query_options
@json_out_option("Also write the figures as JSON.")
def bench_http(
    url: str,
    k: int,
    concurrency: int,
    forms: str,
    events: bool,
    gateway_pid: int | None,
    rounds: int,
    queries: int,
    data: Path | None,
    json_out: Path | None,
) -> None:
    """Latency and searches/s of a running gateway (`esrr serve`) over the NFCorpus dev queries."""
    import urllib3

    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.settings import CommonSettings

    chosen = tuple(dict.fromkeys(form.strip() for form in forms.split(",") if form.strip()))
    if not chosen or set(chosen) - set(FORMS):
        raise click.BadParameter(f"{forms!r}: choose among {', '.join(FORMS)}", param_hint="--forms")
    texts = dev_query_texts(data, load_settings(CommonSettings), queries)
    url = url.rstrip("/")
    try:
        gateway, measured = gateway_processes(url, gateway_pid)
    except GatewayError as error:
        raise click.BadParameter(str(error), param_hint="--gateway-pid") from None
    try:
        figures = run_rounds(url, texts, k, rounds, concurrency, chosen, events, gateway)
    except GatewayFailed as error:
        raise click.ClickException(f"{error}; the figures would not be the served model's") from None
    except urllib3.exceptions.HTTPError as error:
        raise click.ClickException(
            f"cannot reach the gateway at {url} ({error}); start it with `esrr serve`, or pass its --url"
        ) from None
    figures = {
        "machine": machine_description(),
        "url": url,
        "queries": len(texts),
        "rounds": rounds,
        "k": k,
        "gateway_cpu_of": measured,
        **figures,
    }
    click.echo(
        f"{figures['machine']} | {', '.join(figures['rankers'])} | {len(texts)} dev queries x {rounds} "
        f"rounds, {concurrency} at a time"
    )
    click.echo(f"{'':<24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, key in (
        ("latency (client)", "latency_ms"),
        ("took (gateway)", "took_ms"),
        ("HTTP and JSON", "http_and_json_ms"),
    ):
        row = figures[key]
        click.echo(f"{name:<24} {row['p50']:>8.2f} {row['p99']:>8.2f} {row['mean']:>8.2f}")
    if "gateway_cpu_ms" in figures:
        row = figures["gateway_cpu_ms"]
        click.echo(f"{'gateway CPU, 1 at a time':<24} {row['p50']:>8.2f} {row['p99']:>8.2f} {row['mean']:>8.2f}")
    click.echo(f"searches/s: {figures['searches_per_s']['median']:.1f} (median of {rounds} rounds)")
    if "gateway_cpu_ms_per_search" in figures:
        click.echo(
            f"gateway CPU per search at {concurrency} in flight: "
            f"{figures['gateway_cpu_ms_per_search']['median']:.2f} ms (median of {rounds} rounds)"
        )
    click.echo(f"gateway CPU: {measured}")
    if "forms" in figures:
        first = figures["forms"][chosen[0]]["latency_ms"]["p50"]
        click.echo(
            f"{'form':<12} {'latency p50':>12} {'took p50':>9} {'p50 - ' + chosen[0]:>12} {'ratio':>6}"
            f"{' gateway CPU' if gateway is not None else ''}"
        )
        for form, row in figures["forms"].items():
            p50 = row["latency_ms"]["p50"]
            cpu = row.get("gateway_cpu_ms_per_search")
            click.echo(
                f"{form:<12} {p50:>10.2f}ms {row['took_ms']['p50']:>7.1f}ms {p50 - first:>+10.2f}ms "
                f"{p50 / first:>6.3f}" + (f" {cpu['median']:>9.2f}ms" if cpu is not None else "")
            )
    if events:
        click.echo("recording events: a search's latency p50 with each search reported, minus without (same run)")
        for form in chosen:
            off, on = figures["forms"][form], figures["forms"][f"{form}+events"]
            click.echo(
                f"{form:<12} {on['latency_ms']['p50'] - off['latency_ms']['p50']:>+8.2f}ms "
                f"(off {off['latency_ms']['p50']:.2f}, on {on['latency_ms']['p50']:.2f}); per query, on minus "
                f"off: median {on['paired_difference_ms']['p50']:+.2f}ms; the report itself: "
                f"p50 {on['events_ms']['p50']:.2f}ms, p99 {on['events_ms']['p99']:.2f}ms"
            )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
