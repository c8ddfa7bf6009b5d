"""``esrr bench attack``: every hostile request of issues 25 and 32 against a gateway, a light probe beside it.

Each row sends its request(s) (``concurrency`` at once) and reports: the status codes seen
(``timeout`` when the client gave up after ``--timeout`` s, ``conn`` when the connection
failed), the gateway's CPU from ``/proc/<pid>/stat`` (utime + stime, 10 ms ticks) over the
row and per request with the probe's share taken out, wall time, resident memory after the
row less before (and the peak, sampled every 20 ms), whether the process died, and the
probe's p50/p99 just before and during the row. A probe is one ``GET /_search?q=bone&size=1``
every 0.1 s from its own thread.

``--start HOME`` (what the committed baseline used) runs ``esrr serve --processes 1`` on
HOME's index under ``RLIMIT_AS`` (``--memory-cap-gb``), so a request that allocates without
bound ends in a failed allocation in that process, not in the kernel's OOM killer on a
shared machine; a gateway that died, or that was still at work on a request the client gave
up on, is killed and started again before the next row. ``--url`` with ``--pid`` measures a
gateway already running (its pid and children); the bench cannot restart that one.

Not here: served files changed under load (``esrr bench integrity``, benchmarks/integrity.py)
and poison messages on the broker (a worker's, tests/worker/test_poison.py).
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click

from benchmarks.gateway_process import MIB, Gateway, GatewayError, PeakSampler, StartedGateway, snapshot
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description

PROBE_PATH = "/_search?q=bone&size=1"
PROBE_INTERVAL_S = 0.1
JSON = "application/json"
NDJSON = "application/x-ndjson"
# NFCorpus' four words in the most documents (3,553-3,628 of 3,633), five times: with a slop of 100, tantivy's
# sloppy phrase scorer meets every position of each repeated word (a phrase of 20 distinct words matches nothing).
REPEATED_20 = "the of and in the of and in the of and in the of and in the of and in".split()
# Words of NFCorpus' titles and abstracts (and the tests' tiny corpus), drawn from to make searches of any length.
VOCABULARY = (
    "vitamin bone cancer breast health calcium deficiency loss tea green diet fat risk heart blood "
    "pressure cholesterol sugar insulin diabetes obesity fiber fruit vegetable meat fish milk soy "
    "protein acid iron zinc folate statin prostate colon liver kidney brain cell tumor growth study "
    "trial women men children dose intake plasma serum level effect patients disease therapy"
).split()


@dataclass(frozen=True)
class Request:
    """One HTTP request of a row."""

    method: str
    path: str
    body: bytes = b""
    content_type: str = JSON


@dataclass(frozen=True)
class Row:
    """A row of the table: its requests, each sent ``repeat`` times, ``concurrency`` at once."""

    name: str
    requests: tuple[Request, ...]
    concurrency: int = 1
    repeat: int = 1
    issue: int = 32


def _json(method: str, path: str, body: Any) -> Request:
    return Request(method, path, json.dumps(body).encode())


def _search(body: Any) -> Request:
    return _json("POST", "/_search", body)


def _query_string(text: str, **extra: Any) -> Request:
    return _search({"query": {"query_string": {"query": text}}, **extra})


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


def earlier_rows() -> list[Row]:
    """The attacks of issue 25 (tests/gateway/test_limits.py), each sent 3 times."""
    words = " ".join(["vitamin bone"] * 50_000)
    rows = {
        "index name a*a*... of 200 KB": Request("GET", "/" + "a*" * 100_000 + "/_search?q=bone"),
        "index name a*a*...b under the URL cap": Request("GET", "/" + "a*" * 120 + "b/_search?q=bone"),
        "1,100 index names": Request("GET", "/" + ",".join(["esrr-*"] * 1100) + ",x/_search?q=bone"),
        "100,000-word match (650 KB)": _search({"query": {"match": {"text": words}}}),
        "q= of 1,500 words in the URL": Request("GET", "/_search?q=" + "bone+" * 1500),
        "257-word match": _search({"query": {"match": {"text": "bone " * 257}}}),
        "1 MB of numbers": Request("POST", "/_search", ("[" + ",".join(["1"] * 500_000) + "]").encode()),
        "1 MB of keys": _json("POST", "/_search", {f"k{i}": 1 for i in range(80_000)}),
        "a number of 100,000 digits": Request("POST", "/_search", b'{"size": ' + b"9" * 100_000 + b"}"),
        "JSON nested 100,000 deep": Request("POST", "/_search", b"[" * 100_000 + b"]" * 100_000),
        "multi_match over 50,000 fields": _search(
            {"query": {"multi_match": {"query": "bone", "fields": [f"f{i}" for i in range(50_000)]}}}
        ),
        "invalid UTF-8 in q=": Request("GET", "/_search?q=%fe"),
        "a body of 2 MiB": Request("POST", "/_search", b" " * (2 << 20)),
        "256-word match (the longest accepted)": _search({"query": {"match": {"text": "bone cancer " * 128}}}),
    }
    return [Row(name, (request,), repeat=3, issue=25) for name, request in rows.items()]


def new_rows() -> list[Row]:
    """The single-request attacks of issue 32's table (the rows that need more than requests are separate)."""
    phrase = " ".join(REPEATED_20)
    slop_path = "/_search?" + urlencode({"q": f'"{phrase}"~100'})
    wildcards = " ".join(["?" * 31] * 255)  # 8 KB
    common = "the of and in a to is for with"  # matches every document: 1,000 hits to highlight or filter
    highlight_1000 = {
        "query": {"match": {"text": common}},
        "size": 1000,
        "highlight": {"fields": [{"abstract": {}}] * 1000},
    }
    highlight_100 = {**highlight_1000, "highlight": {"fields": [{"abstract": {}}] * 100}}
    patterns = [f"*{i}*" for i in range(5000)]
    source_body = _search({"query": {"match": {"text": common}}, "size": 300, "_source": patterns})
    url_patterns = ",".join(["x*"] * 1800)  # 1,800 fit under the 8 KB URL cap; none matches a field
    source_url = Request("GET", f"/_search?q=the&size=300&_source_includes={url_patterns}")
    tag = "<" + "x" * 98 + ">"
    tags_body = {
        "query": {"match": {"text": common}},
        "size": 1000,
        "highlight": {
            "pre_tags": [tag],
            "post_tags": [tag],
            "number_of_fragments": 0,
            "fields": {"title": {}, "abstract": {}},
        },
    }
    surrogate_query = b'{"query": {"term": {"journal": "\\ud800"}}}'
    msearch = (
        b'{"index": "\\ud800"}\n{"query": {"match": {"text": "bone"}}}\n{}\n{"query": {"match": {"text": "bone"}}}\n'
    )
    return [
        Row(f'GET /_search?q="the of and in x5"~100 ({len(slop_path)} bytes)', (Request("GET", slop_path),)),
        Row(
            "match_phrase of 20 words, slop 100",
            (_search({"query": {"match_phrase": {"text": {"query": phrase, "slop": 100}}}}),),
        ),
        Row(
            "match_phrase of 16 words, slop 50",
            (_search({"query": {"match_phrase": {"text": {"query": " ".join(REPEATED_20[:16]), "slop": 50}}}}),),
        ),
        Row("highlight.fields abstract x1000, size 1000", (_search(highlight_1000),)),
        Row("highlight.fields abstract x100, size 1000", (_search(highlight_100),)),
        Row("_source with 5,000 patterns", (source_body,)),
        Row("_source_includes with 1,800 patterns (URL)", (source_url,)),
        Row("_source with 5,000 patterns, 8 at once", (source_body,) * 8, concurrency=8),
        Row("query_string of 477 KB", (_query_string("bone " * 95_400),)),
        Row("255 ??????... wildcard terms (8 KB)", (_query_string(wildcards),)),
        Row("255 ??????... wildcard terms, 4 at once", (_query_string(wildcards),) * 4, concurrency=4),
        Row("1,000 nested parentheses", (_query_string("(" * 1000 + "bone" + ")" * 1000),)),
        Row("?x100", (_query_string("?" * 100),)),
        Row("lone surrogate \\ud800 in term", (Request("POST", "/_search", surrogate_query),)),
        Row("lone surrogate \\ud800 in _count", (Request("POST", "/_count", surrogate_query),)),
        Row("lone surrogate \\ud800 in _mget", (Request("POST", "/esrr-docs/_mget", b'{"ids": ["\\ud800"]}'),)),
        Row("lone surrogate \\ud800 in an _msearch header", (Request("POST", "/_msearch", msearch, NDJSON),)),
        Row("100-char highlight tags, fragments 0, size 1000", (_search(tags_body),)),
    ]


@dataclass
class Outcome:
    """How one request ended."""

    status: str  # the HTTP status, "timeout" or "conn"
    ms: float
    response_bytes: int = 0
    body: bytes = b""


class Client:
    """HTTP requests to the gateway, each given up after ``timeout_s``."""

    def __init__(self, url: str, timeout_s: float, maxsize: int = 16) -> None:
        import urllib3

        self.url, self.timeout_s = url, timeout_s
        self.pool = urllib3.PoolManager(
            maxsize=maxsize, retries=False, timeout=urllib3.Timeout(connect=5.0, read=timeout_s)
        )

    def send(self, request: Request, keep_body: bool = False, new_connection: bool = False) -> Outcome:
        """Send ``request`` (on a connection of its own when ``new_connection``); its status, milliseconds and
        response size."""
        import urllib3

        started = time.perf_counter()
        headers = {"Content-Type": request.content_type} if request.body else {}
        if new_connection:
            headers["Connection"] = "close"
        try:
            response = self.pool.request(
                request.method, self.url + request.path, body=request.body or None, headers=headers
            )
        except urllib3.exceptions.NewConnectionError:  # a ConnectTimeoutError subclass, but refused, not slow
            return Outcome("conn", (time.perf_counter() - started) * 1000)
        except (urllib3.exceptions.TimeoutError, TimeoutError):
            return Outcome("timeout", (time.perf_counter() - started) * 1000)
        except urllib3.exceptions.HTTPError:  # reset, closed without an answer
            return Outcome("conn", (time.perf_counter() - started) * 1000)
        ms = (time.perf_counter() - started) * 1000
        return Outcome(str(response.status), ms, len(response.data), response.data if keep_body else b"")


class Probe:
    """A light search every 0.1 s from its own thread, each on a new connection as a new visitor's would be (one
    kept open would not see a server that stopped accepting): (sent at, milliseconds, status)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.samples: list[tuple[float, float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.client.timeout_s + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            outcome = self.client.send(Request("GET", PROBE_PATH), new_connection=True)
            self.samples.append((sent, outcome.ms, outcome.status))
            self._stop.wait(PROBE_INTERVAL_S)

    def between(self, start: float, end: float) -> list[tuple[float, float, str]]:
        """The probes sent in [start, end)."""
        return [s for s in list(self.samples) if start <= s[0] < end]


def latency(samples: list[tuple[float, float, str]]) -> dict[str, Any]:
    """p50/p99 of the probes answered 200, and how many were not."""
    ms = sorted(s[1] for s in samples if s[2] == "200")
    statuses = dict(sorted(Counter(s[2] for s in samples).items()))
    if not ms:
        return {"n": len(samples), "failed": len(samples), "p50_ms": None, "p99_ms": None, "statuses": statuses}
    p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
    return {
        "n": len(samples),
        "failed": len(samples) - len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": p99,
        "statuses": statuses,
    }


@dataclass
class Result:
    """One row's figures."""

    row: str
    issue: int
    requests: int
    concurrency: int
    statuses: dict[str, int]
    cpu_ms: float | None  # the gateway's, over the row, probe included; None when it died out of sight
    cpu_ms_per_request: float | None  # the probe's estimated share taken out
    wall_ms: float
    rss_before_mb: float
    rss_change_mb: float | None  # after the row (0.5 s settled) less before; None when it died
    rss_peak_change_mb: float
    died: str | None  # how the measured process ended, if it did
    restarted: str | None  # why the bench started it again after the row
    probe_before: dict[str, Any]
    probe_during: dict[str, Any]
    note: str = ""
    max_response_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bench:
    """A gateway, a client and the probe; runs rows and records each one's ``Result``."""

    gateway: Gateway
    timeout_s: float
    before_s: float = 1.5
    settle_s: float = 0.5
    results: list[Result] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = Client(self.gateway.url, self.timeout_s, maxsize=64)
        self.probe = Probe(Client(self.gateway.url, self.timeout_s)).start()

    def close(self) -> None:
        self.probe.stop()

    def measure(
        self,
        name: str,
        issue: int,
        concurrency: int,
        work: Callable[[], tuple[list[Outcome], str]],
        before_s: float | None = None,
    ) -> Result:
        """Run ``work`` (its outcomes and a note) as one row, with the probe for ``before_s`` before (default
        the bench's) and during."""
        if not self.gateway.alive():
            self.gateway.restart()
        pid = self.gateway.pid
        window_start, first = time.monotonic(), snapshot(pid)
        time.sleep(self.before_s if before_s is None else before_s)
        started, before = time.monotonic(), snapshot(pid)
        probes_before = self.probe.between(window_start, started)
        probe_cpu_ms = (before.cpu_s - first.cpu_s) * 1000 / max(len(probes_before), 1)
        with PeakSampler(pid) as peak:
            outcomes, note = work()
            ended, after = time.monotonic(), snapshot(pid)
            time.sleep(self.settle_s)
        settled = snapshot(pid)
        rss_after = settled.rss
        probes_during = self.probe.between(started, ended)
        died = None if pid in after.pids and self.gateway.alive() else self._how_it_ended()
        if died is None and before.pids - settled.pids:  # ``esrr serve --processes N`` replaced a child
            died = "child " + ",".join(map(str, sorted(before.pids - settled.pids))) + " exited"
        restarted = None
        if died is not None and self.gateway.restart():
            restarted = "it died"
        elif any(o.status == "timeout" for o in outcomes) and self.gateway.restart():
            restarted = "a request timed out: killed so its work does not run into the next row"
        cpu_ms = (after.cpu_s - before.cpu_s) * 1000 if after.cpu_s >= before.cpu_s else None
        per_request = None
        if outcomes and cpu_ms is not None:
            per_request = max(cpu_ms - probe_cpu_ms * len(probes_during), 0.0) / len(outcomes)
        result = Result(
            row=name,
            issue=issue,
            requests=len(outcomes),
            concurrency=concurrency,
            statuses=dict(sorted(Counter(o.status for o in outcomes).items())),
            cpu_ms=cpu_ms,
            cpu_ms_per_request=per_request,
            wall_ms=(ended - started) * 1000,
            rss_before_mb=before.rss / MIB,
            rss_change_mb=(rss_after - before.rss) / MIB if died is None else None,
            rss_peak_change_mb=(peak.peak - before.rss) / MIB,
            died=died,
            restarted=restarted,
            probe_before=latency(probes_before),
            probe_during=latency(probes_during),
            note=note,
            max_response_bytes=max((o.response_bytes for o in outcomes), default=0),
        )
        self.results.append(result)
        return result

    def _how_it_ended(self) -> str:
        if isinstance(self.gateway, StartedGateway):
            return self.gateway.exit_status() or "gone"
        return "gone"

    def run_row(self, row: Row) -> Result:
        """Send the row's requests, ``concurrency`` at once."""
        jobs = list(row.requests) * row.repeat

        def work() -> tuple[list[Outcome], str]:
            with ThreadPoolExecutor(max_workers=row.concurrency) as pool:
                outcomes = list(pool.map(lambda r: self.client.send(r, keep_body=True), jobs))
            note = _note(outcomes)
            for outcome in outcomes:
                outcome.body = b""  # an answer may be megabytes
            return outcomes, note

        return self.measure(row.name, row.issue, row.concurrency, work)


def _note(outcomes: list[Outcome]) -> str:
    """What a status alone does not say: an _msearch's slots, an error's type."""
    notes = set()
    for outcome in outcomes:
        try:
            body = json.loads(outcome.body) if outcome.body else None
        except ValueError:
            continue
        if not isinstance(body, dict):
            continue
        if "responses" in body:
            notes.add("slots " + ",".join(str(r.get("status", 200)) for r in body["responses"]))
        elif isinstance(body.get("error"), dict):
            notes.add(str(body["error"].get("type", ""))[:40])
    return "; ".join(sorted(notes))


def check_concurrent_searches(
    bench: Bench, clients: int, searches: int, distinct: int, max_words: int, seed: int, window: int | None = None
) -> Result:
    """``searches`` query_string searches from ``clients`` threads; wrong = hit ids or status unlike the same
    query run alone beforehand. ``window``: the reranked window asked for (None: the gateway's; 0 makes each
    search cheaper, and what crossed over was the query's parse, not its reranking)."""
    rng = random.Random(seed)
    queries = [_words(rng, rng.choice((1, 2, 3, 5, 10, 30, 60, 120, 240, max_words))) for _ in range(distinct)]
    ext = {} if window is None else {"ext": {"esrr": {"window_size": window}}}
    requests = [_query_string(q, size=10, _source=False, **ext) for q in queries]
    alone = [_hit_ids(bench.client.send(r, keep_body=True)) for r in requests]
    order = [rng.randrange(distinct) for _ in range(searches)]
    wrong: Counter[str] = Counter()

    def work() -> tuple[list[Outcome], str]:
        def one(turn: int) -> tuple[Outcome, bool]:
            index = order[turn]
            outcome = bench.client.send(requests[index], keep_body=True)
            differs = _hit_ids(outcome) != alone[index]
            outcome.body = b""
            return outcome, differs

        with ThreadPoolExecutor(max_workers=clients) as pool:
            answered = list(pool.map(one, range(searches)))
        wrong["wrong"] = sum(differs for _, differs in answered)  # counted here: += from threads could lose counts
        outcomes = [outcome for outcome, _ in answered]
        return outcomes, f"{wrong['wrong']} wrong of {searches} ({distinct} distinct queries, 1-{max_words} words)"

    result = bench.measure(f"{clients} clients, {searches} concurrent query_string searches", 32, clients, work)
    result.extra = {
        "wrong": wrong["wrong"],
        "searches": searches,
        "distinct": distinct,
        "max_words": max_words,
        "alone_statuses": dict(Counter(a[0] for a in alone)),
    }
    return result


def _hit_ids(outcome: Outcome) -> tuple[str, tuple[str, ...]]:
    try:
        hits = json.loads(outcome.body)["hits"]["hits"] if outcome.status == "200" else []
    except (ValueError, KeyError, TypeError):
        return outcome.status, ("unreadable",)
    return outcome.status, tuple(hit["_id"] for hit in hits)


def heavy_beside_probe(
    bench: Bench, request: Request, label: str, clients: int, seconds: float, apart: bool = True
) -> Result:
    """``clients`` threads sending ``request`` without pause for ``seconds``; the probe's p99 during / before.

    ``apart``: the threads run in a process of their own, as an attacker's client is not the visitor's; in this
    one (``apart`` false, as before) the probe's thread waits for this process's interpreter lock beside them.
    """
    _answered_once(bench.client, request)
    if not apart:
        result = bench.measure(
            f"{clients} concurrent {label} for {seconds:g} s",
            32,
            clients,
            lambda: (_flood(bench.client, request, clients, seconds), ""),
            before_s=min(seconds, 10.0),
        )  # a p99 of ~100 probes, not ~15
        return _probe_ratio(result)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(int).result()  # started and ready before the row's clock starts
        result = bench.measure(
            f"{clients} concurrent {label} for {seconds:g} s (from another process)",
            32,
            clients,
            lambda: (
                pool.submit(_flood_from, bench.gateway.url, bench.timeout_s, request, clients, seconds).result(),
                "",
            ),
            before_s=min(seconds, 10.0),
        )
    return _probe_ratio(result)


def _answered_once(client: Client, request: Request, wait_s: float = 120.0) -> None:
    """Send ``request`` until it is answered with anything but a 503 (at most ``wait_s``): a gateway that runs heavy
    searches in a process of its own starts that process in the background, and its start (seconds of CPU) must
    not fall into the probe's time before the row."""
    deadline = time.monotonic() + wait_s
    while client.send(request).status == "503" and time.monotonic() < deadline:
        time.sleep(0.5)


def _flood(client: Client, request: Request, clients: int, seconds: float) -> list[Outcome]:
    """``clients`` threads sending ``request`` through ``client`` without pause for ``seconds``: how each ended."""
    stop = time.monotonic() + seconds

    def loop(_: int) -> list[Outcome]:
        done = []
        while time.monotonic() < stop:
            done.append(client.send(request))
        return done

    with ThreadPoolExecutor(max_workers=clients) as pool:
        return [o for batch in pool.map(loop, range(clients)) for o in batch]


def _flood_from(url: str, timeout_s: float, request: Request, clients: int, seconds: float) -> list[Outcome]:
    """``_flood`` in another process, with a client of its own."""
    return _flood(Client(url, timeout_s, maxsize=max(16, clients)), request, clients, seconds)


def _probe_ratio(result: Result) -> Result:
    before, during = result.probe_before["p99_ms"], result.probe_during["p99_ms"]
    ratio = during / before if before and during else None
    result.extra = {"probe_p99_ratio": ratio}
    result.note = f"probe p99 during/before: {ratio:.1f}x" if ratio else "probe p99 during/before: no answers"
    return result


def trickle(bench: Bench, connections: int, interval_s: float, seconds: float) -> Result:
    """``connections`` connections each sending one byte of a request every ``interval_s`` for ``seconds``; the
    probe is the normal client."""
    from urllib.parse import urlsplit

    parts = urlsplit(bench.gateway.url)
    request = b"GET /_search?q=bone HTTP/1.1\r\nHost: trickle\r\n" + b"X-Pad: " + b"a" * 1000

    def work() -> tuple[list[Outcome], str]:
        socks, refused = [], 0
        for _ in range(connections):
            try:
                socks.append(socket.create_connection((parts.hostname, parts.port or 80), timeout=5))
            except OSError:
                refused += 1
        stop, sent, dropped = time.monotonic() + seconds, 0, 0
        try:
            while time.monotonic() < stop:
                for sock in list(socks):
                    try:
                        sock.sendall(request[sent : sent + 1])
                    except OSError:
                        socks.remove(sock)
                        dropped += 1
                sent += 1
                time.sleep(min(interval_s, max(stop - time.monotonic(), 0)))
        finally:
            for sock in socks:
                sock.close()
        return [], f"{connections - refused} connected, {dropped} closed by the server, {sent} bytes each"

    result = bench.measure(
        f"{connections} connections trickling 1 byte / {interval_s:g} s for {seconds:g} s", 32, connections, work
    )
    result.statuses = {f"probe {k}": v for k, v in result.probe_during["statuses"].items()}
    return result


def root_and_health(client: Client) -> dict[str, Any]:
    """What ``GET /`` and ``/_esrr/health`` say about reranking, and whether they agree."""
    root = client.send(Request("GET", "/"), keep_body=True)
    health = client.send(Request("GET", "/_esrr/health"), keep_body=True)
    try:
        root_reranks = json.loads(root.body)["esrr"]["reranks"]
    except (ValueError, KeyError, TypeError):
        root_reranks = None
    try:
        health_body = json.loads(health.body)
        health_status, health_reranks = health_body.get("status"), health_body.get("reranks")
    except (ValueError, AttributeError):
        health_status, health_reranks = None, None
    return {
        "root_status": root.status,
        "health_status_code": health.status,
        "root_reranks": root_reranks,
        "health": health_status,
        "health_reranks": health_reranks,
        "agree": root_reranks == health_reranks and root_reranks is not None,
    }


def root_vs_health(bench: Bench, label: str, client: Client | None = None) -> Result:
    """``GET /`` against ``/_esrr/health`` on a gateway (the measured one unless ``client``)."""
    seen: dict[str, Any] = {}

    def work() -> tuple[list[Outcome], str]:
        seen.update(root_and_health(client or bench.client))
        outcomes = [Outcome(seen["root_status"], 0), Outcome(seen["health_status_code"], 0)]
        return outcomes, (
            f"GET / reranks={seen['root_reranks']}, health {seen['health']} "
            f"reranks={seen['health_reranks']}: {'agree' if seen['agree'] else 'DISAGREE'}"
        )

    result = bench.measure(f"GET / vs /_esrr/health ({label})", 32, 1, work)
    if client is not None:
        result.note += " (CPU, memory and probe: the measured gateway's, not this one's)"
    result.extra = seen
    return result


def celery_keys(bench: Bench, redis_url: str) -> Result:
    """The Celery results left on Redis after the run: ``celery-task-meta-*`` keys and their bytes."""
    import redis

    def work() -> tuple[list[Outcome], str]:
        store = redis.Redis.from_url(redis_url)
        keys = list(store.scan_iter(match="celery-task-meta-*", count=1000))
        size = sum(store.memory_usage(key) or 0 for key in keys)
        return [], f"{len(keys)} celery-task-meta-* keys, {size} bytes on {redis_url}"

    return bench.measure("Celery results left in Redis", 32, 1, work)


def no_worker_gateway(home: Path, memory_cap: int, log_dir: Path) -> StartedGateway:
    """A second started gateway that reranks through a broker where nothing listens: no worker."""
    from benchmarks.chaos import free_port

    env = {**os.environ, "ESRR_GATEWAY_RERANK": "true", "ESRR_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    env.pop("ESRR_RESULT_BACKEND", None)
    return StartedGateway(home, free_port(), memory_cap, env, log_dir / "gateway-no-worker.log").start()


def heaviest_request(max_words: int) -> Request:
    """The longest query_string accepted, 100 hits, highlighted in title and abstract."""
    return _query_string(
        _words(random.Random(7), max_words), size=100, highlight={"fields": {"title": {}, "abstract": {}}}
    )


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}"


def print_table(results: list[Result]) -> None:
    """The rows as a Markdown table."""
    click.echo(
        "| row | statuses | gateway CPU ms (per request) | wall ms | RSS change MB (peak) | died | "
        "probe p50/p99 ms before | during | note |"
    )
    click.echo("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        statuses = " ".join(f"{k}x{v}" for k, v in r.statuses.items()) or "-"
        died = r.died or "no"
        if r.restarted:
            died += " (restarted)" if r.died else " (killed after timeout)"
        before, during = r.probe_before, r.probe_during
        probe_b = f"{_fmt(before['p50_ms'])}/{_fmt(before['p99_ms'])}"
        probe_d = f"{_fmt(during['p50_ms'])}/{_fmt(during['p99_ms'])}" + (
            f" ({during['failed']} of {during['n']} failed)" if during["failed"] else ""
        )
        size = f"answer {r.max_response_bytes / MIB:.1f} MB" if r.max_response_bytes > MIB else ""
        note = "; ".join(part for part in (r.note, size) if part)
        click.echo(
            f"| {r.row} | {statuses} | {_fmt(r.cpu_ms)} ({_fmt(r.cpu_ms_per_request)}) | {r.wall_ms:.0f} | "
            f"{_signed(r.rss_change_mb)} ({r.rss_peak_change_mb:+.0f}) | {died} | {probe_b} | {probe_d} | "
            f"{note} |"
        )


def wanted(name: str, only: tuple[str, ...]) -> bool:
    """Whether a row called ``name`` runs: it contains one of ``only`` (case-insensitive), or ``only`` is empty."""
    return not only or any(part.lower() in name.lower() for part in only)


@click.command(name="attack")
@click.option(
    "--start",
    "home",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Start `esrr serve --processes 1` on this ESRR_HOME under a memory cap (and again after a "
    "death); the way to run the heavy rows on a shared machine.",
)
@click.option("--url", default=None, help="A running gateway instead (needs --pid), or a proxy in front of it.")
@click.option(
    "--pid",
    type=click.IntRange(1),
    default=None,
    help="With --url: the gateway process whose CPU and memory are read (its children included).",
)
@click.option(
    "--memory-cap-gb",
    default=4.0,
    show_default=True,
    type=click.FloatRange(0.5, 1024),
    help="RLIMIT_AS of the started gateway.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help='Seconds a request may take before the client gives up on it ("timeout").',
)
@click.option(
    "--only",
    multiple=True,
    help="Run only the rows whose name contains this text (repeatable); the "
    "rows past the single requests are named concurrent, heaviest, health, trickle, celery.",
)
@click.option("--skip-earlier", is_flag=True, help="Leave out issue 25's attacks.")
@click.option(
    "--concurrent-searches",
    default=400,
    show_default=True,
    type=click.IntRange(0),
    help="query_string searches sent concurrently and checked against their answer alone "
    "(100000 for the issue's floor; 0: skip).",
)
@click.option("--concurrent-clients", default=4, show_default=True, type=click.IntRange(2, 256))
@click.option(
    "--concurrent-window",
    type=click.IntRange(0),
    default=None,
    help="ext.esrr.window_size of the concurrent searches (default: the gateway's; 0 is cheaper).",
)
@click.option("--distinct-queries", default=100, show_default=True, type=click.IntRange(1))
@click.option(
    "--max-words",
    default=256,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="The gateway's word limit (ESRR_GATEWAY_MAX_QUERY_WORDS): the longest searches sent.",
)
@click.option(
    "--heavy-clients",
    default=8,
    show_default=True,
    type=click.IntRange(0, 256),
    help="Clients sending the heaviest accepted request beside the probe (0: skip).",
)
@click.option("--heavy-s", default=10.0, show_default=True, type=click.FloatRange(1, 3600))
@click.option(
    "--heavy-apart/--heavy-in-bench",
    default=True,
    show_default=True,
    help="Send the heaviest requests from a process of their own (an attacker's client is not the "
    "visitor's), or from threads of the bench's process, beside the probe's (as before).",
)
@click.option(
    "--heavy-body",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A JSON _search body to use as the heaviest request (default: a --max-words query_string, "
    "100 hits, highlighted).",
)
@click.option(
    "--trickle-connections",
    default=100,
    show_default=True,
    type=click.IntRange(0, 100_000),
    help="Connections sending a byte every --trickle-interval-s (0: skip); point --url at a proxy to "
    "measure the production stack.",
)
@click.option("--trickle-interval-s", default=10.0, show_default=True, type=click.FloatRange(0.1, 600))
@click.option("--trickle-s", default=20.0, show_default=True, type=click.FloatRange(1, 3600))
@click.option(
    "--redis-url",
    default=None,
    help="The broker of a gateway that reranks with a worker: count celery-task-meta-* keys after the "
    "run (a started gateway then reranks through it; start the worker yourself).",
)
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where a started gateway's log goes (default: a temporary folder, named at the end).",
)
@json_out_option("Also write the rows as JSON.")
def bench_attack(
    home: Path | None,
    url: str | None,
    pid: int | None,
    memory_cap_gb: float,
    timeout_s: float,
    only: tuple[str, ...],
    skip_earlier: bool,
    concurrent_searches: int,
    concurrent_clients: int,
    concurrent_window: int | None,
    distinct_queries: int,
    max_words: int,
    heavy_clients: int,
    heavy_s: float,
    heavy_apart: bool,
    heavy_body: Path | None,
    trickle_connections: int,
    trickle_interval_s: float,
    trickle_s: float,
    redis_url: str | None,
    log_dir: Path | None,
    json_out: Path | None,
) -> None:
    """Every hostile request of issues 25 and 32 against a gateway: status, CPU, memory, probe latency."""
    from benchmarks.chaos import free_port

    if (home is None) == (url is None):
        raise click.UsageError("give --start HOME (the bench starts the gateway) or --url with --pid")
    if url is not None and pid is None:
        raise click.UsageError("--url needs --pid: the gateway process whose CPU and memory are measured")
    memory_cap = int(memory_cap_gb * (1 << 30))
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="esrr-attack-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    if home is not None:
        env = {**os.environ}
        if redis_url:
            env["ESRR_BROKER_URL"] = redis_url
        else:
            env["ESRR_GATEWAY_RERANK"] = "false"
        try:
            gateway: Gateway = StartedGateway(home, free_port(), memory_cap, env, log_dir / "gateway.log").start()
        except GatewayError as error:
            raise click.ClickException(str(error)) from None
    else:
        assert url is not None and pid is not None  # checked with the options above
        gateway = Gateway(url.rstrip("/"), pid)
        if not gateway.alive():
            raise click.ClickException(f"no process {pid}; give the pid of the gateway behind {url}")
    heavy = Request("POST", "/_search", heavy_body.read_bytes()) if heavy_body else heaviest_request(max_words)
    heavy_label = f"heaviest requests ({heavy_body.name})" if heavy_body else f"{max_words}-word highlighted searches"
    rows = [row for row in ([] if skip_earlier else earlier_rows()) + new_rows() if wanted(row.name, only)]
    started = time.monotonic()
    bench = Bench(gateway, timeout_s)
    try:
        from tqdm import tqdm

        for row in tqdm(rows, desc="attack", unit="row"):
            bench.run_row(row)
        if concurrent_searches and wanted("concurrent", only):
            check_concurrent_searches(
                bench,
                concurrent_clients,
                concurrent_searches,
                distinct_queries,
                max_words,
                seed=32,
                window=concurrent_window,
            )
        if heavy_clients and wanted("heaviest", only):
            heavy_beside_probe(bench, heavy, heavy_label, heavy_clients, heavy_s, heavy_apart)
        if wanted("health", only):
            root_vs_health(bench, "the measured gateway")
            if home is not None:
                other = no_worker_gateway(home, memory_cap, log_dir)
                try:
                    root_vs_health(bench, "a gateway that reranks, no worker", Client(other.url, timeout_s))
                finally:
                    other.stop()
        if trickle_connections and wanted("trickle", only):
            trickle(bench, trickle_connections, trickle_interval_s, trickle_s)
        if redis_url and wanted("celery", only):
            celery_keys(bench, redis_url)
    finally:
        bench.close()
        gateway.stop()
    figures = {
        "machine": machine_description(),
        "gateway": gateway.describe(),
        "timeout_s": timeout_s,
        "reranks": "through " + redis_url if redis_url else "no (ESRR_GATEWAY_RERANK=false, no worker)",
        "gateway_starts": getattr(gateway, "starts", None),
        "seconds": time.monotonic() - started,
        "rows": [asdict(r) for r in bench.results],
    }
    click.echo(
        f"{figures['machine']} | {figures['gateway']} | client timeout {timeout_s:g} s | "
        f"{figures['seconds']:.0f} s in all"
    )
    print_table(bench.results)
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
