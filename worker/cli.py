"""``esrr worker start``: run the Celery scoring worker with the settings of ``WorkerSettings``.

Equivalent to ``celery -A worker.celery_app worker`` (which reads the same
settings), plus a check of the artifacts before the worker connects: with the
threads or solo pool the model is loaded here, in the process that will score,
and a missing or mismatched checkpoint, embeddings directory or device stops
the command with the fix named. With the prefork pool each child loads the model
after the fork; here the checkpoints, the embeddings directory and the device are
checked without loading the model or initialising CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from es_rerank.payload import WorkerSetupError

if TYPE_CHECKING:
    from celery import Celery


@click.group()
def worker() -> None:
    """Run the Celery scoring worker."""


def _settings(**overrides: object):
    from es_rerank.cli_options import load_settings
    from worker.settings import WorkerSettings

    return load_settings(WorkerSettings, **overrides)


@contextmanager
def _environment_with(overrides: Mapping[str, object]) -> Iterator[None]:
    """``ESRR_*`` with the command-line options in it, for the duration of the block.

    ``worker.celery_app`` builds its app from ``ESRR_*`` when first imported; without
    this, a bad ``ESRR_*`` value that an option overrides would still stop the worker.
    """
    names = {f"ESRR_{name.upper()}": str(value) for name, value in overrides.items() if value is not None}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@worker.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--pool",
    type=click.Choice(["threads", "solo", "prefork"]),
    default=None,
    help="Celery pool (default: ESRR_POOL, else threads: tasks share one model and batch).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=None,
    help="Tasks in flight (default: ESRR_CONCURRENCY, else 8).",
)
@click.option(
    "--loglevel",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default=None,
    help="Log level (default: ESRR_LOGLEVEL, else INFO).",
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def start(pool: str | None, concurrency: int | None, loglevel: str | None, celery_args: tuple[str, ...]) -> None:
    """Start a worker; extra arguments go to `celery worker` (e.g. -n NAME)."""
    overrides = {"pool": pool, "concurrency": concurrency, "loglevel": loglevel}
    settings = _settings(**overrides)
    from kombu.utils.url import maybe_sanitize_url

    with _environment_with(overrides):
        from worker.celery_app import app, celery_config
    from worker.runtime import describe_setup, embeddings_version_dir, get_runtime, load_checkpoints, scoring_device

    app.conf.update(celery_config(settings))  # with the command-line overrides
    app.esrr_settings = settings
    click.echo(
        f"broker: {maybe_sanitize_url(settings.broker_url)}  results: "
        f"{maybe_sanitize_url(settings.result_backend_url)}  queue: {settings.queue}"
    )
    batching = (
        "no batching across tasks: each child runs one"
        if settings.pool == "prefork"
        else f"batches of <= {settings.batch_max_requests} requests / {settings.batch_max_docs} docs, "
        f"wait <= {settings.batch_wait_ms} ms"
    )
    click.echo(f"pool: {settings.pool} x {settings.concurrency}, prefetch 1, acks late; {batching}")
    try:
        if settings.pool == "prefork":  # load in each child after the fork; only check here
            checkpoints = load_checkpoints(settings)
            embeddings = embeddings_version_dir(settings, checkpoints[0].embeddings_version)
            setup = describe_setup(settings, checkpoints, scoring_device(settings), str(embeddings))
        else:
            setup = get_runtime(settings).describe()
        for key, value in setup.items():
            click.echo(f"{key}: {value}")
    except (WorkerSetupError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    # Passed explicitly although celery_config sets them too: `celery worker` defaults
    # --pool to prefork and --loglevel to WARNING whatever the app's configuration says.
    status = _run_celery_worker(
        app,
        [
            "worker",
            "--pool",
            settings.pool,
            "--concurrency",
            str(settings.concurrency),
            "--prefetch-multiplier",
            "1",
            "--loglevel",
            settings.loglevel,
            "--queues",
            settings.queue,
            *celery_args,
        ],
    )
    if status:
        raise click.ClickException(f"the worker stopped with exit status {status}; its log above says why")


def _run_celery_worker(app: Celery, argv: list[str]) -> int:
    """Run `celery ARGV` for ``app`` and return its exit status.

    ``app.worker_main`` runs the same command but drops the status, so a worker that
    stops on an unrecoverable error (Celery logs it as CRITICAL) would exit 0 and look
    like a clean stop to a supervisor.
    """
    from celery.bin.celery import celery

    celery.params[0].default = app  # what Celery.start does: the app for `-A`
    try:
        return celery.main(args=argv, standalone_mode=False) or 0
    except click.exceptions.Exit as stop:
        return stop.exit_code
    finally:
        celery.params[0].default = None
