"""The gateway-side choices of the broker send, each timed against its alternative in one run (thread CPU).

On the NFCorpus dev queries whose window is full (500 hits), with the worker and broker of the ``ESRR_*``
environment; the two variants of each pair alternate query by query, which goes first alternating too.

- ``encode``: the request's payload with the token ids raw (served) or zlib-compressed (before);
- ``call, ids``: the whole scoring call (features, encoding, send, wait, result) with either payload;
- ``call, argsrepr``: the whole call with our short ``argsrepr`` (served) or Celery's repr of the payload;
- ``call, body``: the whole call with the task's body sent as it is (served) or base64ed in kombu's envelope.

    python reports/profile/micro.py --queries 120

The ``argsrepr`` and ``body`` pairs measured Celery's send, which a Redis broker no longer takes
(``es_rerank/ranking/redis_sender.py``, measured by ``micro_broker.py``): their figures in
``micro-body.txt`` and the README are of commit 841026a and are rerun there (``git archive 841026a``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import numpy as np


def paired(variants: dict[str, Callable[[Any], Any]], items: list[Any]) -> dict[str, np.ndarray]:
    """Thread CPU ms of each variant on each item, the variants taking turns (and turns at going first)."""
    spent: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for number, item in enumerate(items):
        for name in names if number % 2 == 0 else names[::-1]:
            started = time.thread_time_ns()
            variants[name](item)
            spent[name].append((time.thread_time_ns() - started) / 1e6)
    return {name: np.array(ms) for name, ms in spent.items()}


@contextmanager
def patched(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    """``owner.attribute`` set to ``value`` inside."""
    original = getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


@click.command()
@click.option("--queries", default=120, show_default=True, help="Full windows to use, the first dev queries'.")
def main(queries: int) -> None:
    """Each pair's thread CPU per query (p50, mean) and the ratio of the means."""
    import es_rerank.ranking.dispatch as dispatch
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description
    from es_rerank.payload import _pack, build_request, encode
    from es_rerank.ranking.assemble import served_pipeline

    settings = load_settings(GatewaySettings)
    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    stats = backend.stats
    windows = [
        (text, hits)
        for text in dev_query_texts(None, settings, 324)
        if len(hits := text_hits(backend, text, settings.gateway_window)) == settings.gateway_window
    ][:queries]

    def reranker_of(**transport_options: Any) -> Any:
        reranker = served_pipeline(
            settings, settings.gateway_window, rerank=None, keep_vectors=True, via_worker=True
        ).reranker
        conf = reranker.client.conf
        conf.broker_transport_options = {**conf.broker_transport_options, **transport_options}
        return reranker

    reranker, base64_body = reranker_of(), reranker_of(body_encoding="base64")
    names = reranker.lex_names

    def zlib_encode(request: Any) -> dict[str, Any]:
        return {**encode(request), "doc_tokens": _pack(request.doc_tokens, "<i4", "zlib")}

    requests = [build_request(text, [hit.terms for hit in hits], stats, names) for text, hits in windows]
    results = {"encode": paired({"raw (served)": encode, "zlib": zlib_encode}, requests)}

    def call(window: tuple[str, list]) -> Any:
        return reranker(window[0], window[1], stats)

    def call_with(attribute: str, value: Any) -> Callable[[Any], Any]:
        def run(window: tuple[str, list]) -> Any:
            with patched(dispatch, attribute, value):
                return call(window)

        return run

    def call_base64(window: tuple[str, list]) -> Any:
        return base64_body(window[0], window[1], stats)

    for window in windows[:3]:
        call(window)  # connections open, the worker warm
        call_base64(window)
    results["call, ids"] = paired({"raw (served)": call, "zlib": call_with("encode", zlib_encode)}, windows)
    results["call, argsrepr"] = paired(
        {"ours (served)": call, "Celery's": call_with("payload_summary", lambda payload: None)}, windows
    )
    results["call, body"] = paired({"as is (served)": call, "base64": call_base64}, windows)
    click.echo(
        f"{machine_description()} | {len(windows)} dev queries with a full window of "
        f"{settings.gateway_window}, thread CPU per query"
    )
    for pair, spent in results.items():
        (first, a), (second, b) = spent.items()
        click.echo(
            f"{pair:<16} {first}: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | {second}: p50 "
            f"{np.median(b):.3f} ms, mean {b.mean():.3f} | ratio of the means {a.mean() / b.mean():.2f}"
        )


if __name__ == "__main__":
    main()
