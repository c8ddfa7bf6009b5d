"""``esrr bench roundtrip``: ``rerank.score`` as a client sees it, through the broker.

``esrr bench score`` times the scorer alone. This times what a caller waits for:
payload out through the broker, the worker's decode, micro-batching and scoring,
the result back over the result backend, against a worker that is already running
(``esrr worker start``) on the configured queue. The requests are real: the
NFCorpus dev queries, each with its BM25 top-``window`` from the served embedded
index, built and encoded before the clock starts. Like the gateway, this client
never imports torch.

Each concurrency level sends every request once from that many client threads;
latency is per request (send to result), throughput is requests over wall time.
The worker reports its own time per task (``took_ms``), so the rest of the round
trip is what the broker and the (de)serialisation cost.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from es_rerank.backends.base import MAX_WINDOW, text_hits
from es_rerank.cli_options import json_out_option
from es_rerank.lex import LEX3
from es_rerank.machine import machine_description
from es_rerank.payload import TASK_NAME, build_request, encode


@dataclass
class RoundTrips:
    """One concurrency level: latencies in ms and what the worker reported."""

    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    worker_p50_ms: float  # the task's own time (decode, batch wait, scoring)
    mean_batch: float  # requests that shared a forward pass, on average

    @property
    def per_second(self) -> float:
        """Requests answered per second of wall time."""
        return self.requests / self.seconds


def _round_trip(client: Any, queue: str, payload: dict, timeout: float) -> dict:
    """One task's result. One that fails or times out stops being tracked now: left to
    ``AsyncResult.__del__`` at interpreter exit, its unsubscribe would print a traceback."""
    pending = client.send_task(TASK_NAME, args=[payload], queue=queue)
    try:
        return pending.get(timeout=timeout)
    except BaseException:
        client.backend.remove_pending_result(pending)
        raise


def measure_round_trips(
    client: Any, queue: str, payloads: Sequence[dict], concurrency: int, timeout: float
) -> RoundTrips:
    """Send every payload once from ``concurrency`` threads; latency of each, throughput of all."""
    latencies: list[float] = []
    results: list[dict] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    shares = [payloads[i::concurrency] for i in range(concurrency)]

    def send_all(share: Sequence[dict]) -> None:
        for payload in share:
            sent = time.perf_counter()
            try:
                result = _round_trip(client, queue, payload, timeout)
            except BaseException as error:
                with lock:
                    errors.append(error)
                return
            with lock:
                latencies.append((time.perf_counter() - sent) * 1e3)
                results.append(result)

    threads = [threading.Thread(target=send_all, args=(share,)) for share in shares if share]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return RoundTrips(
        concurrency,
        len(latencies),
        seconds,
        float(np.percentile(latencies, 50)),
        float(np.percentile(latencies, 99)),
        float(np.percentile([r["took_ms"] for r in results], 50)),
        statistics.fmean(r["batch"] for r in results),
    )


def _levels(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    """``--concurrency``: thread counts, each in 1..256."""
    try:
        levels = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= level <= 256 for level in levels):
        raise click.BadParameter(f"{value!r}: give client thread counts in 1..256, comma-separated (e.g. 1,8)")
    return levels


@click.command(name="roundtrip")
@click.option(
    "--queries",
    default=200,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="NFCorpus dev queries taken, the first by id (those without a BM25 hit are left out).",
)
@click.option(
    "--window", default=500, show_default=True, type=click.IntRange(1, MAX_WINDOW), help="BM25 hits per request."
)
@click.option(
    "--concurrency",
    "levels",
    default="1,8",
    show_default=True,
    callback=_levels,
    help="Client threads sending at once, one level each, comma-separated.",
)
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Longest wait for one result, in seconds.",
)
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@json_out_option("Also write the rows as JSON.")
def bench_roundtrip(
    queries: int, window: int, levels: list[int], timeout: float, data: Path | None, json_out: Path | None
) -> None:
    """Round-trip latency and throughput of rerank.score against a running worker."""
    from celery.exceptions import TimeoutError as CeleryTimeoutError
    from kombu.exceptions import OperationalError
    from kombu.utils.url import maybe_sanitize_url

    from es_rerank.backends import BackendError, open_backend
    from es_rerank.cli_options import load_settings
    from es_rerank.payload import PayloadError, WorkerSetupError
    from index_setup.nfcorpus import NFCorpus
    from worker.celery_app import create_app
    from worker.settings import WorkerSettings

    settings = load_settings(WorkerSettings)
    payloads = []
    try:
        nfcorpus = NFCorpus.locate(data, settings)
        backend = open_backend(settings)
        for text in [text for _, text in sorted(nfcorpus.queries("dev").items())][:queries]:
            hits = text_hits(backend, text, window)
            try:
                request = build_request(text, [h.terms for h in hits], backend.stats, LEX3)
            except PayloadError:  # a query without tokens: nothing to rerank by
                continue
            if hits:  # no hit, nothing to rerank: a caller would not send it
                payloads.append(encode(request))
    except (BackendError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if not payloads:
        raise click.ClickException(f"none of the first {queries} dev queries has a BM25 hit; raise --queries")
    broker = maybe_sanitize_url(settings.broker_url)
    client = create_app(settings)
    try:
        answered = client.control.ping(timeout=2.0)
    except OperationalError as error:
        raise click.ClickException(f"cannot reach the broker at {broker} ({error}); check ESRR_BROKER_URL") from None
    if not answered:
        raise click.ClickException(
            f"no worker answers on {broker}; start one with `esrr worker start` (queue {settings.queue!r})"
        )
    header = {
        "machine": machine_description(),
        "broker": settings.broker_scheme,
        "queue": settings.queue,
        "requests": len(payloads),
        "window": window,
        "payload_kb": round(statistics.fmean(len(json.dumps(p)) for p in payloads) / 1024, 1),
    }
    click.echo(
        f"{header['machine']} | broker {header['broker']} | {len(payloads)} dev queries x BM25 top-{window}"
        f" | payload {header['payload_kb']} KB"
    )
    try:
        _round_trip(client, settings.queue, payloads[0], timeout)  # warm-up
        rows = [measure_round_trips(client, settings.queue, payloads, level, timeout) for level in levels]
    except CeleryTimeoutError:
        raise click.ClickException(
            f"no result within {timeout} s: is a worker consuming queue {settings.queue!r} (ESRR_QUEUE)?"
        ) from None
    except (PayloadError, WorkerSetupError) as error:
        raise click.ClickException(f"the worker refused a request: {error}") from None
    finally:
        client.close()
    click.echo(f"{'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'worker p50':>10} {'batch':>6} {'req/s':>7}")
    for row in rows:
        click.echo(
            f"{row.concurrency:>7} {row.p50_ms:>8.2f} {row.p99_ms:>8.2f} {row.worker_p50_ms:>10.2f} "
            f"{row.mean_batch:>6.2f} {row.per_second:>7.1f}"
        )
    if json_out is not None:
        json_out.write_text(
            json.dumps({**header, "rows": [{**asdict(r), "per_second": r.per_second} for r in rows]}, indent=2),
            encoding="utf-8",
        )
