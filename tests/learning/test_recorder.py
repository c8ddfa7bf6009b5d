"""The recorder (``es_rerank.learning.recorder``): queued by the caller, written by its own thread, failing open."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter

from es_rerank.learning.events import Click, Impression, Shown
from es_rerank.learning.recorder import EventRecorder
from es_rerank.learning.store import open_store

SESSION = "0123456789abcdef0123456789abcdef"
DAY_MS = 86_400_000


def impression(number: int) -> Impression:
    return Impression(
        type="impression",
        impression_id=f"{number:016x}",
        session_id=SESSION,
        query=f"query {number}",
        ranker="BM25",
        results=[Shown(id=f"d{number}", position=1)],
    )


class Counts:
    """What the recorder reported: dropped events by reason, and stored ones."""

    def __init__(self) -> None:
        self.dropped: Counter[str] = Counter()
        self.stored = 0

    def recorder(self, url: str, capacity: int = 1000, **options) -> EventRecorder:
        def stored(count: int) -> None:
            self.stored += count

        busy_timeout_s = options.pop("busy_timeout_s", 1.0)
        return EventRecorder(
            lambda: open_store(url, busy_timeout_s=busy_timeout_s),
            capacity,
            on_dropped=lambda reason, count: self.dropped.update({reason: count}),
            on_stored=stored,
            **options,
        )


def test_recorded_events_are_written_by_the_writer_thread(tmp_path):
    counts, url = Counts(), str(tmp_path / "events.sqlite3")
    recorder = counts.recorder(url)
    assert recorder.record([impression(n) for n in range(700)]) == 700
    recorder.record([Click(type="click", impression_id=f"{3:016x}", session_id=SESSION, id="d3", position=1)])
    assert recorder.flush(30)
    assert counts.stored == 701 and not counts.dropped
    assert open_store(url).counts() == {"impressions": 700, "clicks": 1}
    recorder.close()


def test_a_full_queue_drops_and_counts_while_the_caller_never_waits(tmp_path):
    counts, url = Counts(), str(tmp_path / "events.sqlite3")
    open_store(url).close()
    locker = sqlite3.connect(url, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # the writer's first batch waits on this lock
    recorder = counts.recorder(url, capacity=10, busy_timeout_s=30.0)
    recorder.record([impression(0)])
    deadline = time.monotonic() + 10
    while recorder._queue.qsize() and time.monotonic() < deadline:  # the writer has taken it and is waiting
        time.sleep(0.01)
    queued = [recorder.record([impression(n)]) for n in range(1, 1001)]
    assert sum(queued) == 10 and counts.dropped == {"queue_full": 990}
    assert not recorder.flush(0.05)  # the 1000 calls returned while the writer is still held by the lock
    locker.execute("ROLLBACK")
    assert recorder.flush(30) and counts.stored == 11
    recorder.close()


def test_a_store_that_cannot_be_opened_drops_and_is_tried_again_later(tmp_path):
    counts, now = Counts(), [1000.0]
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    recorder = counts.recorder(str(blocker / "events.sqlite3"), retry_s=60.0, clock=lambda: now[0])
    assert recorder.record([impression(1)]) == 1  # the caller cannot tell: queued, then dropped by the writer
    assert recorder.flush(30)
    recorder.record([impression(2)])  # within the retry period: not even tried
    assert recorder.flush(30)
    assert counts.dropped == {"store_unavailable": 2} and counts.stored == 0
    blocker.unlink()
    now[0] += 61  # the folder can be made now, and the retry is due
    recorder.record([impression(3)])
    assert recorder.flush(30) and counts.stored == 1
    recorder.close()


def test_retention_deletes_old_events_when_the_writer_starts(tmp_path):
    url, now = str(tmp_path / "events.sqlite3"), [100 * 86_400.0]
    past = Counts().recorder(url, clock=lambda: now[0] - 10 * 86_400)  # written 10 days ago
    past.record([impression(2)])
    assert past.flush(30)
    recent = Counts().recorder(url, retention_ms=7 * DAY_MS, clock=lambda: now[0])
    recent.record([impression(3)])
    assert recent.flush(30)
    assert [event.query for event, _ in open_store(url).impressions()] == ["query 3"]
