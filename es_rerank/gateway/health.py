"""The gateway's health: what it serves, and the readiness probe of the model, one probe at a time, its answer
shared for a moment.

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
from typing import Any

from es_rerank.backends.base import BackendError, text_hits
from es_rerank.gateway.errors import error_body, public_reason
from es_rerank.payload import PayloadError, WorkerSetupError
from es_rerank.ranking.dispatch import WorkerReranker
from es_rerank.ranking.pipeline import PROBE_QUERY, SearchPipeline
from es_rerank.ranking.served import ServedSearch

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
        if last is None or last.pipeline is not pipeline:
            self._lock.acquire()
        elif not self._lock.acquire(blocking=False):
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


def health_body(served: ServedSearch, probe: ModelProbe) -> dict[str, Any]:
    """Green when the index and the model answer; yellow (with the reasons) when searches keep BM25's order or
    the version current on disk cannot be served; a ``BackendError`` (or a worker's refusal) when searches cannot
    be answered at all (``red_body``). ``model_answers`` says ``reranks`` the same way for ``GET /``."""
    pipeline = served.pipeline()
    text_hits(pipeline.backend, PROBE_QUERY, 1)
    fallback = probe.fallback(pipeline)
    body = {"status": "green", **serving_state(pipeline, fallback is None and reranks_now(pipeline))}
    if fallback is not None:
        body.update(status="yellow", fallback=fallback)
    if served.problem is not None:  # logged with its paths by ServedSearch
        body.update(
            status="yellow",
            problem=f"the index version current on disk cannot be served, so "
            f"[{pipeline.backend.index}] still is: {public_reason(served.problem)}",
        )
    return body


def model_answers(pipeline: SearchPipeline, probe: ModelProbe) -> bool:
    """Whether searches are reranked now, as the health route says it: the same shared probe, and the breaker;
    False where the probe cannot ask (the index's files changed, a worker refuses: health is a 503 then)."""
    if pipeline.reranker is None or pipeline.window == 0:
        return False
    try:
        fallback = probe.fallback(pipeline)
    except (BackendError, WorkerSetupError, PayloadError):
        return False
    return fallback is None and reranks_now(pipeline)


def red_body(index: str, reason: str) -> dict[str, Any]:
    """The health route's 503: status red, the served index, and why searches cannot be answered (an
    Elasticsearch error body, ``status`` naming the colour as ``_cluster/health`` does)."""
    return {**error_body("search_phase_execution_exception", reason, 503), "status": "red", "index": index}


def reranks_now(pipeline: SearchPipeline) -> bool:
    """Whether searches are sent to a model now: one is set, and no breaker skips the workers."""
    reranker = pipeline.reranker
    return not isinstance(reranker, WorkerReranker) or reranker.available


def serving_state(pipeline: SearchPipeline, model_answers: bool) -> dict[str, Any]:
    """The served index, its documents, whether a model scores the window now (which one a worker
    names per search, in ``esrr.ranker``), and whether the judged-neighbour votes apply to this index."""
    serving: dict[str, Any] = {
        "index": pipeline.backend.index,
        "documents": pipeline.backend.stats.n_docs,
        "reranks": pipeline.reranker is not None and pipeline.window > 0 and model_answers,
    }
    if pipeline.neighbours is not None:
        problem = pipeline.neighbours_problem()
        serving["judged_neighbours"] = "applied" if problem is None else f"not applied: {problem}"
    return serving
