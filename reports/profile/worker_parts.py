"""Where a served CPU worker's time per task goes: its threads' CPU, and the parts of Celery, kombu and ours inside.

Starts ``esrr worker start`` (the code of ``--code``, default this checkout; the environment's ``ESRR_*``, with
``ESRR_QUEUE`` given ``-parts`` added) in a process that first wraps each part below to add its thread CPU
(inclusive: a part inside another counts in both), sends it the gateway's payloads of the NFCorpus dev queries
through the gateway's sender, ``--in-flight`` at a time, ``--rounds`` times after a warm-up, then prints each
thread's CPU per task (``schedstat``) and each part's.

    python reports/profile/worker_parts.py --rounds 2 [--code /tmp/old]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PARTS = [  # (module, owner or "", attribute, label)
    ("kombu.transport.redis", "Channel", "_brpop_read", "main: a message's intake (_brpop_read)"),
    ("worker.poison", "", "envelope_problem", "main:   the poison screen"),
    ("kombu.transport.redis", "QoS", "append", "main:   kombu's unacked copy (QoS.append)"),
    ("worker.redis_channel", "ItemCopy", "__call__", "main:   the unacked copy, the item's text (ItemCopy)"),
    ("kombu.message", "Message", "decode", "main:   the body's JSON"),
    ("celery.worker.request", "Request", "__init__", "main:   Celery's Request"),
    ("kombu.transport.redis", "Channel", "_brpop_start", "main: BRPOP sent"),
    ("celery.concurrency.base", "", "apply_target", "pool: a task (apply_target)"),
    ("worker.tasks", "", "decode", "pool:   payload decode"),
    ("worker.runtime", "Runtime", "prepare", "pool:   prepare"),
    ("worker.tasks", "", "result_or_cancel", "pool:   waiting for the batcher"),
    ("celery.backends.redis", "RedisBackend", "_store_result", "pool:   the result stored"),
    ("celery.backends.base", "Backend", "encode", "pool:     its JSON"),
    ("celery.backends.redis", "RedisBackend", "set", "pool:     SETEX + PUBLISH"),
    ("celery.app.trace", "", "saferepr", "pool:   Celery's repr of the result"),
    ("kombu.transport.redis", "QoS", "ack", "pool:   the ack (QoS.ack)"),
    ("worker.batching", "MicroBatcher", "_run", "batcher: a batch"),
    ("worker.scorer", "DeltaScorer", "score_many", "batcher:   the forward (score_many)"),
    ("logging", "Logger", "handle", "any: log records handled"),
    ("redis", "Redis", "__init__", "any: a new redis.Redis"),
]


def instrument(control: Path) -> None:
    """Wrap the parts; a thread answers ``reset`` / ``dump`` written into ``control`` (dump: ``control``.json)."""
    import importlib

    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    lock, local = threading.Lock(), threading.local()

    def wrap(owner: Any, attribute: str, label: str) -> None:
        original = getattr(owner, attribute)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            active = local.__dict__.setdefault("active", set())
            if label in active:
                return original(*args, **kwargs)
            active.add(label)
            started = time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                active.discard(label)
                with lock:
                    spent[label][0] += (time.thread_time_ns() - started) / 1e6
                    spent[label][1] += 1

        setattr(owner, attribute, wrapper)

    for module, owner, attribute, label in PARTS:
        try:
            imported = importlib.import_module(module)
        except ImportError:  # an older tree without the module
            continue
        wrap(getattr(imported, owner) if owner else imported, attribute, label)

    def threads_ns() -> dict[str, int]:
        names = {str(thread.native_id): thread.name for thread in threading.enumerate()}
        found = {}
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            found[names.get(tid, tid)] = int(Path(f"/proc/{os.getpid()}/task/{tid}/schedstat").read_text().split()[0])
        return found

    def serve() -> None:
        base = threads_ns()
        while True:
            time.sleep(0.2)
            command = control.read_text().strip() if control.exists() else ""
            if command == "reset":
                with lock:
                    spent.clear()
                base = threads_ns()
            elif command == "dump":
                now = threads_ns()
                with lock:
                    data = {"parts": dict(spent), "threads": {k: (v - base.get(k, 0)) / 1e6 for k, v in now.items()}}
                control.with_suffix(".json").write_text(json.dumps(data), encoding="utf-8")
            if command:
                control.write_text("", encoding="utf-8")

    threading.Thread(target=serve, name="parts-control", daemon=True).start()


@click.group(invoke_without_command=True)
@click.option("--code", type=click.Path(exists=True, file_okay=False, path_type=Path), default=REPO)
@click.option("--queries", default=324, show_default=True, help="The first dev queries (each with a window).")
@click.option("--rounds", default=2, show_default=True, help="Timed passes over the payloads.")
@click.option("--in-flight", default=4, show_default=True, help="Tasks sent at a time.")
@click.pass_context
def main(context: click.Context, code: Path, queries: int, rounds: int, in_flight: int) -> None:
    """Run an instrumented worker, load it, print where its CPU went per task."""
    if context.invoked_subcommand is not None:
        return
    sys.path.insert(0, str(HERE))
    from ab_workers import scores_of
    from micro_worker import recorded_payloads

    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description
    from es_rerank.ranking.broker import client_app
    from es_rerank.ranking.dispatch import WorkerReranker

    settings = load_settings(GatewaySettings)
    queue = f"{settings.queue}-parts"
    payloads = recorded_payloads(queries)
    with tempfile.TemporaryDirectory() as scratch:
        control, log = Path(scratch) / "control", Path(scratch) / "worker.log"
        env = {**os.environ, "PYTHONPATH": f"{code}", "ESRR_QUEUE": queue}
        command = [sys.executable, str(Path(__file__).resolve()), "worker", str(control), "worker", "start"]
        with open(log, "wb") as out:
            process = subprocess.Popen(command, cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT)
        reranker = WorkerReranker(client_app(settings), queue, 30.0, settings.lex_features)
        try:
            while b"ready." not in log.read_bytes():
                if process.poll() is not None:
                    raise click.ClickException(log.read_text(errors="replace")[-3000:])
                time.sleep(0.2)
            for payload in payloads[:30]:
                scores_of(reranker, payload)
            control.write_text("reset", encoding="utf-8")
            time.sleep(0.6)
            with ThreadPoolExecutor(in_flight) as pool:
                for _ in range(rounds):
                    list(pool.map(scores_of, [reranker] * len(payloads), payloads))
            control.write_text("dump", encoding="utf-8")
            while not control.with_suffix(".json").exists():
                time.sleep(0.1)
            data = json.loads(control.with_suffix(".json").read_text(encoding="utf-8"))
        finally:
            reranker.close()
            process.terminate()
            process.wait(30)
    tasks = rounds * len(payloads)
    threads = data["threads"]
    click.echo(
        f"{machine_description()} | {code} | {tasks} tasks ({len(payloads)} dev queries' payloads x {rounds}), "
        f"{in_flight} in flight; CPU per task, ms"
    )
    click.echo(f"{'the worker, all threads':<48} {sum(threads.values()) / tasks:7.3f}")
    for name, ms in sorted(threads.items(), key=lambda item: -item[1]):
        if ms / tasks >= 0.01:
            click.echo(f"  thread {name:<39} {ms / tasks:7.3f}")
    for *_, label in PARTS:
        ms, calls = data["parts"].get(label, (0.0, 0))
        click.echo(f"{label:<48} {ms / tasks:7.3f}  ({calls / tasks:.2f} calls a task)")


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("control", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(control: Path, args: tuple[str, ...]) -> None:
    """(internal) ``esrr ARGS`` with the parts wrapped first."""
    import worker.tasks  # noqa: F401  # the task module, whose names are wrapped

    instrument(control)
    from es_rerank.cli import main as esrr

    sys.argv = ["esrr", *args]
    esrr()


if __name__ == "__main__":
    main()
