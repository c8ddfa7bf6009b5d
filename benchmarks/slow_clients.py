"""``esrr bench slow-clients``: do searches still answer while many clients hold connections half-sent?

Two patterns of slow client, ``--connections`` of them against a running gateway:

- ``half-sent`` (the "slowloris" pattern): each connection sends a request whose headers
  never end, then nothing; then ``--searches`` ordinary searches are timed one after another.
- ``trickle-headers`` and ``trickle-body``: each connection sends one byte every
  ``--interval`` seconds for ever (a request line and headers that never end, or whole
  headers announcing a 100 KB body that never ends), and a connection the server closes is
  opened again, as an attacker would; meanwhile a probe client searches one search after
  another for ``--duration`` seconds, after a baseline of searches without them. The figures
  are the probe's p50/p99 before and during, and how many connections stayed open.

A server that gives each waiting client a thread, or that runs out of connections, leaves
the searches unanswered. Works against any HTTP server of the gateway (``esrr serve``,
another WSGI server running ``es_rerank.gateway.wsgi:app``, a proxy in front); with
``--through-nginx`` it starts Debian's nginx with ``deploy/nginx.conf`` on a free loopback
port in front of ``--url`` and aims the slow clients and the probe at nginx.
"""

from __future__ import annotations

import json
import math
import resource
import selectors
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from benchmarks.nginx_proxy import ProxyError, nginx_in_front
from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description

UNFINISHED_REQUEST = b"GET /_search?q=bone HTTP/1.1\r\nHost: slow\r\n"  # no blank line: the headers never end
PATTERNS = ("half-sent", "trickle-headers", "trickle-body")
TRICKLED_BODY_BYTES = 100_000  # announced, under the gateway's 1 MiB, and never all sent
SPARE_FILES = 64  # the probe's connection, the proxy's pipes, Python's own files


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
    return [time_search(url, timeout) for _ in range(searches)]


def time_search(url: str, timeout: float) -> float | None:
    """Milliseconds of one ordinary search, None when it failed or timed out."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}/_search?q=bone&size=1", timeout=timeout) as response:
            response.read()
    except (OSError, urllib.error.URLError):
        return None
    return (time.perf_counter() - started) * 1000


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
    return {
        "connections_asked": connections,
        "connections_held": len(held),
        "held_short_because": short,
        "closed_by_server": closed,
        "searches": searches,
        "answered": len(answered),
        "median_ms": statistics.median(answered) if answered else None,
        "max_ms": max(answered) if answered else None,
        "timeout_s": timeout,
    }


def _closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def trickled_bytes(pattern: str) -> tuple[bytes, bytes]:
    """What a trickling connection sends at once on connecting, and the request it then sends a byte at a time
    (repeating its last byte for ever)."""
    if pattern == "trickle-headers":
        return b"", b"GET /_search?q=bone HTTP/1.1\r\nHost: slow\r\nX-Trickle: a"
    if pattern == "trickle-body":
        return (
            b"POST /_search HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % TRICKLED_BODY_BYTES,
            b" ",
        )
    raise ValueError(f"not a trickling pattern: {pattern!r}; use one of {PATTERNS[1:]}")


@dataclass
class TrickleCounts:
    """What the trickling connections met; ``open_min``: the fewest still open after an interval, once all were
    opened (before the closed ones are opened again)."""

    opened: int = 0
    closed_by_server: int = 0
    connect_failures: int = 0
    open_now: int = 0
    open_min: int | None = None
    bytes_sent: int = 0


class Trickler:
    """Keeps ``count`` connections to ``host``:``port`` open, each sending one more byte every ``interval`` s."""

    def __init__(
        self, host: str, port: int, count: int, interval: float, pattern: str, connect_timeout: float = 2.0
    ) -> None:
        self.address, self.count, self.interval, self.connect_timeout = (host, port), count, interval, connect_timeout
        self.prefix, self.request = trickled_bytes(pattern)
        self.counts = TrickleCounts()
        self.all_opened = threading.Event()
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._sent: dict[socket.socket, int] = {}  # bytes of the request sent on each open connection
        self._thread = threading.Thread(target=self._run, name="trickler", daemon=True)

    def __enter__(self) -> Trickler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for sock in list(self._sent):
            self._forget(sock)
        self._selector.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._drop_the_closed()
            if self.all_opened.is_set():  # how many held through the last interval
                low = self.counts.open_min
                self.counts.open_min = len(self._sent) if low is None else min(low, len(self._sent))
            while len(self._sent) < self.count and not self._stop.is_set() and self._open_one():
                pass
            if len(self._sent) == self.count:
                self.all_opened.set()
            for sock in list(self._sent):
                self._send_next_byte(sock)
            self.counts.open_now = len(self._sent)
            self._stop.wait(self.interval)

    def _open_one(self) -> bool:
        try:
            sock = socket.create_connection(self.address, timeout=self.connect_timeout)
            if self.prefix:
                sock.sendall(self.prefix)
        except OSError:
            self.counts.connect_failures += 1
            return False
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)
        self._sent[sock] = 0
        self.counts.opened += 1
        return True

    def _drop_the_closed(self) -> None:
        """Forget connections the server answered (a 408, a 400) or closed: the attacker opens new ones."""
        for key, _ in self._selector.select(timeout=0):
            self.counts.closed_by_server += 1
            self._forget(key.fileobj)

    def _send_next_byte(self, sock: socket.socket) -> None:
        sent = self._sent[sock]
        byte = self.request[min(sent, len(self.request) - 1) :][:1]
        try:
            sock.send(byte)
        except OSError:  # reset by the server, or its buffer full: either way not a connection that holds
            self.counts.closed_by_server += 1
            self._forget(sock)
            return
        self._sent[sock] = sent + 1
        self.counts.bytes_sent += 1

    def _forget(self, sock: Any) -> None:
        self._selector.unregister(sock)
        self._sent.pop(sock, None)
        sock.close()


def percentile(times: list[float | None], fraction: float) -> float | None:
    """The ``fraction`` quantile of ``times`` (nearest rank), an unanswered search (None) counting as slowest;
    None when that quantile is unanswered."""
    ordered = sorted(times, key=lambda ms: math.inf if ms is None else ms)
    if not ordered:
        return None
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def probe_for(url: str, seconds: float, pause: float, timeout: float) -> list[float | None]:
    """Searches one after another (``pause`` s apart) for ``seconds``: the milliseconds of each, None if unanswered."""
    times: list[float | None] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        times.append(time_search(url, timeout))
        time.sleep(pause)
    return times


def summarise(times: list[float | None]) -> dict[str, Any]:
    """Count, answered, p50, p99 and max of a probe's searches."""
    answered = [ms for ms in times if ms is not None]
    return {
        "searches": len(times),
        "answered": len(answered),
        "p50_ms": percentile(times, 0.5),
        "p99_ms": percentile(times, 0.99),
        "max_ms": max(answered) if answered else None,
    }


def measure_trickle(
    url: str,
    connections: int,
    pattern: str,
    interval: float,
    duration: float,
    baseline: float,
    pause: float,
    timeout: float,
) -> dict[str, Any]:
    """The probe's searches alone for ``baseline`` s, then for ``duration`` s beside the trickling connections."""
    parts = urlsplit(url)
    before = probe_for(url, baseline, pause, timeout)
    started = time.monotonic()
    with Trickler(parts.hostname or "127.0.0.1", parts.port or 80, connections, interval, pattern) as trickler:
        trickler.all_opened.wait(timeout=max(duration, 30.0))
        opening_s = time.monotonic() - started
        during = probe_for(url, duration, pause, timeout)
        counts = asdict(trickler.counts)
    return {
        "pattern": pattern,
        "connections_asked": connections,
        "interval_s": interval,
        "duration_s": duration,
        "opening_s": round(opening_s, 3),
        "trickle": counts,
        "before": summarise(before),
        "during": summarise(during),
        "probe_pause_s": pause,
        "timeout_s": timeout,
    }


def raise_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files to ``needed``, or ``click.ClickException`` naming the fix."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise click.ClickException(
            f"{needed} open files are needed, but this process may open at most {hard} "
            "(ulimit -Hn); ask for fewer --connections or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _ms(value: float | None, timeout: float) -> str:
    return f"unanswered within {timeout:g} s" if value is None else f"{value:.1f} ms"


def _echo_trickle(figures: dict[str, Any]) -> None:
    counts, timeout = figures["trickle"], figures["timeout_s"]
    click.echo(
        f"trickling connections ({figures['pattern']}, 1 byte every {figures['interval_s']:g} s): "
        f"{counts['open_now']} of {figures['connections_asked']} open at the end, fewest open "
        f"{counts['open_min']}, {counts['opened']} opened, {counts['closed_by_server']} closed by the server, "
        f"{counts['connect_failures']} connections refused or timed out"
    )
    for phase in ("before", "during"):
        probe = figures[phase]
        click.echo(
            f"searches {phase}: {probe['answered']} of {probe['searches']} answered, "
            f"p50 {_ms(probe['p50_ms'], timeout)}, p99 {_ms(probe['p99_ms'], timeout)}"
        )


@click.command(name="slow-clients")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway.")
@click.option(
    "--connections", default=110, show_default=True, type=click.IntRange(1, 20_000), help="Slow clients' connections."
)
@click.option(
    "--pattern",
    type=click.Choice(PATTERNS),
    default="half-sent",
    show_default=True,
    help="half-sent: headers that never end, then nothing; trickle-headers / trickle-body: one byte every "
    "--interval s for ever, reconnecting when closed.",
)
@click.option(
    "--searches",
    default=5,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="half-sent: ordinary searches timed meanwhile, one after another.",
)
@click.option(
    "--interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.01, 600),
    help="trickle: seconds between two bytes of a connection.",
)
@click.option(
    "--duration",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="trickle: seconds the probe searches beside the trickling connections.",
)
@click.option(
    "--baseline",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="trickle: seconds the probe searches before they start.",
)
@click.option(
    "--probe-pause",
    default=0.05,
    show_default=True,
    type=click.FloatRange(0, 60),
    help="trickle: seconds between two of the probe's searches.",
)
@click.option(
    "--timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1, 600),
    help="Seconds a search may take before it counts as unanswered.",
)
@click.option(
    "--through-nginx",
    is_flag=True,
    help="Start Debian's nginx with deploy/nginx.conf on a free loopback port in front of --url and aim "
    "the slow clients and the searches at it.",
)
@json_out_option("Also write the figures as JSON.")
def bench_slow_clients(
    url: str,
    connections: int,
    pattern: str,
    searches: int,
    interval: float,
    duration: float,
    baseline: float,
    probe_pause: float,
    timeout: float,
    through_nginx: bool,
    json_out: Path | None,
) -> None:
    """Searches answered while many connections hang half-sent or trickle (slow clients)."""
    raise_open_files(connections + SPARE_FILES)
    gateway = url.rstrip("/")
    gateway_address = urlsplit(gateway)
    try:
        proxy = (
            nginx_in_front(f"{gateway_address.hostname}:{gateway_address.port or 80}")
            if through_nginx
            else nullcontext(gateway)
        )
        with proxy as target:
            if pattern == "half-sent":
                measured = measure(target, connections, searches, timeout)
            else:
                measured = measure_trickle(
                    target, connections, pattern, interval, duration, baseline, probe_pause, timeout
                )
    except ProxyError as error:
        raise click.ClickException(str(error)) from None
    figures = {
        "machine": machine_description(),
        "url": target,
        "gateway": gateway,
        "through": "nginx (deploy/nginx.conf)" if through_nginx else "direct",
        **measured,
    }
    click.echo(f"{figures['machine']} | {target} ({figures['through']})")
    if pattern != "half-sent":
        _echo_trickle(figures)
    else:
        click.echo(
            f"connections held half-sent: {figures['connections_held']} of {connections}"
            + (f" ({figures['held_short_because']})" if figures["held_short_because"] else "")
        )
        if figures["answered"]:
            click.echo(
                f"searches answered: {figures['answered']} of {searches} (median {figures['median_ms']:.1f} "
                f"ms, max {figures['max_ms']:.1f} ms)"
            )
        else:
            click.echo(f"searches answered: 0 of {searches} within {timeout:g} s each")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
