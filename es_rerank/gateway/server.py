"""How ``esrr serve`` serves the app: waitress set up for slow clients, in one process or several on one port.

Why waitress and not gunicorn's gthread workers: waitress reads each request whole in
its event loop before a thread sees it, so a client that sends its headers slowly (or
never finishes them) holds a connection, not one of the threads that search. With
gunicorn 27's gthread worker (8 threads) 110 such connections left every search
unanswered, as did waitress's defaults, whose 100 connections they filled
(``esrr bench slow-clients``, docs/operations.md). So waitress, with:

- ``connection_limit`` ``ESRR_GATEWAY_CONNECTION_LIMIT`` (1000; waitress: 100), the soft
  limit on open files raised to fit it at start-up, and ``poll()`` instead of
  ``select()``, which cannot watch a file descriptor above 1024;
- an idle connection closed after ``ESRR_GATEWAY_CHANNEL_TIMEOUT_S`` (30 s; waitress:
  120 s), looked for every quarter of that;
- a body over the app's 1 MiB refused before it is buffered (waitress's own limit on
  the request line and headers, 256 KiB, stays: below it, a long URL gets the app's
  414 in Elasticsearch's error shape; above it, waitress's plain 431).

A client that keeps trickling bytes still holds a connection as long as it likes: the
proxy in front (nginx buffers whole requests) is what stops that, and the README says so.

Several processes per machine: ``--processes N`` binds the port once, forks N servers
on that socket (the kernel hands each connection to one of them) and restarts one that
dies. Each process has its own pipeline, metrics and breaker. Linux and macOS (fork).
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SPARE_FILES = 64  # index files, broker and result connections, logs: open besides the clients' sockets
QUICK_DEATH_S = 5.0  # a process that dies sooner after its start did not start: give up after QUICK_DEATHS of them
QUICK_DEATHS = 3
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
GIL_SWITCH_S = 0.0005
# A reranked search leaves some hundreds of containers alive at a time: at CPython's 700 the young generation was
# collected every other search (0.18 ms of a search's CPU: reports/profile/gc_time.py); at 7,000, one in 30 or so.
GC_YOUNG_THRESHOLD = 7000


class ServeError(RuntimeError):
    """The gateway cannot serve as set up; the message names the setting or command that fixes it."""


def waitress_options(connection_limit: int, channel_timeout_s: float, threads: int, max_body_bytes: int) -> dict:
    """waitress's adjustments for the gateway (see the module's docstring)."""
    return {
        "threads": threads,
        "connection_limit": connection_limit,
        "channel_timeout": channel_timeout_s,
        "cleanup_interval": max(channel_timeout_s / 4, 0.5),
        "asyncore_use_poll": True,
        "max_request_body_size": max_body_bytes,
        "ident": "es-rerank",
    }


def ensure_open_files(connections: int) -> None:
    """Raise this process's soft limit on open files to hold ``connections`` sockets, or ``ServeError``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ServeError(
            f"ESRR_GATEWAY_CONNECTION_LIMIT={connections} needs {needed} open files, but this process "
            f"may open at most {hard} (ulimit -Hn); lower the setting or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def listening_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening; ``OSError`` (port taken, no such address) as it comes."""
    family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, protocol)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def serve_on(app: Any, sock: socket.socket, options: dict) -> None:
    """Serve ``app`` with waitress on the listening ``sock`` until the process is told to stop."""
    from waitress.server import create_server

    # SIGTERM as Ctrl-C: the caller's ``finally`` (closing the broker connections) runs either way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # A search that waits on I/O or a lock gives up the GIL and then waits a whole switch
    # interval for it beside a CPU-bound one (the convoy effect): 0.5 ms, not CPython's 5.
    sys.setswitchinterval(GIL_SWITCH_S)
    settle_heap()
    create_server(app, sockets=[sock], **options).run()


def settle_heap() -> None:
    """Keep the cyclic garbage collector off what was built before serving and lives as long as the process (the
    index's statistics, the app: ``gc.freeze``, as CPython's documentation advises a server), and collect the young
    generation every ``GC_YOUNG_THRESHOLD`` containers; the older generations as before."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def supervise(processes: int, serve_one: Callable[[], None]) -> int:
    """Run ``serve_one`` in ``processes`` forked children, restarting one that dies, until SIGTERM or SIGINT.

    Returns the exit status for this process: 0 when told to stop, 1 when children die
    as soon as they start (``QUICK_DEATHS`` in a row: they would only die again).
    """
    children: dict[int, float] = {}  # pid -> when it started
    stopping = False

    def start() -> None:
        # The stop signals wait until the fork is done: in the parent, ``stop`` then sees the new child;
        # in the child, they reach its own handlers, never the parent's ``stop`` it was forked with (which
        # would signal its siblings and serve on, leaving the parent waiting for it).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            if stopping:  # told to stop while waiting to restart one
                return
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _serve_child(serve_one)
            children[pid] = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            _signal(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in range(processes):
        start()
    quick_deaths = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        started = children.pop(pid, None)
        if started is None or stopping:
            continue
        lived = time.monotonic() - started
        quick_deaths = quick_deaths + 1 if lived < QUICK_DEATH_S else 0
        log.warning(
            "gateway process %d exited (%s) after %.1f s; %s",
            pid,
            _status(status),
            lived,
            "giving up" if quick_deaths >= QUICK_DEATHS else "starting another",
        )
        if quick_deaths >= QUICK_DEATHS:
            stop()
            continue
        time.sleep(min(lived, 1.0) if quick_deaths else 0)
        start()
    return 1 if quick_deaths >= QUICK_DEATHS else 0


def _serve_child(serve_one: Callable[[], None]) -> None:
    """The forked child: its own stop handlers, then ``serve_one``; exits, never returns into the parent's stack."""
    status = 0
    try:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # ``serve_on`` sets the same once it serves
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        serve_one()
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else 1
    except BaseException:
        log.exception("a gateway process stopped")
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"status {os.WEXITSTATUS(status)}"
