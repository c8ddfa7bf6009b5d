"""``esrr bench slow-clients``: do searches still answer while many clients hold connections half-sent?

Opens ``--connections`` connections to a running gateway, each sending a request whose
headers never end (a slow or stalled client, the "slowloris" pattern), then times
``--searches`` ordinary searches one after another. A server that gives each waiting
client a thread, or that runs out of connections, leaves the searches unanswered.
Works against any HTTP server of the gateway (``esrr serve``, or another WSGI server
running ``es_rerank.gateway.wsgi:app``), which is how the choice of server was measured.
"""

from __future__ import annotations

import json
import socket
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description

UNFINISHED_REQUEST = b"GET /_search?q=bone HTTP/1.1\r\nHost: slow\r\n"  # no blank line: the headers never end


def hold_connections(host: str, port: int, count: int, timeout: float) -> tuple[list[socket.socket], str | None]:
    """Up to ``count`` connections, each with an unfinished request sent; and why fewer, if fewer."""
    held: list[socket.socket] = []
    for _ in range(count):
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.sendall(UNFINISHED_REQUEST)
        except OSError as error:
            return held, f"connection {len(held) + 1}: {error}"
        held.append(sock)
    return held, None


def time_searches(url: str, searches: int, timeout: float) -> list[float | None]:
    """Milliseconds of each search, None for one that failed or timed out."""
    times: list[float | None] = []
    for _ in range(searches):
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"{url}/_search?q=bone&size=1", timeout=timeout) as response:
                response.read()
            times.append((time.perf_counter() - started) * 1000)
        except (OSError, urllib.error.URLError):
            times.append(None)
    return times


def measure(url: str, connections: int, searches: int, timeout: float, settle_s: float = 1.0) -> dict[str, Any]:
    """Hold the connections, let the server take them in, time the searches, let go."""
    parts = urlsplit(url)
    held, short = hold_connections(parts.hostname or "127.0.0.1", parts.port or 80, connections, timeout)
    try:
        time.sleep(settle_s)
        times = time_searches(url, searches, timeout)
        closed = sum(1 for sock in held if _closed_by_server(sock))
    finally:
        for sock in held:
            sock.close()
    answered = [ms for ms in times if ms is not None]
    return {"connections_asked": connections, "connections_held": len(held), "held_short_because": short,
            "closed_by_server": closed, "searches": searches, "answered": len(answered),
            "median_ms": statistics.median(answered) if answered else None,
            "max_ms": max(answered) if answered else None, "timeout_s": timeout}


def _closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@click.command(name="slow-clients")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway.")
@click.option("--connections", default=110, show_default=True, type=click.IntRange(1, 20_000),
              help="Connections held with an unfinished request.")
@click.option("--searches", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="Ordinary searches timed meanwhile, one after another.")
@click.option("--timeout", default=10.0, show_default=True, type=click.FloatRange(0.1, 600),
              help="Seconds a search may take before it counts as unanswered.")
@json_out_option("Also write the figures as JSON.")
def bench_slow_clients(url: str, connections: int, searches: int, timeout: float, json_out: Path | None) -> None:
    """Searches answered while many connections hang half-sent (slow clients)."""
    url = url.rstrip("/")
    figures = {"machine": machine_description(), "url": url, **measure(url, connections, searches, timeout)}
    click.echo(f"{figures['machine']} | {url}")
    click.echo(f"connections held half-sent: {figures['connections_held']} of {connections}"
               + (f" ({figures['held_short_because']})" if figures["held_short_because"] else ""))
    if figures["answered"]:
        click.echo(f"searches answered: {figures['answered']} of {searches} (median {figures['median_ms']:.1f} ms, "
                   f"max {figures['max_ms']:.1f} ms)")
    else:
        click.echo(f"searches answered: 0 of {searches} within {timeout:g} s each")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
