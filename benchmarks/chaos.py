"""``esrr bench chaos``: searches under load while faults are injected; failed, fell back and latency per phase.

It starts everything itself, as in production but on loopback: a ``redis-server`` of its
own (so that it can stop and kill it), a worker (``esrr worker start``) and a gateway
(``esrr serve``) on the index and model of ``ESRR_HOME`` (``bash scripts/run.sh`` makes
both), with the settings of the environment otherwise. ``--clients`` threads search the
NFCorpus dev queries without pause through phases of ``--phase-s`` seconds:

- steady: everything up;
- worker killed: SIGKILL to the worker; searches wait out the deadline, then the breaker
  skips the workers;
- worker restarted: a new worker; seconds until it answers a ping, then until a search
  is reranked again;
- broker stopped: SIGSTOP to Redis (connections stay open, nothing answers);
- broker continued: SIGCONT;
- broker restarted: Redis killed (SIGKILL) and started again on its port;
- BM25 only: the same load on a second gateway that never asks a worker
  (``ESRR_GATEWAY_RERANK=false``), the baseline for searches the breaker skips.

Per phase: searches, failed (not a 200, or no answer within 30 s), fell back (waited for
the workers, or skipped by the breaker at once), reranked, and latency. Then, load off:

- attacks: each hostile request of issue 25, 5 times; the gateway process's CPU per
  request, read from ``/proc`` (10 ms ticks, so within 2 ms);
- queue bound: ``--outage-sends`` tasks (12,000: 10 minutes at 20 searches/s) sent to a
  queue no worker consumes, without the breaker, each a real window of a dev query; the
  bytes that are left on Redis.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.queries import dev_query_texts
from es_rerank.backends.base import MAX_WINDOW, text_hits
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description

ESRR = [sys.executable, "-c", "from es_rerank.cli import main; main()"]  # the command, run, never imported here
SEARCH_TIMEOUT_S = 30.0
SKIPPED = "the model stage is skipped"  # how the breaker's fallback reason begins (es_rerank/ranking/breaker.py)
PHASES = (
    "steady",
    "worker killed",
    "worker restarted",
    "broker stopped",
    "broker continued",
    "broker restarted",
    "BM25 only",
)
ATTACK_REPEATS = 5


class ChaosError(click.ClickException):
    """A part of the set-up did not start; the message says which and where its log is."""


@dataclass
class Search:
    """One search of the load: when it was sent, how long it took, and how it ended."""

    phase: str
    sent: float  # time.monotonic
    ms: float
    outcome: str  # reranked | skipped | waited | unasked (no hits to rerank, or a gateway without the model) | failed


def free_port() -> int:
    """A loopback TCP port that is free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Process:
    """A child process of the benchmark, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name, self.argv, self.env = name, argv, env
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen | None = None

    def start(self) -> Process:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def process(self) -> subprocess.Popen:
        """The started process; ``ChaosError`` before ``start``."""
        if self.popen is None:
            raise ChaosError(f"{self.name} has not been started")
        return self.popen

    def signal(self, number: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(number)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        self.popen.terminate()
        try:
            self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> float:
        """Seconds until ``ready()``; ``ChaosError`` naming the log if the process exits or time runs out."""
        started = time.monotonic()
        while not ready():
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                tail = self.log_path.read_text(errors="replace")[-1500:]
                raise ChaosError(f"{self.name} did not start (log {self.log_path}):\n{tail}")
            time.sleep(0.1)
        return time.monotonic() - started


def redis_process(port: int, directory: Path, log_dir: Path) -> Process:
    """A throw-away ``redis-server`` on loopback that keeps nothing on disk."""
    server = shutil.which("redis-server")
    if server is None:
        raise ChaosError("redis-server is not installed; install it (apt-get install -y redis-server)")
    return Process(
        "redis",
        [
            server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        dict(os.environ),
        log_dir,
    )


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def worker_answers(client: Any) -> bool:
    from kombu.exceptions import OperationalError

    try:
        return bool(client.control.ping(timeout=0.5))
    except (OperationalError, OSError):
        return False


def gateway_answers(url: str) -> bool:
    import urllib3

    try:
        return urllib3.request("GET", f"{url}/", timeout=1.0, retries=False).status == 200
    except urllib3.exceptions.HTTPError:
        return False


def queue_contents(url: str, key: str) -> tuple[int, int, int]:
    """Tasks waiting on ``key``, their bytes in all, and the largest one's."""
    import redis

    sizes = [len(item) for item in redis.Redis.from_url(url).lrange(key, 0, -1)]
    return len(sizes), sum(sizes), max(sizes, default=0)


class Load:
    """``clients`` threads searching the queries without pause, each search recorded under the current phase."""

    def __init__(self, url: str, queries: list[str], clients: int) -> None:
        import urllib3

        self.url, self.queries = url, queries
        self.pool = urllib3.PoolManager(maxsize=clients, retries=False, timeout=urllib3.Timeout(SEARCH_TIMEOUT_S))
        self.phase = PHASES[0]
        self.searches: list[Search] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(SEARCH_TIMEOUT_S + 5)

    def _run(self, offset: int) -> None:
        import urllib3

        turn = offset
        while not self._stop.is_set():
            query, turn = self.queries[turn % len(self.queries)], turn + 1
            phase, sent = self.phase, time.monotonic()
            try:
                response = self.pool.request("GET", f"{self.url}/_search", fields={"q": query, "size": "10"})
                esrr = json.loads(response.data)["esrr"] if response.status == 200 else None
            except (urllib3.exceptions.HTTPError, ValueError, KeyError):
                esrr = None
            ms = (time.monotonic() - sent) * 1000
            if esrr is None:
                outcome = "failed"
            elif "fallback" not in esrr:
                outcome = "unasked" if esrr["ranker"].startswith("BM25") else "reranked"
            else:
                outcome = "skipped" if esrr["fallback"].startswith(SKIPPED) else "waited"
            with self._lock:
                self.searches.append(Search(phase, sent, ms, outcome))


def phase_rows(searches: list[Search]) -> list[dict[str, Any]]:
    """Per phase: counts by outcome and latency percentiles (all searches, and those the breaker skipped)."""
    rows = []
    for phase in PHASES:
        mine = [s for s in searches if s.phase == phase]
        if not mine:
            continue
        counts = {
            kind: sum(s.outcome == kind for s in mine)
            for kind in ("reranked", "waited", "skipped", "unasked", "failed")
        }
        ms = np.array([s.ms for s in mine])
        skipped = np.array([s.ms for s in mine if s.outcome == "skipped"])
        rows.append(
            {
                "phase": phase,
                "searches": len(mine),
                **counts,
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "max_ms": float(ms.max()),
                "skipped_p99_ms": float(np.percentile(skipped, 99)) if len(skipped) else None,
            }
        )
    return rows


def attack_requests() -> dict[str, tuple[str, str, bytes]]:
    """The hostile requests of issue 25: name -> (method, path, JSON body)."""
    words = " ".join(["vitamin bone"] * 50_000)
    return {
        "index name a*a*... of 200 KB": ("GET", "/" + "a*" * 100_000 + "/_search?q=bone", b""),
        "100,000-word query": ("POST", "/_search", json.dumps({"query": {"match": {"text": words}}}).encode()),
        "257-word query": ("POST", "/_search", json.dumps({"query": {"match": {"text": "bone " * 257}}}).encode()),
        "1 MB of numbers": ("POST", "/_search", ("[" + ",".join(["1"] * 500_000) + "]").encode()),
        "nesting 100,000 deep": ("POST", "/_search", b"[" * 100_000 + b"]" * 100_000),
        "invalid UTF-8 in q=": ("GET", "/_search?q=%fe", b""),
        "a 256-word search (answered)": (
            "POST",
            "/_search",
            json.dumps({"query": {"match": {"text": "bone cancer " * 128}}}).encode(),
        ),
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_attacks(url: str, pid: int) -> list[dict[str, Any]]:
    """Each attack ``ATTACK_REPEATS`` times: its status and the gateway's CPU per request."""
    import urllib3

    pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(SEARCH_TIMEOUT_S))
    rows = []
    for name, (method, path, body) in attack_requests().items():
        before, statuses = process_cpu_s(pid), set()
        for _ in range(ATTACK_REPEATS):
            response = pool.request(
                method,
                f"{url}{path}",
                body=body or None,
                headers={"Content-Type": "application/json"} if body else None,
            )
            statuses.add(response.status)
        rows.append(
            {
                "attack": name,
                "status": sorted(statuses),
                "cpu_ms": (process_cpu_s(pid) - before) * 1000 / ATTACK_REPEATS,
            }
        )
    return rows


def measure_queue_bound(settings: Any, queries: list[str], window: int, sends: int) -> dict[str, Any]:
    """``sends`` tasks of real windows to a queue nobody consumes, without a breaker: what is left on Redis."""
    from es_rerank.backends import open_backend
    from es_rerank.payload import build_request, encode
    from es_rerank.ranking.broker import client_app
    from es_rerank.ranking.dispatch import WorkerReranker
    from es_rerank.ranking.pipeline import ScoringUnavailable

    backend = open_backend(settings)
    payloads = []
    for text in queries:
        hits = text_hits(backend, text, window)
        if len(hits) == window:
            payloads.append(encode(build_request(text, [h.terms for h in hits], backend.stats, settings.lex_features)))
        if len(payloads) == 20:
            break
    if not payloads:
        raise ChaosError(f"no dev query has {window} BM25 hits to send; lower --window")
    queue = f"chaos-nobody-{uuid.uuid4().hex[:6]}"
    outage = settings.model_copy(update={"queue": queue})
    reranker = WorkerReranker(
        client_app(outage), queue, 0.2, settings.lex_features, max_queued=settings.queue_max_tasks
    )
    refused, started = 0, time.monotonic()
    try:
        for turn in range(sends):
            try:
                reranker.answer(payloads[turn % len(payloads)], time.monotonic() + 0.2)
            except ScoringUnavailable as error:
                refused += "tasks wait on queue" in str(error)
    finally:
        reranker.close()
    tasks, total, largest = queue_contents(settings.broker_url, settings.broker_key_prefix + queue)
    return {
        "sends": sends,
        "refused_by_cap": refused,
        "seconds": time.monotonic() - started,
        "cap": settings.queue_max_tasks,
        "tasks_left": tasks,
        "bytes_left": total,
        "largest_task_bytes": largest,
    }


@dataclass
class Report:
    """What the run measured."""

    header: dict[str, Any]
    phases: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    queue_after_worker_killed: dict[str, int] = field(default_factory=dict)
    attacks: list[dict[str, Any]] = field(default_factory=list)
    queue_bound: dict[str, Any] = field(default_factory=dict)


def run_chaos(
    settings: Any, queries: list[str], clients: int, phase_s: float, window: int, sends: int, log_dir: Path
) -> Report:
    """Start the services, run the phases under load, then the attacks and the queue bound; stop everything."""
    from es_rerank.ranking.broker import client_app

    report = Report(
        {
            "machine": machine_description(),
            "clients": clients,
            "phase_s": phase_s,
            "queries": len(queries),
            "home": str(settings.home),
        }
    )
    redis_port, gateway_port = free_port(), free_port()
    broker_url = f"redis://127.0.0.1:{redis_port}/0"
    env = {
        **os.environ,
        "ESRR_BROKER_URL": broker_url,
        "ESRR_QUEUE": f"chaos-{uuid.uuid4().hex[:6]}",
        "ESRR_BROKER_KEY_PREFIX": "",
        "ESRR_HOME": str(settings.home.resolve()),
    }
    env.pop("ESRR_RESULT_BACKEND", None)
    settings = settings.model_copy(
        update={"broker_url": broker_url, "queue": env["ESRR_QUEUE"], "broker_key_prefix": "", "result_backend": None}
    )
    with ExitStack() as running, tempfile.TemporaryDirectory() as redis_dir:
        redis = redis_process(redis_port, Path(redis_dir), log_dir).start()
        running.callback(redis.stop)
        redis.wait_until(lambda: redis_answers(broker_url), 10)
        client = client_app(settings)
        running.callback(client.close)
        worker = Process("worker-1", [*ESRR, "worker", "start"], env, log_dir).start()
        running.callback(worker.stop)
        worker.wait_until(lambda: worker_answers(client), 180)
        gateway = Process("gateway", [*ESRR, "serve", "--port", str(gateway_port)], env, log_dir).start()
        running.callback(gateway.stop)
        url = f"http://127.0.0.1:{gateway_port}"
        gateway.wait_until(lambda: gateway_answers(url), 120)

        load = Load(url, queries, clients).start()
        with PhaseClock(phase_s) as tick:
            tick("steady")
            load.phase = "worker killed"
            worker.signal(signal.SIGKILL)
            tick("worker killed")
            tasks, total, _ = queue_contents(broker_url, settings.queue)
            report.queue_after_worker_killed = {"tasks": tasks, "bytes": total}
            load.phase = "worker restarted"
            restarted = time.monotonic()
            worker = Process("worker-2", [*ESRR, "worker", "start"], env, log_dir).start()
            running.callback(worker.stop)
            report.events["worker ready after start s"] = worker.wait_until(lambda: worker_answers(client), 180)
            ready = restarted + report.events["worker ready after start s"]
            report.events["reranked again after worker ready s"] = first_reranked_after(load, ready, 60.0)
            tick("worker restarted", since=restarted)
            load.phase = "broker stopped"
            redis.signal(signal.SIGSTOP)
            tick("broker stopped")
            load.phase = "broker continued"
            redis.signal(signal.SIGCONT)
            tick("broker continued")
            load.phase = "broker restarted"
            redis.process.kill()
            redis.process.wait(10)
            redis = redis_process(redis_port, Path(redis_dir), log_dir).start()
            running.callback(redis.stop)
            report.events["broker back after kill s"] = redis.wait_until(lambda: redis_answers(broker_url), 10)
            tick("broker restarted")
            load.stop()
            worker.stop()
            bm25_port = free_port()
            bm25 = Process(
                "gateway-bm25",
                [*ESRR, "serve", "--port", str(bm25_port)],
                {**env, "ESRR_GATEWAY_RERANK": "false"},
                log_dir,
            ).start()
            running.callback(bm25.stop)
            bm25_url = f"http://127.0.0.1:{bm25_port}"
            bm25.wait_until(lambda: gateway_answers(bm25_url), 120)
            baseline = Load(bm25_url, queries, clients)
            baseline.phase = "BM25 only"
            baseline.start()
            tick("BM25 only")
            baseline.stop()
            bm25.stop()
        report.phases = phase_rows(load.searches + baseline.searches)
        report.attacks = measure_attacks(url, gateway.process.pid)
        report.queue_bound = measure_queue_bound(settings, queries, window, sends)
    return report


def first_reranked_after(load: Load, ready: float, timeout: float) -> float:
    """Seconds from ``ready`` until the first search sent after it was reranked (-1: none within ``timeout``)."""
    while time.monotonic() - ready < timeout:
        answered = [s.sent + s.ms / 1000 for s in list(load.searches) if s.outcome == "reranked" and s.sent >= ready]
        if answered:
            return min(answered) - ready
        time.sleep(0.1)
    return -1.0


class PhaseClock:
    """A progress bar over the phases; ``tick(name)`` waits out a phase's seconds (from ``since``)."""

    def __init__(self, phase_s: float) -> None:
        from tqdm import tqdm

        self.phase_s, self.bar = phase_s, tqdm(total=len(PHASES), desc="chaos", unit="phase")

    def __enter__(self) -> Callable[..., None]:
        def tick(name: str, since: float | None = None) -> None:
            self.bar.set_postfix_str(name)
            time.sleep(max(self.phase_s - (time.monotonic() - since if since else 0.0), 0.0))
            self.bar.update(1)

        return tick

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def print_report(report: Report) -> None:
    """The figures as tables."""
    header = report.header
    click.echo(
        f"{header['machine']} | {header['clients']} clients, {header['phase_s']:g} s a phase, "
        f"{header['queries']} dev queries"
    )
    click.echo(
        f"{'phase':<18} {'searches':>8} {'failed':>6} {'waited':>6} {'skipped':>7} {'reranked':>8} "
        f"{'unasked':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'skipped p99':>11}"
    )
    for row in report.phases:
        skipped = f"{row['skipped_p99_ms']:.1f}" if row["skipped_p99_ms"] is not None else "-"
        click.echo(
            f"{row['phase']:<18} {row['searches']:>8} {row['failed']:>6} {row['waited']:>6} "
            f"{row['skipped']:>7} {row['reranked']:>8} {row['unasked']:>7} {row['p50_ms']:>8.1f} "
            f"{row['p99_ms']:>8.1f} {row['max_ms']:>8.1f} {skipped:>11}"
        )
    click.echo(
        "fell back = waited (for a worker, until the deadline) + skipped (breaker open, at once); "
        "unasked: no model asked (a query without hits, or the BM25-only gateway)"
    )
    rows = {row["phase"]: row for row in report.phases}
    if rows.get("worker killed", {}).get("skipped_p99_ms") and "BM25 only" in rows:
        ratio = rows["worker killed"]["skipped_p99_ms"] / rows["BM25 only"]["p99_ms"]
        click.echo(f"p99 of searches the breaker skipped (worker killed) / p99 of the BM25-only gateway: {ratio:.2f}")
    for name, value in report.events.items():
        click.echo(f"{name}: {value:.1f}")
    queued = report.queue_after_worker_killed
    click.echo(f"left on the queue after the worker-killed phase: {queued['tasks']} tasks, {queued['bytes']} bytes")
    click.echo(f"{'attack':<32} {'status':>8} {'gateway CPU ms':>15}")
    for row in report.attacks:
        click.echo(f"{row['attack']:<32} {','.join(map(str, row['status'])):>8} {row['cpu_ms']:>15.1f}")
    bound = report.queue_bound
    click.echo(
        f"queue bound: {bound['sends']} sends to a queue without a worker in {bound['seconds']:.1f} s, "
        f"{bound['refused_by_cap']} refused by the cap of {bound['cap']}: {bound['tasks_left']} tasks, "
        f"{bound['bytes_left']} bytes left (largest task {bound['largest_task_bytes']} bytes)"
    )


@click.command(name="chaos")
@click.option(
    "--clients",
    default=16,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Searches in flight at once, without pause.",
)
@click.option(
    "--phase-s", default=10.0, show_default=True, type=click.FloatRange(1, 600), help="Seconds each phase lasts."
)
@click.option(
    "--window",
    default=500,
    show_default=True,
    type=click.IntRange(1, MAX_WINDOW),
    help="BM25 hits per task in the queue-bound run (the gateway's ESRR_GATEWAY_WINDOW).",
)
@click.option(
    "--outage-sends",
    default=12_000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Tasks sent with no worker in the queue-bound run (12,000: 10 minutes at 20 searches/s).",
)
@click.option(
    "--queries",
    default=324,
    show_default=True,
    type=click.IntRange(min=1),
    help="Dev queries searched, the first ones by id.",
)
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the services' logs go (default: a temporary folder, named at the end).",
)
@json_out_option("Also write the figures as JSON.")
def bench_chaos(
    clients: int,
    phase_s: float,
    window: int,
    outage_sends: int,
    queries: int,
    data: Path | None,
    log_dir: Path | None,
    json_out: Path | None,
) -> None:
    """Searches under load while the worker is killed and the broker stopped: failed, fell back, latency."""
    from es_rerank.cli_options import load_settings
    from es_rerank.settings import BrokerSettings

    settings = load_settings(BrokerSettings)
    texts = dev_query_texts(data, settings, queries)
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="esrr-chaos-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    report = run_chaos(settings, texts, clients, phase_s, window, outage_sends, log_dir)
    print_report(report)
    click.echo(f"services' logs: {log_dir}")
    if json_out is not None:
        json_out.write_text(json.dumps(report.__dict__, indent=2), encoding="utf-8")
