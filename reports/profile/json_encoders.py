"""Whether a faster JSON encoder would pay in the gateway: the served search answers encoded three ways, thread CPU.

Builds the app as ``esrr serve`` does (BM25 only when ``ESRR_GATEWAY_RERANK=false ESRR_GATEWAY_WINDOW=0``), keeps
the body of each NFCorpus dev query's ``GET /_search?q=...&size=10`` answer, then encodes every body, the ways
alternated body by body: the stdlib as Flask's ``jsonify`` does (compact, ``ensure_ascii``: what is served), orjson
(UTF-8 as it is: smaller and not the same bytes wherever a document has a non-ASCII character), and orjson with
the non-ASCII runs escaped after it as the stdlib writes them (the same bytes as served). Also counts the answers
whose served bytes the last way reproduces, and those holding non-ASCII text.

    python reports/profile/json_encoders.py --queries 324 --rounds 3
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any
from urllib.parse import urlencode

import click
import orjson

_NON_ASCII_RUN = re.compile("[^\x00-\x7f]+")


def stdlib(body: Any) -> bytes:
    """As served: Flask's provider, compact, ASCII only."""
    return json.dumps(body, separators=(",", ":")).encode()


def orjson_utf8(body: Any) -> bytes:
    """orjson as it writes: UTF-8."""
    return orjson.dumps(body)


def orjson_ascii(body: Any) -> bytes:
    """orjson, then each run of non-ASCII characters escaped by the stdlib's own C escaper."""
    text = orjson.dumps(body).decode()
    if text.isascii():
        return text.encode()
    return _NON_ASCII_RUN.sub(lambda run: encode_basestring_ascii(run.group())[1:-1], text).encode()


WAYS: dict[str, Callable[[Any], bytes]] = {
    "stdlib, ASCII (served)": stdlib,
    "orjson, UTF-8": orjson_utf8,
    "orjson + ASCII escapes": orjson_ascii,
}


@click.command()
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=3, show_default=True, help="Timed passes over the answers.")
def main(queries: int, rounds: int) -> None:
    """Thread CPU to encode the served answers, each way; p50 and mean per answer."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.cli import served_search
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    settings = load_settings(GatewaySettings)
    client = create_app(served_search(settings), settings).test_client()
    bodies = []
    for text in dev_query_texts(None, load_settings(CommonSettings), queries):
        response = client.get(f"/_search?{urlencode({'q': text, 'size': 10})}")
        bodies.append(response.get_json())
    spent: dict[str, list[int]] = {name: [] for name in WAYS}
    for _ in range(rounds):
        for body in bodies:
            for name, encode in WAYS.items():
                started = time.thread_time_ns()
                encode(body)
                spent[name].append(time.thread_time_ns() - started)
    non_ascii = sum(not orjson.dumps(body).isascii() for body in bodies)
    same = sum(orjson_ascii(body) == stdlib(body) for body in bodies)
    size = statistics.fmean(len(stdlib(body)) for body in bodies)
    click.echo(f"{machine_description()} | {len(bodies)} answers ({size:,.0f} bytes on average) x {rounds} rounds")
    for name, nanoseconds in spent.items():
        p50, mean = statistics.median(nanoseconds) / 1e3, statistics.fmean(nanoseconds) / 1e3
        click.echo(f"{name:<24} p50 {p50:7.1f} us, mean {mean:7.1f} us")
    click.echo(f"answers with non-ASCII text: {non_ascii}; the escaped orjson bytes equal the served: {same}")


if __name__ == "__main__":
    main()
