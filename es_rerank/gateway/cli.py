"""``esrr serve``: the HTTP gateway, an Elasticsearch-shaped ``_search`` reranked by the workers."""

from __future__ import annotations

import logging

import click


@click.command()
@click.option("--host", default=None, help="Address to listen on [ESRR_GATEWAY_HOST, default 127.0.0.1].")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port to listen on [ESRR_GATEWAY_PORT, default 8000].")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="Requests served at once [ESRR_GATEWAY_THREADS, default 8].")
def serve(host: str | None, port: int | None, threads: int | None) -> None:
    """Serve _search over HTTP: BM25 top-window, scored by running workers (`esrr worker start`).

    Without an answer from a worker within ESRR_SCORE_DEADLINE_S a search keeps BM25's
    order and says why in its `esrr.fallback`; ESRR_GATEWAY_RERANK=false never asks one.
    """
    import waitress

    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.served import ServedSearch
    from es_rerank.ranking.assemble import served_pipeline

    settings = load_settings(GatewaySettings, gateway_host=host, gateway_port=port, gateway_threads=threads)
    window = settings.gateway_window
    via_worker = settings.gateway_rerank and window > 0
    pipeline = served_pipeline(settings, window, rerank=None if via_worker else False, keep_vectors=True,
                               via_worker=via_worker)
    served = ServedSearch(pipeline, settings.gateway_index_check_s)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = waitress.create_server(create_app(served, settings), host=settings.gateway_host,
                                        port=settings.gateway_port, threads=settings.gateway_threads,
                                        ident="es-rerank")
    except (OSError, ValueError) as error:  # the port is taken, the address is not this machine's or no address
        served.close()
        reason = error.strerror if isinstance(error, OSError) else "not an address or a host name that resolves"
        raise click.ClickException(f"cannot listen on {settings.gateway_host}:{settings.gateway_port} "
                                   f"({reason}); choose another --port or --host") from None
    address = f"http://{settings.gateway_host}:{settings.gateway_port}"
    scored = f"scored by the workers on {settings.queue!r}" if via_worker else "not reranked"
    click.echo(f"es-rerank gateway on {address}: index {pipeline.backend.index}, window {window}, {scored}; "
               f"try: curl '{address}/_search?q=green+tea'", err=True)
    try:
        server.run()
    finally:
        served.close()
