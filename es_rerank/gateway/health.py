"""The gateway's readiness probe of the model: one probe at a time, its answer shared for a moment.

A probe costs what a search's model stage costs, and a whole scoring deadline when no
worker answers. Health checks come from load balancers, orchestrators and people, often
several at once: each starting its own probe would queue worker tasks in front of the
searches and hold the gateway's threads for a deadline each. So a probe younger than
``FRESH_S`` answers every caller, and while one runs, callers that have an earlier
answer take it instead of waiting.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from es_rerank.ranking.pipeline import SearchPipeline

FRESH_S = 1.0  # short beside any health-check interval, long beside a burst of checks


@dataclass(frozen=True)
class _Answer:
    pipeline: SearchPipeline
    fallback: str | None
    at: float


class ModelProbe:
    """``SearchPipeline.model_fallback`` for the health route, probed at most once at a time. Thread-safe."""

    def __init__(self, fresh_s: float = FRESH_S) -> None:
        self.fresh_s = fresh_s
        self._lock = threading.Lock()
        self._last: _Answer | None = None

    def fallback(self, pipeline: SearchPipeline) -> str | None:
        """Why ``pipeline``'s searches keep BM25's order now (None: the model answers); a worker's refusal raises."""
        last = self._last
        if not self._lock.acquire(blocking=last is None or last.pipeline is not pipeline):
            return last.fallback  # a probe of this pipeline is under way: the last answer stands until it ends
        try:
            last = self._last
            if last is not None and last.pipeline is pipeline and time.monotonic() - last.at < self.fresh_s:
                return last.fallback
            fallback = pipeline.model_fallback()
            self._last = _Answer(pipeline, fallback, time.monotonic())
            return fallback
        finally:
            self._lock.release()
