"""MicroBatcher without Celery: per-caller results and errors, real coalescing, bounded waits."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from types import SimpleNamespace

import pytest

from worker import batching
from worker.batching import BatcherClosed, MicroBatcher


class Recorder:
    """A run_batch that doubles numbers, records its batches and fails on negative items."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.batches: list[list[int]] = []
        self.called_at: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, items: list[int]) -> list[int]:
        with self.lock:
            self.batches.append(list(items))
            self.called_at.append(time.monotonic())
        time.sleep(self.delay_s)
        bad = [item for item in items if item < 0]
        if bad:
            raise ValueError(f"bad item {bad[0]}")
        return [2 * item for item in items]


def submit_concurrently(batcher: MicroBatcher, items: list[int]) -> dict[int, object]:
    """Each item from its own thread, released together; item -> result or exception."""
    barrier = threading.Barrier(len(items))
    outcomes: dict[int, object] = {}

    def call(item: int) -> None:
        barrier.wait()
        try:
            outcomes[item] = batcher(item, timeout=10)
        except Exception as error:
            outcomes[item] = error

    threads = [threading.Thread(target=call, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return outcomes


def test_concurrent_callers_get_their_own_results_and_share_passes():
    recorder = Recorder(delay_s=0.02)
    batcher = MicroBatcher(recorder, max_wait_s=0.05, max_requests=8)
    try:
        items = list(range(1, 25))
        outcomes = submit_concurrently(batcher, items)
    finally:
        batcher.close()
    assert outcomes == {item: 2 * item for item in items}
    assert len(recorder.batches) < len(items) / 2  # really coalesced
    assert max(len(b) for b in recorder.batches) <= 8  # the size cap holds
    assert sorted(i for b in recorder.batches for i in b) == items  # each request exactly once
    assert batcher.requests == len(items) and batcher.batches == len(recorder.batches)


class WaitRecordingQueue(queue.SimpleQueue):
    """The batcher's queue, recording how long each of its ``get`` calls was allowed to block (None: no bound)."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def get(self, block: bool = True, timeout: float | None = None):
        self.waits.append(timeout if block else 0.0)
        return super().get(block, timeout)

    def get_nowait(self):
        return self.get(False)


@pytest.fixture
def recorded_waits(monkeypatch: pytest.MonkeyPatch) -> list[WaitRecordingQueue]:
    """The queues of the batchers made in this test, each recording its waits (the queue module seen by
    ``worker.batching`` only is swapped; the batcher's code runs as it is)."""
    made: list[WaitRecordingQueue] = []

    def recording() -> WaitRecordingQueue:
        made.append(WaitRecordingQueue())
        return made[-1]

    monkeypatch.setattr(batching, "queue", SimpleNamespace(SimpleQueue=recording, Empty=queue.Empty))
    return made


# What the batcher allows itself to wait, read off its queue, not off a stopwatch: the time a request
# really takes, its 2 ms wait for company included, is `esrr bench roundtrip`'s (docs/performance.md).
def test_a_lone_request_waits_at_most_max_wait(recorded_waits):
    recorder = Recorder()
    batcher = MicroBatcher(recorder, max_wait_s=0.03)
    try:
        start = time.monotonic()
        assert batcher(21, timeout=60) == 42
        waited = recorder.called_at[0] - start
    finally:
        batcher.close()
    assert waited >= 0.025, waited  # it waited for company (a lower bound holds on any machine)
    collecting = [wait for wait in recorded_waits[0].waits if wait is not None]  # None: idle, waiting for work
    assert collecting and 0 < collecting[0] <= 0.03 and sum(collecting) <= 0.03, collecting


def test_default_wait_is_two_milliseconds_and_zero_does_not_wait(recorded_waits):
    assert MicroBatcher(Recorder()).max_wait_s == 0.002
    recorder = Recorder()
    batcher = MicroBatcher(recorder, max_wait_s=0.0)
    try:
        for item in range(5):
            assert batcher(item, timeout=60) == 2 * item
    finally:
        batcher.close()
    waits = recorded_waits[-1].waits
    assert recorder.batches == [[item] for item in range(5)]
    assert [wait for wait in waits if wait is not None] and all(wait in (None, 0.0) for wait in waits), waits


def test_item_cap_splits_batches_and_carries_the_overflow():
    recorder = Recorder(delay_s=0.01)
    batcher = MicroBatcher(recorder, max_wait_s=0.05, max_requests=100, max_items=10, size=lambda item: item)
    try:
        outcomes = submit_concurrently(batcher, [3, 4, 5, 6, 7, 12])  # 12 is over the cap on its own
    finally:
        batcher.close()
    assert outcomes == {item: 2 * item for item in [3, 4, 5, 6, 7, 12]}
    for batch in recorder.batches:
        assert sum(batch) <= 10 or batch == [12]


def test_an_error_reaches_only_the_caller_that_caused_it():
    recorder = Recorder(delay_s=0.01)
    batcher = MicroBatcher(recorder, max_wait_s=0.05, max_requests=16)
    try:
        outcomes = submit_concurrently(batcher, [1, 2, -3, 4, 5])
    finally:
        batcher.close()
    assert isinstance(outcomes.pop(-3), ValueError)
    assert outcomes == {1: 2, 2: 4, 4: 8, 5: 10}


def test_wrong_number_of_results_is_an_error():
    batcher = MicroBatcher(lambda items: [], max_wait_s=0)
    try:
        with pytest.raises(RuntimeError, match="0 results for 1 requests"):
            batcher(1, timeout=5)
    finally:
        batcher.close()


def test_close_scores_what_is_queued_then_refuses_new_work():
    recorder = Recorder(delay_s=0.05)
    batcher = MicroBatcher(recorder, max_wait_s=0.0, max_requests=1)
    futures = [batcher.submit(item) for item in range(4)]
    batcher.close()
    assert [f.result(timeout=0) for f in futures] == [0, 2, 4, 6]
    assert not batcher._thread.is_alive()
    with pytest.raises(BatcherClosed):
        batcher.submit(1)
    batcher.close()  # idempotent


def test_batch_size_is_reported_on_the_future():
    recorder = Recorder(delay_s=0.02)
    batcher = MicroBatcher(recorder, max_wait_s=0.05, max_requests=4)
    try:
        futures = [batcher.submit(item) for item in range(4)]
        assert [f.result(timeout=5) for f in futures] == [0, 2, 4, 6]
    finally:
        batcher.close()
    assert [f.batch_size for f in futures] == [4, 4, 4, 4]


def test_a_caller_that_stops_waiting_cancels_its_request():
    recorder = Recorder(delay_s=0.3)
    batcher = MicroBatcher(recorder, max_wait_s=0.0, max_requests=1)
    try:
        first = batcher.submit(1)
        time.sleep(0.05)  # the batcher thread is now scoring [1]
        with pytest.raises(FutureTimeout):
            batcher(2, timeout=0.05)
        assert first.result(5) == 2
    finally:
        batcher.close()
    assert recorder.batches == [[1]]  # the abandoned request never took model time
