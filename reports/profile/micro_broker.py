"""Where the gateway's CPU goes in the broker round trip of a scoring call (thread CPU, inclusive).

On the NFCorpus dev queries whose window is full (500 hits), with the worker and broker of the ``ESRR_*``
environment, each call through ``WorkerReranker`` as served. Each part below is a function of Celery, kombu
or redis-py wrapped to add its own thread CPU (nested parts are counted in their parents too):

    python reports/profile/micro_broker.py split --queries 100 [--direct]

and the whole scoring call through ``RedisSender`` (served) against Celery's path, alternated query by query,
in the calling thread's CPU and the process's (which adds the sender's result reader):

    python reports/profile/micro_broker.py compare --queries 100
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click
import numpy as np

CLOCKS = {"thread": time.thread_time_ns, "process": time.process_time_ns}


@contextmanager
def timed(owner: Any, attribute: str, label: str, spent: dict[str, float]) -> Iterator[None]:
    """``owner.attribute`` wrapped to add its thread CPU ms to ``spent[label]`` (a re-entrant call counts once)."""
    original = getattr(owner, attribute)
    depth = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if depth[0]:
            return original(*args, **kwargs)
        depth[0] += 1
        started = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += (time.thread_time_ns() - started) / 1e6
            depth[0] -= 1

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def celery_parts() -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of each part of Celery's round trip on Redis, outermost first."""
    import celery.app.amqp
    import celery.backends.redis
    import celery.result
    import kombu.messaging
    import kombu.transport.redis

    import es_rerank.ranking.dispatch as dispatch

    return [
        (dispatch.WorkerReranker, "_answer", "round trip (all below)"),
        (dispatch.WorkerReranker, "_send", "send (LLEN, message, LPUSH)"),
        (dispatch, "queued_tasks", "  LLEN of the queue"),
        (celery.app.amqp.AMQP, "as_task_v2", "  task message (headers, expires)"),
        (kombu.messaging.Producer, "_prepare", "  body: JSON of the payload"),
        (kombu.transport.redis.Channel, "_put", "  envelope JSON + client + LPUSH"),
        (kombu.transport.redis, "dumps", "    envelope JSON"),
        (kombu.transport.redis.Channel, "_create_client", "    a new Redis client"),
        (celery.result.AsyncResult, "get", "wait (SUBSCRIBE, read, UNSUBSCRIBE)"),
        (celery.backends.redis.ResultConsumer, "_consume_from", "  SUBSCRIBE"),
        (celery.backends.redis.ResultConsumer, "cancel_for", "  UNSUBSCRIBE"),
        (celery.backends.redis.RedisBackend, "decode_result", "  result JSON"),
        (celery.result.AsyncResult, "forget", "forget (DEL + UNSUBSCRIBE)"),
        (celery.backends.redis.RedisBackend, "delete", "  DEL"),
    ]


def sender_parts() -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of each part of ``RedisSender``'s round trip, outermost first."""
    import es_rerank.ranking.dispatch as dispatch
    import es_rerank.ranking.redis_sender as redis_sender

    return [
        (dispatch.WorkerReranker, "_answer", "round trip (all below)"),
        (redis_sender.RedisSender, "pending", "a task id awaited"),
        (dispatch.WorkerReranker, "_send", "send (message, cap and LPUSH)"),
        (redis_sender, "message_fields", "  headers and properties"),
        (redis_sender, "task_message", "  the message's JSON"),
        (redis_sender.PendingResult, "get", "wait (result JSON)"),
        (redis_sender.RedisSender, "release", "forget (DEL)"),
    ]


def full_windows(settings: Any, queries: int) -> tuple[Any, list[tuple[str, list]]]:
    """The embedded index's statistics and the first ``queries`` dev queries whose BM25 window is full."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    windows = [
        (text, hits)
        for text in dev_query_texts(None, settings, 324)
        if len(hits := text_hits(backend, text, settings.gateway_window)) == settings.gateway_window
    ][:queries]
    return backend.stats, windows


def served_reranker(settings: Any, direct: bool = True) -> Any:
    """The gateway's ``WorkerReranker`` as ``esrr serve`` builds it; ``direct`` False: through Celery's path."""
    from es_rerank.ranking.assemble import served_pipeline
    from es_rerank.ranking.dispatch import WorkerReranker

    served = served_pipeline(settings, settings.gateway_window, rerank=None, keep_vectors=True, via_worker=True)
    reranker = served.reranker
    if direct:
        return reranker
    return WorkerReranker(
        reranker.client,
        reranker.queue,
        reranker.deadline_s,
        reranker.lex_names,
        max_queued=reranker.max_queued,
        direct=False,
    )


@click.group()
def main() -> None:
    """The broker round trip's CPU on the gateway's side."""


@main.command()
@click.option("--queries", default=100, show_default=True, help="Full windows to use, the first dev queries'.")
@click.option("--direct/--celery", default=False, show_default=True, help="Split RedisSender's path, or Celery's.")
def split(queries: int, direct: bool) -> None:
    """Each part's thread CPU per call (mean, p50 of the whole call), the parts of Celery's path or ours."""
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description

    settings = load_settings(GatewaySettings)
    stats, windows = full_windows(settings, queries)
    reranker = served_reranker(settings, direct=direct)
    for text, hits in windows[:3]:
        reranker(text, hits, stats)  # connections open, the worker warm
    spent: dict[str, float] = defaultdict(float)
    calls = []
    with ExitStack() as stack:
        for owner, attribute, label in sender_parts() if direct else celery_parts():
            spent[label] = 0.0
            stack.enter_context(timed(owner, attribute, label, spent))
        for text, hits in windows:
            started = time.thread_time_ns()
            reranker(text, hits, stats)
            calls.append((time.thread_time_ns() - started) / 1e6)
    whole = np.array(calls)
    click.echo(f"{machine_description()} | {len(windows)} dev queries with a full window, thread CPU per call")
    click.echo(f"{'whole scoring call':<40} mean {whole.mean():.3f} ms, p50 {np.median(whole):.3f}")
    for label, ms in spent.items():
        click.echo(f"{label:<40} mean {ms / len(windows):.3f} ms")


def report(pair: str, spent: dict[str, np.ndarray]) -> str:
    """One line: each variant's p50 and mean, and the ratio of the means (first / second)."""
    (first, a), (second, b) = spent.items()
    return (
        f"{pair:<22} {first}: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | {second}: p50 {np.median(b):.3f} ms, "
        f"mean {b.mean():.3f} | ratio of the means {a.mean() / b.mean():.2f}, "
        f"of the p50 {np.median(a) / np.median(b):.2f}"
    )


def paired(variants: dict[str, Callable[[Any], Any]], items: list[Any]) -> dict[str, dict[str, np.ndarray]]:
    """Thread and process CPU ms of each variant on each item, the variants taking turns (and turns at going
    first): {"thread": {variant: ms}, "process": {variant: ms}}."""
    spent: dict[str, dict[str, list[float]]] = {clock: {name: [] for name in variants} for clock in CLOCKS}
    names = list(variants)
    for number, item in enumerate(items):
        for name in names if number % 2 == 0 else names[::-1]:
            started = {clock: read() for clock, read in CLOCKS.items()}
            variants[name](item)
            for clock, read in CLOCKS.items():
                spent[clock][name].append((read() - started[clock]) / 1e6)
    return {clock: {name: np.array(ms) for name, ms in by_name.items()} for clock, by_name in spent.items()}


@main.command()
@click.option("--queries", default=100, show_default=True, help="Full windows to use, the first dev queries'.")
@click.option("--rounds", default=1, show_default=True, help="Passes over the windows.")
def compare(queries: int, rounds: int) -> None:
    """The whole scoring call through ``RedisSender`` and through Celery, alternated: thread and process CPU."""
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description

    settings = load_settings(GatewaySettings)
    stats, windows = full_windows(settings, queries)
    direct, celery = served_reranker(settings), served_reranker(settings, direct=False)
    assert direct._sender is not None and celery._sender is None

    def through(reranker: Any) -> Callable[[tuple[str, list]], Any]:
        return lambda window: reranker(window[0], window[1], stats)

    variants = {"RedisSender (served)": through(direct), "Celery": through(celery)}
    for window in windows[:3]:
        for call in variants.values():
            call(window)  # connections open, the worker warm
    click.echo(f"{machine_description()} | {len(windows)} dev queries with a full window x {rounds}, per call")
    items = windows * rounds
    for clock, spent in paired(variants, items).items():
        click.echo(report(f"call, {clock} CPU", spent))
    direct.close()


if __name__ == "__main__":
    main()
