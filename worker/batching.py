"""Micro-batching: concurrent scoring requests of one process share one forward pass.

Why: a GPU scores 8 x 500 documents in one pass in little more time than 500,
because a single query's pass leaves most of the device idle. (On a CPU the sparse
layout scores in groups of ``CPU_GROUP_DOCS`` anyway, so batching there saves only
per-call overhead; see the README's scoring figures.)
The worker therefore runs Celery's ``threads`` pool with ``concurrency`` > 1: tasks
decode and prepare their payload in parallel, then ``submit`` to one
``MicroBatcher`` per process, whose background thread collects whatever arrived
within ``max_wait_s`` of the first waiting request (2 ms by default, so a lone
request pays at most that) or until ``max_requests`` / ``max_items`` is reached,
and makes one ``run_batch`` call (``DeltaScorer.score_many``). With the prefork
pool every child would hold its own model copy and see only its own requests.

A caller that stops waiting cancels its request (``result_or_cancel``): under
overload, requests nobody waits for any more are dropped before they take model time.

Only the batcher thread runs the model, so forward passes never compete for the
device or for torch's intra-op threads. A failing batch is retried one request
at a time so that an error reaches only the caller whose request caused it.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)


class BatcherClosed(RuntimeError):
    """``submit`` after ``close``: the process is shutting down."""


class BatchFuture(Future[R]):
    """A future whose ``batch_size``, once done, is how many requests shared its ``run_batch`` call."""

    batch_size: int = 0


@dataclass
class _Pending(Generic[T, R]):
    item: T
    size: int
    enqueued: float  # time.monotonic() of submit
    future: BatchFuture[R] = field(default_factory=BatchFuture)


class _Stop(enum.Enum):
    STOP = 0


_STOP = _Stop.STOP


class MicroBatcher(Generic[T, R]):
    """Coalesce ``submit``-ted items into ``run_batch(list[T]) -> list[R]`` calls.

    ``size(item)`` weighs an item against ``max_items`` (documents per pass); an
    item heavier than ``max_items`` on its own still runs, alone.
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R]],
        *,
        max_wait_s: float = 0.002,
        max_requests: int = 8,
        max_items: int | None = None,
        size: Callable[[T], int] = lambda item: 1,
        name: str = "esrr-batcher",
    ) -> None:
        if max_wait_s < 0 or max_requests < 1 or (max_items is not None and max_items < 1):
            raise ValueError("max_wait_s must be >= 0, max_requests and max_items >= 1")
        self.run_batch = run_batch
        self.max_wait_s = max_wait_s
        self.max_requests = max_requests
        self.max_items = max_items
        self.size = size
        self.batches = 0  # run_batch calls that succeeded or failed as a whole
        self.requests = 0
        self._queue: queue.SimpleQueue[_Pending[T, R] | _Stop] = queue.SimpleQueue()
        self._carry: _Pending | None = None  # an item that did not fit the previous batch
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> BatchFuture[R]:
        """Queue ``item``; the future gets its result or the exception its scoring raised.

        Once done, ``future.batch_size`` tells how many requests shared its ``run_batch`` call.
        """
        pending: _Pending[T, R] = _Pending(item, self.size(item), time.monotonic())
        with self._lock:
            if self._closed:
                raise BatcherClosed("the scoring batcher is closed; the worker is shutting down")
            self._queue.put(pending)
        return pending.future

    def __call__(self, item: T, timeout: float | None = None) -> R:
        """Submit and wait for the result (see ``result_or_cancel``)."""
        return result_or_cancel(self.submit(item), timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Score what is queued, then stop the thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout)

    def _next(self, timeout: float | None) -> _Pending[T, R] | _Stop | None:
        if self._carry is not None:
            pending, self._carry = self._carry, None
            return pending
        try:
            return self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _collect(self, first: _Pending[T, R]) -> tuple[list[_Pending[T, R]], bool]:
        """A batch starting with ``first``; True when the stop marker was seen."""
        batch, total = [first], first.size
        deadline = first.enqueued + self.max_wait_s  # bounded from the first request's arrival
        while len(batch) < self.max_requests:
            got = self._next(deadline - time.monotonic())
            if got is None:
                break
            if got is _STOP:
                return batch, True
            if self.max_items is not None and total + got.size > self.max_items:
                self._carry = got
                break
            batch.append(got)
            total += got.size
        return batch, False

    def _loop(self) -> None:
        stopping = False
        while True:
            first = self._next(None if not stopping else 0)
            if first is _STOP:
                stopping = True
                continue
            if first is None:  # stopping and drained
                return
            batch, saw_stop = self._collect(first)
            stopping = stopping or saw_stop
            self._run(batch)

    def _run(self, batch: list[_Pending[T, R]]) -> None:
        batch = [p for p in batch if p.future.set_running_or_notify_cancel()]
        if not batch:
            return
        self.batches += 1
        self.requests += len(batch)
        try:
            results = self._call([p.item for p in batch])
        except Exception as error:
            if len(batch) == 1:
                batch[0].future.set_exception(error)
                return
            log.warning("a batch of %d requests failed (%s); scoring them one by one", len(batch), error)
            for pending in batch:
                pending.future.batch_size = 1
                try:
                    pending.future.set_result(self._call([pending.item])[0])
                except Exception as single_error:
                    pending.future.set_exception(single_error)
            return
        for pending, result in zip(batch, results):
            pending.future.batch_size = len(batch)
            pending.future.set_result(result)

    def _call(self, items: list[T]) -> Sequence[R]:
        results = self.run_batch(items)
        if len(results) != len(items):
            raise RuntimeError(f"run_batch returned {len(results)} results for {len(items)} requests")
        return results


def result_or_cancel(future: Future[R], timeout: float | None) -> R:
    """The future's result; if ``timeout`` passes first it is cancelled (skipped unless already running)."""
    try:
        return future.result(timeout)
    except FutureTimeout:
        future.cancel()
        raise
