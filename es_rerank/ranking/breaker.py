"""A circuit breaker on the model stage: while no worker answers, searches stop asking and keep BM25's order at once.

Without it every search of an outage waits the whole scoring deadline (2 s) for an
answer that will not come, and leaves a task on the broker. After ``failures``
searches in a row got no worker answer (``ScoringUnavailable``: no answer in time, the
broker unreachable, its queue full) the breaker opens: for ``cooldown_s`` searches skip
the workers and say why. Then one search is let through as the probe (half-open) while
the others keep skipping; a worker's answer closes the breaker, another failure opens it
for a new cool-down. Any answer from a worker closes it, a refusal too: a worker that
refuses is there, and its refusal must reach the caller.

``dispatch.WorkerReranker`` asks ``admit`` before it builds a request, and reports how
the broker round trip ended. Thread-safe; each process has its own (a gateway process
learns of an outage from its own searches).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CLOSED, OPEN, PROBING = "closed", "open", "probing"


class CircuitBreaker:
    """Opens after ``failures`` failures in a row, for ``cooldown_s``; then admits one probe at a time."""

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1 or cooldown_s <= 0:
            raise ValueError(f"failures must be at least 1 and cooldown_s above 0, got {failures} and {cooldown_s}")
        self.failures, self.cooldown_s, self._clock = failures, cooldown_s, clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._in_a_row = 0
        self._opened_at = 0.0
        self._last_failure = ""

    @property
    def state(self) -> str:
        """closed (calls go through), open (calls skip) or probing (one call is trying)."""
        return self._state

    def admit(self) -> str | None:
        """None: make the call (and report its outcome); else why it must skip the workers now."""
        with self._lock:
            if self._state == CLOSED:
                return None
            left = self._opened_at + self.cooldown_s - self._clock()
            if self._state == OPEN and left <= 0:
                self._state = PROBING
                log.info("model stage: cool-down over, one search probes the workers")
                return None
            return self._skip_reason(left)

    def skipping(self) -> str | None:
        """Why a call would skip the workers now, as ``admit`` would say it, without admitting one (None: it
        would go through, or probe them)."""
        with self._lock:
            if self._state == CLOSED:
                return None
            left = self._opened_at + self.cooldown_s - self._clock()
            return None if self._state == OPEN and left <= 0 else self._skip_reason(left)

    def _skip_reason(self, left: float) -> str:
        wait = f"for {left:.1f} s more" if self._state == OPEN else "until the search probing them is answered"
        return (
            f"the model stage is skipped {wait}: {self._in_a_row} searches in a row got no worker answer, "
            f"the last because {self._last_failure}"
        )

    def succeeded(self) -> None:
        """A worker answered (scores, or a refusal): close."""
        with self._lock:
            if self._state != CLOSED:
                log.warning("model stage: a worker answered, searches are reranked again (breaker closed)")
            self._state, self._in_a_row = CLOSED, 0

    def failed(self, reason: str) -> None:
        """No worker answered: count it, and open once there were ``failures`` in a row (or the probe failed)."""
        with self._lock:
            self._in_a_row += 1
            self._last_failure = reason
            if self._state == PROBING or (self._state == CLOSED and self._in_a_row >= self.failures):
                if self._state == CLOSED:
                    log.warning(
                        "model stage: %d searches in a row got no worker answer; skipping the workers "
                        "for %g s (breaker open): %s",
                        self._in_a_row,
                        self.cooldown_s,
                        reason,
                    )
                self._state, self._opened_at = OPEN, self._clock()

    def abandoned(self) -> None:
        """The call ended without saying whether a worker is there (an error before sending): free a probe's slot."""
        with self._lock:
            if self._state == PROBING:
                self._state = OPEN  # the cool-down is over already: the next call probes
