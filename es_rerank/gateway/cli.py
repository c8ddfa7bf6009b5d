"""``esrr serve``: the HTTP gateway, an Elasticsearch-shaped ``_search`` reranked by the workers."""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING

import click

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d]: %(message)s"

if TYPE_CHECKING:
    from flask import Flask

    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.served import ServedSearch


@click.command()
@click.option("--host", default=None, help="Address to listen on [ESRR_GATEWAY_HOST, default 127.0.0.1].")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port to listen on [ESRR_GATEWAY_PORT, default 8000]."
)
@click.option(
    "--threads",
    type=click.IntRange(1, 256),
    default=None,
    help="Requests served at once, per process [ESRR_GATEWAY_THREADS, default 8].",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=None,
    help="Gateway processes sharing the port [ESRR_GATEWAY_PROCESSES, default 1].",
)
def serve(host: str | None, port: int | None, threads: int | None, processes: int | None) -> None:
    """Serve _search over HTTP: BM25 top-window, scored by running workers (`esrr worker start`).

    Without an answer from a worker within ESRR_SCORE_DEADLINE_S a search keeps BM25's
    order and says why in its `esrr.fallback`; after ESRR_BREAKER_FAILURES such searches
    in a row the workers are skipped for ESRR_BREAKER_COOLDOWN_S. ESRR_GATEWAY_RERANK=false
    never asks one.
    """
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import MAX_BODY_BYTES
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.gateway.experiment import load_experiment
    from es_rerank.gateway.server import ServeError, ensure_open_files, listening_socket, supervise
    from es_rerank.ranking.experiment import ExperimentError

    settings = load_settings(
        GatewaySettings, gateway_host=host, gateway_port=port, gateway_threads=threads, gateway_processes=processes
    )
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    served = served_search(settings)  # a set-up that cannot serve fails here, once, with its fix
    try:
        load_experiment(settings, served.pipeline())  # ESRR_EXPERIMENT's votes read and checked, once
    except ExperimentError as error:
        served.close()
        raise click.ClickException(str(error)) from None
    try:
        ensure_open_files(settings.gateway_connection_limit)
        sock = listening_socket(settings.gateway_host, settings.gateway_port)
    except ServeError as error:
        served.close()
        raise click.ClickException(str(error)) from None
    except OSError as error:  # the port is taken, the address is not this machine's or no address
        resolves = not isinstance(error, socket.gaierror) and error.strerror
        reason = error.strerror if resolves else "not an address or a host name that resolves"
        served.close()
        raise click.ClickException(
            f"cannot listen on {settings.gateway_host}:{settings.gateway_port} "
            f"({reason}); choose another --port or --host"
        ) from None
    options = {
        "threads": settings.gateway_threads,
        "connection_limit": settings.gateway_connection_limit,
        "channel_timeout_s": settings.gateway_channel_timeout_s,
        "max_body_bytes": MAX_BODY_BYTES,
    }
    if settings.gateway_processes == 1:
        # Opened again with its files leased, once it is sure to serve: a start that fails takes no SIGIO handler.
        served.close()
        _serve_one(settings, _leased_served_search(settings), sock, options)
        return
    served.close()  # each process opens its own, after the fork
    status = supervise(
        settings.gateway_processes, lambda: _serve_one(settings, _leased_served_search(settings), sock, options)
    )
    sock.close()
    if status:
        raise click.ClickException("the gateway processes exited as soon as they started; their log above says why")


def served_search(settings: GatewaySettings) -> ServedSearch:
    """The served pipeline that ``settings`` describe (``ServedSearch``): scored by the workers, or not reranked
    (``ESRR_GATEWAY_RERANK=false``); ``es_rerank.errors.SetupError`` names what is missing (``esrr`` shows it as
    a CLI error)."""
    from es_rerank.ranking.assemble import PipelineOptions, Switch, assemble
    from es_rerank.ranking.served import ServedSearch

    via_worker = settings.gateway_rerank and settings.gateway_window > 0
    options = PipelineOptions(
        settings.gateway_window,
        rerank=Switch.AUTO if via_worker else Switch.OFF,
        keep_vectors=True,
        via_worker=via_worker,
    )
    return ServedSearch(assemble(settings, options), settings.gateway_index_check_s)


def _leased_served_search(settings: GatewaySettings) -> ServedSearch:
    """``served_search`` in a forked gateway process, its index files leased (``es_rerank.held_files``)."""
    from es_rerank.held_files import watch_leases

    watch_leases()
    return served_search(settings)


def heavy_searches_app(settings: GatewaySettings) -> Flask:
    """The app a process of heavy searches runs them with (``heavy_process``): the gateway's, its files leased."""
    from es_rerank.gateway.app import create_app

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)  # a spawned process: its log as the gateway's
    return create_app(_leased_served_search(settings), settings)


def _serve_one(settings: GatewaySettings, served: ServedSearch, sock: socket.socket, options: dict) -> None:
    """One gateway process: the app around ``served``, served on the (shared) listening ``sock``."""
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.events import close_events
    from es_rerank.gateway.server import serve_on, waitress_options
    from es_rerank.gateway.state import gateway_state

    address = f"http://{settings.gateway_host}:{settings.gateway_port}"
    pipeline = served.pipeline()
    via_worker = settings.gateway_rerank and settings.gateway_window > 0
    scored = f"scored by the workers on {settings.queue!r}" if via_worker else "not reranked"
    click.echo(
        f"es-rerank gateway (pid {os.getpid()}) on {address}: index {pipeline.backend.index}, window "
        f"{settings.gateway_window}, {scored}; try: curl '{address}/_search?q=green+tea'",
        err=True,
    )
    sys.stderr.flush()
    app = create_app(served, settings, heavy_app=functools.partial(heavy_searches_app, settings))
    try:
        serve_on(app, sock, waitress_options(**options))
    finally:
        close_events(app)  # here, not at exit: a forked gateway process ends with os._exit, which skips atexit
        gateway_state(app).heavy_lane.close()
        served.close()
