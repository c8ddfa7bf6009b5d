"""Where a CPU worker's time per scoring task goes (thread CPU, in one process, on the gateway's own messages).

The NFCorpus dev queries' windows are turned into the bytes the gateway pushes (``build_request``, ``encode``,
``task_message``: what ``RedisSender`` sends), then each message goes through the steps the worker takes for it,
each step timed in the thread's CPU:

- ``screen``: the poison screen's look at the envelope (``worker.poison.envelope_problem``, run on each BRPOP);
- ``envelope``: kombu's JSON of the envelope (``Channel._brpop_read``);
- ``body``: Celery's JSON of the task's body (``Message.decode``: the payload, ``[args, kwargs, embed]``);
- ``decode``: ``es_rerank.payload.decode`` (base64, the checks);
- ``prepare``: ``Runtime.prepare`` (statistics ids to embedding rows);
- ``forward``: ``DeltaScorer.score_many`` on the one request, and inside it ``check`` (``_check``), ``plan``
  (``SparsePlan.build``), ``words`` (``_word_contributions``: the Delta stage per distinct word), ``head``
  (pooling's dense layers); the convolutions are the rest;
- ``result``: the task's result dict, its JSON as Celery's Redis backend stores it, and the ``saferepr`` of it
  that Celery's tracer makes for its log line.

What is not here is Celery's own machinery per task (BRPOP, the request object, the pool's hand-off, the unacked
bookkeeping, the ack, the result's SET and PUBLISH): ``ab_workers.py`` measures whole workers.

    python reports/profile/micro_worker.py split --queries 324

with the ``ESRR_*`` environment of a served home (README.md, "Set-up"), ``ESRR_DEVICE=cpu``,
``ESRR_TORCH_THREADS=1``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np


@contextmanager
def timed(owner: Any, attribute: str, label: str, spent: dict[str, float]) -> Iterator[None]:
    """``owner.attribute`` wrapped to add its thread CPU ms to ``spent[label]``."""
    original = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += (time.thread_time_ns() - started) / 1e6

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def recorded_payloads(queries: int) -> list[dict[str, Any]]:
    """The payloads the gateway sends for the first ``queries`` dev queries (every window, full or not)."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.payload import PayloadError, build_request, encode

    settings = load_settings(GatewaySettings)
    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    payloads = []
    for text in dev_query_texts(None, settings, queries):
        hits = text_hits(backend, text, settings.gateway_window)
        try:
            request = build_request(text, [hit.terms for hit in hits], backend.stats, settings.lex_features)
        except PayloadError:  # no tokens: the gateway keeps BM25's order and sends nothing
            continue
        if request.n:
            payloads.append(encode(request))
    return payloads


def message_of(payload: dict[str, Any], queue: str) -> bytes:
    """The bytes ``RedisSender`` pushes for ``payload`` (a fresh task id each time)."""
    import uuid

    from es_rerank.payload import TASK_NAME
    from es_rerank.ranking.dispatch import payload_summary
    from es_rerank.ranking.task_message import TaskHeaders, message_fields, task_message

    task_id = str(uuid.uuid4())
    headers = TaskHeaders(task_id, TASK_NAME, queue, 10.0, payload_summary(payload), "gen@micro", "reply")
    return task_message(payload, message_fields(headers))


def summarise(spent: dict[str, list[float]]) -> list[str]:
    """One line per step: p50 and mean ms, and its share of the summed means."""
    total = sum(float(np.mean(ms)) for label, ms in spent.items() if not label.startswith("  "))
    lines = []
    for label, ms in spent.items():
        values = np.array(ms)
        lines.append(
            f"{label:<24} p50 {np.median(values):7.3f} ms  mean {values.mean():7.3f} ms  "
            f"{100 * values.mean() / total:5.1f}% of the steps"
        )
    lines.append(f"{'steps, summed':<24} mean {total:.3f} ms")
    return lines


@click.group()
def main() -> None:
    """A CPU worker's steps per scoring task."""


@main.command()
@click.option("--queries", default=324, show_default=True, help="The first dev queries (each with a window).")
@click.option("--rounds", default=2, show_default=True, help="Passes over the messages; the first is a warm-up.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the table here too.")
def split(queries: int, rounds: int, out: Path | None) -> None:
    """Each step's thread CPU per task: p50, mean."""
    import torch
    from celery.utils.saferepr import saferepr
    from kombu.serialization import loads as body_loads
    from kombu.transport.virtual import Channel
    from kombu.utils.json import loads as kombu_loads

    from es_rerank.machine import machine_description
    from es_rerank.payload import RESULT_VERSION, decode
    from worker import scorer as scorer_module
    from worker.celery_app import app
    from worker.poison import envelope_problem
    from worker.runtime import get_runtime

    runtime = get_runtime(app.esrr_settings)
    scorer = runtime.scorer
    backend = app.backend
    messages = [message_of(payload, "micro") for payload in recorded_payloads(queries)]

    def task(item: bytes, spent: dict[str, float]) -> None:
        def step(label: str, run: Callable[[], Any]) -> Any:
            started = time.thread_time_ns()
            value = run()
            spent[label] += (time.thread_time_ns() - started) / 1e6
            return value

        step("screen", lambda: envelope_problem(item, Channel.codecs))
        envelope = step("envelope", lambda: kombu_loads(item.decode("utf-8")))
        args = step("body", lambda: body_loads(envelope["body"], envelope["content-type"], "utf-8"))
        request = step("decode", lambda: decode(args[0][0]))
        prepared = step("prepare", lambda: runtime.prepare(request))
        scores = step("forward", lambda: scorer.score_many([prepared])[0])

        def result() -> Any:
            value = {"v": RESULT_VERSION, "scores": scores.tolist(), "model": "m", "took_ms": 1.0, "batch": 1}
            meta = {"status": "SUCCESS", "result": value, "traceback": None, "children": [], "date_done": "x"}
            backend.encode(meta)
            saferepr(value, 1024)

        step("result", result)

    spent: dict[str, list[float]] = defaultdict(list)
    with ExitStack() as stack:
        inner: dict[str, float] = defaultdict(float)
        for owner, attribute, label in [
            (scorer_module.DeltaScorer, "_check", "  check"),
            (scorer_module.SparsePlan, "build", "  plan"),
            (scorer_module.DeltaScorer, "_word_contributions", "  words"),
            (scorer_module.DeltaScorer, "_head", "  head"),
        ]:
            stack.enter_context(timed(owner, attribute, label, inner))
        for number in range(rounds):
            for item in messages:
                parts: dict[str, float] = defaultdict(float)
                inner.clear()
                task(item, parts)
                if number == 0:
                    continue
                for label, ms in parts.items():
                    spent[label].append(ms)
                    if label == "forward":
                        for sub, sub_ms in inner.items():
                            spent[sub].append(sub_ms)
                        spent["  convolutions"].append(ms - sum(inner.values()))
    order = ["screen", "envelope", "body", "decode", "prepare", "forward", "  check", "  plan", "  words"]
    order += ["  convolutions", "  head", "result"]
    table = summarise({label: spent[label] for label in order})
    header = (
        f"{machine_description()} | {len(messages)} dev queries' messages x {rounds - 1} timed rounds, "
        f"torch threads {torch.get_num_threads()}, thread CPU per task"
    )
    text = "\n".join([header, *table])
    click.echo(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")


@main.command()
@click.option("--queries", default=324, show_default=True, help="The first dev queries (each with a window).")
def repeats(queries: int) -> None:
    """How many of the windows' documents repeat another of their window (the same ``doc_len`` token ids)."""
    from es_rerank.payload import decode

    documents = distinct = 0
    for payload in recorded_payloads(queries):
        docs = decode(payload).doc_tokens
        documents += docs.shape[0]
        distinct += len(np.unique(docs, axis=0))
    click.echo(
        f"{documents} documents in the windows, {distinct} distinct in theirs: {1 - distinct / documents:.1%} repeat"
    )


if __name__ == "__main__":
    main()
