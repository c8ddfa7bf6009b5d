"""Heavy searches in processes of their own: their own interpreter lock, at a lower CPU priority.

One gateway process serves its light searches on threads that share one interpreter lock.
A heavy search held that lock for tens of milliseconds at a time (tantivy builds wildcard
automata and runs sloppy phrases without releasing it; highlighting and rendering are
Python), so a plain search beside it waited (`esrr bench attack`, the "heaviest" row:
its p99 rose 16x with the heavy lane alone). Here each of the lane's
``ESRR_GATEWAY_HEAVY_SLOTS`` slots is a long-lived child process, started with the
gateway by ``multiprocessing``'s *spawn* (no copy of the parent's threads or locks):
it opens the served pipeline the same way ``esrr serve`` does, follows a reindex as the
parent does (``ServedSearch``), and answers one search at a time, ``nice``-d by
``ESRR_GATEWAY_HEAVY_NICE`` so the light searches' process gets the CPU first.

A child that dies, or answers nothing within ``ESRR_GATEWAY_HEAVY_TIMEOUT_S`` (killed then),
costs its search a 503 that says so, and is started again in the background; until one
is ready a heavy search waits at most ``ESRR_GATEWAY_HEAVY_WAIT_S``, then is a 503 too.
A child ends when its parent does: it reads the end of its pipe.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from es_rerank.gateway.errors import ServiceUnavailable
from es_rerank.gateway.state import gateway_state

log = logging.getLogger(__name__)

START_S = 120.0  # a child that is not ready this long after its start is killed and started again
RETRY_S = (1.0, 5.0, 30.0)  # pauses before a restart after a failed start, the last one repeated


class HeavyProcesses:
    """``count`` child processes, each running one search at a time: ``run(function, *args)`` calls
    ``function(pipeline, *args)`` in a ready child, in an app context of that child's app with its served pipeline,
    and returns what it returns (or raises what it raised). ``build_app`` (picklable: a module-level function or a
    ``functools.partial`` of one) builds that app in the child: the gateway's, around the same served pipeline,
    running its heavy searches itself."""

    def __init__(
        self, build_app: Callable[[], Any], count: int, timeout_s: float, nice: int, ready_wait_s: float
    ) -> None:
        self._build_app = build_app
        self.timeout_s, self.nice, self.ready_wait_s = timeout_s, nice, ready_wait_s
        self._context = multiprocessing.get_context("spawn")
        self._ready: queue.Queue[_Child] = queue.Queue()
        self._children: set[_Child] = set()
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(count):
            self._start_in_background()

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(pipeline, *args)`` in a child; ``ServiceUnavailable`` when none is ready in time, or the
        child dies or hangs on it (it is then started again)."""
        try:
            child = self._ready.get(timeout=self.ready_wait_s)
        except queue.Empty:
            raise ServiceUnavailable(
                f"no process for heavy searches is ready after {self.ready_wait_s:g} s: one is starting "
                f"(ESRR_GATEWAY_HEAVY_WAIT_S={self.ready_wait_s:g}); retry in a few seconds, and if this persists "
                "the gateway's log says why they cannot start"
            ) from None
        if not child.alive():
            self._replace(child, "was found dead")
            return self.run(function, *args)
        try:
            answer = child.call(function, args, self.timeout_s)
        except _ChildLost as lost:
            self._replace(child, str(lost))
            raise ServiceUnavailable(
                f"the process running heavy searches {lost} during this search and is being started again; "
                f"retry, or ask for a lighter search (fewer hits, a shorter highlight, no wildcard or sloppy phrase)"
                f" (ESRR_GATEWAY_HEAVY_TIMEOUT_S={self.timeout_s:g})"
            ) from None
        self._ready.put(child)
        return answer.value()

    def pids(self) -> list[int]:
        """The process ids of the children started and not yet stopped (ready or busy)."""
        with self._lock:
            return [child.pid for child in self._children if child.pid is not None]

    def close(self) -> None:
        """Stop every child; searches after this get a 503."""
        with self._lock:
            self._closed = True
            children = list(self._children)
            self._children.clear()
        for child in children:
            child.stop()

    def _replace(self, child: _Child, why: str) -> None:
        log.warning("heavy search process %s %s; starting another", child.pid, why)
        child.stop()
        with self._lock:
            self._children.discard(child)
        self._start_in_background()

    def _start_in_background(self) -> None:
        threading.Thread(target=self._start, name="esrr-heavy-start", daemon=True).start()

    def _start(self) -> None:
        """Start a child and hand it to the searches once ready; after a failed start, try again later."""
        for attempt in range(1_000_000):
            with self._lock:
                if self._closed:
                    return
                child = _Child(self._context, self._build_app, self.nice)
                self._children.add(child)
            started = time.monotonic()
            problem = child.wait_ready(START_S)
            if problem is None:
                log.info("heavy search process %s ready after %.1f s", child.pid, time.monotonic() - started)
                self._ready.put(child)
                return
            log.error("the heavy search process %s could not start (%s); trying again", child.pid, problem)
            child.stop()
            with self._lock:
                self._children.discard(child)
            time.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])


class _ChildLost(Exception):
    """The child died or did not answer; the message says which, as in 'died (signal 9)'."""


class _Answer:
    """What the child sent back: a value or an exception to raise here."""

    def __init__(self, kind: str, payload: Any) -> None:
        self.kind, self.payload = kind, payload

    def value(self) -> Any:
        if self.kind == "error":
            raise self.payload
        return self.payload


class _Child:
    """One child process and the parent's end of its pipe."""

    def __init__(self, context: Any, build_app: Callable[[], Any], nice: int) -> None:
        self._conn, child_end = context.Pipe()
        self._process = context.Process(
            target=serve_heavy, args=(child_end, build_app, nice), name="esrr-heavy-searches", daemon=True
        )
        self._process.start()
        child_end.close()
        self.pid = self._process.pid

    def alive(self) -> bool:
        return self._process.is_alive()

    def wait_ready(self, timeout_s: float) -> str | None:
        """None once the child says it serves, else why not."""
        try:
            if not self._conn.poll(timeout_s):
                return f"not ready after {timeout_s:g} s"
            said = self._conn.recv()
        except (EOFError, OSError):
            return self._death()
        return None if said == "ready" else str(said)

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> _Answer:
        # A watchdog, not a timed poll: a child stopped halfway through a large answer (or not reading a large
        # request) would otherwise hold this thread in send or recv for good.
        late = threading.Event()

        def kill_late() -> None:
            late.set()
            self._process.kill()

        watchdog = threading.Timer(timeout_s, kill_late)
        watchdog.start()
        try:
            self._conn.send((function, args))
            kind, payload = self._conn.recv()
        except (EOFError, OSError, ValueError):
            raise _ChildLost(
                f"answered nothing within {timeout_s:g} s (killed)" if late.is_set() else self._death()
            ) from None
        finally:
            watchdog.cancel()
        return _Answer(kind, payload)

    def _death(self) -> str:
        self._process.join(5)
        code = self._process.exitcode
        if code is None:
            return "stopped answering"
        return f"died (signal {-code})" if code < 0 else f"exited (status {code})"

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(5)
        self._conn.close()


def serve_heavy(conn: Connection, build_app: Callable[[], Any], nice: int) -> None:
    """The child: build the app, say "ready", then answer each ``(function, args)`` until the parent closes the
    pipe."""
    from es_rerank.backends.query_tree import bind_limits

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides
    if nice:
        os.nice(nice)
    try:
        app = build_app()  # its own lane runs every search here, in this process
        served = gateway_state(app).served
    except Exception as error:
        conn.send(f"{type(error).__name__}: {error}")
        return
    bind_limits(app.config["ESRR_QUERY_LIMITS"])  # this thread prepares every search: the gateway's limits
    conn.send("ready")
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, OSError):
            break
        with app.app_context():
            try:
                answer = ("value", function(served.pipeline(), *args))
            except Exception as error:
                answer = ("error", _sendable(error))
        try:
            conn.send(answer)
        except (pickle.PicklingError, TypeError, AttributeError) as error:  # pickled whole before a byte is sent
            conn.send(("error", RuntimeError(f"the answer cannot be sent to the gateway process: {error}")))
    served.close()


def _sendable(error: Exception) -> Exception:
    """``error`` when it crosses the pipe intact, else a ``RuntimeError`` naming it (the parent renders a 500,
    as it would have in-process)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
