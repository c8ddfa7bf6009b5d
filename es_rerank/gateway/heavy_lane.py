"""Which searches are heavy, and the lane that runs only a few of them at once (pure weighing, one semaphore).

A gateway process serves ``ESRR_GATEWAY_THREADS`` requests at once over one interpreter
lock. Eight searches at the limits of issue 32's cost model (a sloppy phrase at its budget,
three wildcards, 200 hits highlighted: ~130 ms of CPU each) held every thread and the lock,
and a plain search beside them waited: its p99 rose 16x (`esrr bench attack`, the
"heaviest" row). Elasticsearch meets such load with bounded thread pools that answer 429
when full; here a heavy search takes one of ``ESRR_GATEWAY_HEAVY_SLOTS`` slots for its
ranking and page, waits at most ``ESRR_GATEWAY_HEAVY_WAIT_S`` for one among at most
``ESRR_GATEWAY_HEAVY_QUEUE`` others, and is refused with a 429
(``es_rejected_execution_exception``, which the official clients retry) beyond them. A
waiting search holds one of the server's threads, so the queue is what keeps threads free:
a light search never waits for the lane, nor for a thread held by heavy ones. With
``apart`` (``ESRR_GATEWAY_HEAVY_PROCESS``, ``esrr serve``) a slot is a process of its own
(``heavy_process``), so a heavy search does not hold the light ones' interpreter lock either;
a heavy search repeated against a full lane is refused before it is read (``heavy_refusal``).

What makes a search heavy is read from the prepared request before any work: the hits it
renders, the stored text its highlight reads, and what its query asks of the embedded
index (sloppy phrase work, wildcard words, words looked up). A default search (10 hits, a
highlight of title and abstract, a keyword query) is light; the thresholds are a tenth or
so of the cost limits, where a search's CPU passes about four times a plain one's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from es_rerank.backends.highlight import FieldHighlight
from es_rerank.backends.query_tree import QueryCost
from es_rerank.gateway.errors import TooManyHeavySearches
from es_rerank.gateway.heavy_refusal import weighed_heavy

HEAVY_HITS = 100  # hits rendered with their _source (size 1,000 costs ~90 ms of CPU on NFCorpus)
HEAVY_HIGHLIGHT_CHARS = 20_000  # stored text highlighted (10 hits x title and abstract x 5 x 100 is 10,000)
WHOLE_FIELD_CHARS = 2_000  # a field highlighted whole (number_of_fragments 0), about an abstract
HEAVY_PHRASE_COST = 100  # phrase words x slop (the limit is ESRR_GATEWAY_MAX_PHRASE_COST, 400)
HEAVY_TERMS = 256  # words looked up (the limit is ESRR_GATEWAY_MAX_QUERY_TERMS, 1,024)


def highlighted_chars(hits: int, highlight: Sequence[FieldHighlight]) -> int:
    """The stored text a highlight of ``hits`` hits reads at most: each field's fragments times their size."""
    return hits * sum(
        WHOLE_FIELD_CHARS if field.number_of_fragments == 0 else field.number_of_fragments * field.fragment_size
        for field in highlight
    )


def is_heavy(hits: int, highlight: Sequence[FieldHighlight], cost: QueryCost) -> bool:
    """Whether a search rendering ``hits`` hits with ``highlight``, whose query costs ``cost``, takes the heavy lane."""
    return (
        hits > HEAVY_HITS
        or highlighted_chars(hits, highlight) > HEAVY_HIGHLIGHT_CHARS
        or cost.phrase_cost > HEAVY_PHRASE_COST
        or cost.heavy_wildcards > 0
        or cost.terms > HEAVY_TERMS
    )


class RunsApart(Protocol):
    """Where heavy searches run outside this process (``heavy_process.HeavyProcesses``)."""

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(pipeline, *args)`` elsewhere, with that place's served pipeline."""
        ...

    def close(self) -> None:
        """Stop running searches there."""
        ...


class HeavyLane:
    """At most ``slots`` heavy searches at once per process and ``queue`` more waiting (``wait_s`` at most) for a
    slot; a heavy search beyond them is a 429 at once, so heavy searches never hold more than ``slots + queue`` of
    the server's threads and light ones always find one."""

    def __init__(self, slots: int, queue: int, wait_s: float, apart: RunsApart | None = None) -> None:
        self.slots, self.queue, self.wait_s = slots, queue, wait_s
        self.apart = apart  # processes of their own that run the heavy searches (heavy_process.py); None: here
        self._free = threading.BoundedSemaphore(slots)
        self._admitted = 0  # running or waiting
        self._count = threading.Lock()

    def taken(self, heavy: bool) -> AbstractContextManager[None]:
        """Run the block in a slot of the lane when ``heavy`` (at once otherwise); ``TooManyHeavySearches`` when the
        lane and its queue are full, or no slot frees within ``wait_s``."""
        return self._slot() if heavy else nullcontext()

    @contextmanager
    def _slot(self) -> Iterator[None]:
        weighed_heavy()  # the same request again is refused before it is read while the lane is full
        with self._count:
            full = self._admitted >= self.slots + self.queue
            if not full:
                self._admitted += 1
        if full:
            raise self.refusal_when_full()
        try:
            if not self._free.acquire(timeout=self.wait_s):
                raise self._refusal(f"none finished within {self.wait_s:g} s")
            try:
                yield
            finally:
                self._free.release()
        finally:
            with self._count:
                self._admitted -= 1

    def run_apart(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(pipeline, *args)`` in a slot of the lane, run by a process of the heavy searches' own with its
        pipeline (``HeavyProcesses.run``); ``TooManyHeavySearches`` as ``taken``."""
        assert self.apart is not None, "run_apart needs the lane's processes"
        with self.taken(True):
            return self.apart.run(function, *args)

    @property
    def full(self) -> bool:
        """Whether a heavy search would be refused at once (every slot and the queue taken)."""
        return self._admitted >= self.slots + self.queue

    def refusal_when_full(self) -> TooManyHeavySearches:
        """The 429 of a heavy search that finds the lane and its queue full."""
        return self._refusal(f"{self.queue} more are waiting for a slot")

    def close(self) -> None:
        """Stop the lane's processes, if it has any."""
        if self.apart is not None:
            self.apart.close()

    def _refusal(self, why: str) -> TooManyHeavySearches:
        return TooManyHeavySearches(
            f"{self.slots} heavy searches (many hits, long highlights, sloppy phrases or wildcards) are already "
            f"running in this gateway process and {why} (ESRR_GATEWAY_HEAVY_SLOTS={self.slots}, "
            f"ESRR_GATEWAY_HEAVY_QUEUE={self.queue}, ESRR_GATEWAY_HEAVY_WAIT_S={self.wait_s:g}); retry later, or ask "
            "for fewer hits or a lighter highlight"
        )
