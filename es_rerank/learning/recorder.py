"""Recording events without slowing a search: a bounded queue in memory, one writer thread, failing open.

``record`` only stamps the events with the time and puts them on the queue (no I/O); a
full queue drops them, counted (``on_dropped("queue_full", n)``). The writer thread,
started on the first event (so a forked gateway process starts its own), takes up to a
batch at a time and writes it to the store in one transaction. A store that cannot be
opened or written drops the batch (``"store_error"``) and is tried again after
``retry_s``; meanwhile batches are dropped (``"store_unavailable"``). Nothing here ever
raises into the request that recorded the events, nor waits on the store.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from es_rerank.learning.events import Click, Impression, Received
from es_rerank.learning.store import EventStore, EventStoreError

log = logging.getLogger(__name__)
BATCH = 500
RETENTION_EVERY_S = 3600.0
DROP_REASONS = ("queue_full", "store_error", "store_unavailable")


class EventRecorder:
    """Events put on a bounded queue by request threads and written to a store by one thread of its own."""

    def __init__(
        self,
        open_store: Callable[[], EventStore],
        capacity: int,
        retention_ms: int | None = None,
        *,
        on_dropped: Callable[[str, int], None] = lambda reason, count: None,
        on_stored: Callable[[int], None] = lambda count: None,
        retry_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._open_store = open_store
        self._queue: queue.Queue[Received] = queue.Queue(capacity)
        self._retention_ms = retention_ms
        self._on_dropped, self._on_stored = on_dropped, on_stored
        self._retry_s, self._clock = retry_s, clock
        self._store: EventStore | None = None
        self._failed_at: float | None = None
        self._pruned_at: float | None = None
        self._writer: threading.Thread | None = None
        self._started = threading.Lock()
        self._idle = threading.Condition()
        self._pending = 0  # recorded, not yet written or dropped
        self._stopping = False

    def record(self, events: Sequence[Impression | Click]) -> int:
        """Queue ``events`` stamped with the time now; how many were queued (the rest were dropped, counted)."""
        self._start()
        at_ms = int(self._clock() * 1000)
        queued = 0
        with self._idle:
            self._pending += len(events)
        for event in events:
            try:
                self._queue.put_nowait(Received(event, at_ms))
                queued += 1
            except queue.Full:
                break
        if queued < len(events):
            self._dropped("queue_full", len(events) - queued)
        return queued

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until every recorded event is written or dropped; whether they all were."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (for up to ``timeout_s``), then stop the writer and close the store."""
        self.flush(timeout_s)
        self._stopping = True
        if self._writer is not None:
            self._writer.join(timeout_s)

    def _start(self) -> None:
        if self._writer is not None:
            return
        with self._started:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_forever, name="esrr-events", daemon=True)
                self._writer.start()
                atexit.register(self.close)

    def _dropped(self, reason: str, count: int) -> None:
        self._on_dropped(reason, count)
        self._done(count)

    def _done(self, count: int) -> None:
        with self._idle:
            self._pending -= count
            if self._pending == 0:
                self._idle.notify_all()

    def _write_forever(self) -> None:
        while not self._stopping:
            try:
                batch = [self._queue.get(timeout=0.5)]
            except queue.Empty:
                continue
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(batch)
            except Exception:  # a bug must not stop the writer: later events would only pile up and be dropped
                log.exception("writing %d events failed", len(batch))
                self._dropped("store_error", len(batch))
        if self._store is not None:
            self._store.close()

    def _write(self, batch: list[Received]) -> None:
        store = self._usable_store()
        if store is None:
            self._dropped("store_unavailable", len(batch))
            return
        try:
            store.write(batch)
        except EventStoreError as error:
            self._broken(error)
            self._dropped("store_error", len(batch))
            return
        self._on_stored(len(batch))
        self._prune(store)
        self._done(len(batch))

    def _usable_store(self) -> EventStore | None:
        """The open store; else one opened now, unless the last try failed less than ``retry_s`` ago."""
        if self._store is not None:
            return self._store
        if self._failed_at is not None and self._clock() - self._failed_at < self._retry_s:
            return None
        try:
            self._store = self._open_store()
        except EventStoreError as error:
            self._broken(error)
            return None
        self._failed_at = None
        return self._store

    def _broken(self, error: EventStoreError) -> None:
        """Log the failure (once per retry period) and close the store, to be opened again later."""
        log.warning(
            "events are dropped until the store works again (tried again every %.0f s): %s", self._retry_s, error
        )
        self._failed_at = self._clock()
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # closing a broken connection may fail too; the store is reopened anyway
                log.debug("closing the broken event store failed", exc_info=True)
            self._store = None

    def _prune(self, store: EventStore) -> None:
        """Delete the events older than the retention, once per ``RETENTION_EVERY_S``."""
        now = self._clock()
        if self._retention_ms is None or (self._pruned_at is not None and now - self._pruned_at < RETENTION_EVERY_S):
            return
        self._pruned_at = now
        try:
            deleted = store.delete_before(int(now * 1000) - self._retention_ms)
        except EventStoreError as error:
            log.warning("old events were not deleted: %s", error)
            return
        if deleted:
            log.info("deleted %d events older than the retention", deleted)
