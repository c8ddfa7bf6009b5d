"""The health route's model probe (``es_rerank.gateway.health``): one probe at a time, shared for a moment.

The pipeline searches a real embedded index; the rerankers are plain classes that
count their calls, so what the probe costs the workers can be read off them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from es_rerank.backends.base import Hit
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.health import ModelProbe
from es_rerank.payload import WorkerSetupError
from es_rerank.ranking.pipeline import ScoringUnavailable, SearchPipeline, StageClock, no_clock
from es_rerank.stats import CorpusStats
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS


class CountingReranker:
    """Scores every hit 0, once ``gate`` is open when one is given; raises ``error`` instead when one is set."""

    name = "counting"

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.gate: threading.Event | None = None
        self.entered = threading.Event()  # set when a call is under way
        self.windows: list[int] = []

    def skipping(self) -> None:
        return None

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        self.windows.append(len(hits))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        if self.error is not None:
            raise self.error
        return np.zeros(len(hits), dtype=np.float32)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    root: Path = tmp_path_factory.mktemp("health") / "embedded"
    build_embedded_index(list(TINY_DOCS), root, version="v1", progress=False)
    return EmbeddedBackend.open_current(root)


def test_an_answer_is_shared_while_fresh_and_a_new_pipeline_is_probed_at_once(backend: EmbeddedBackend) -> None:
    reranker = CountingReranker()
    pipeline, probe = SearchPipeline(backend, 10, reranker), ModelProbe(fresh_s=60)
    assert [probe.fallback(pipeline) for _ in range(5)] == [None] * 5
    assert len(reranker.windows) == 1
    probe.fallback(SearchPipeline(backend, 10, reranker))  # a reindex followed: another pipeline
    assert len(reranker.windows) == 2
    stale = ModelProbe(fresh_s=0)
    stale.fallback(pipeline), stale.fallback(pipeline)
    assert len(reranker.windows) == 4


def test_callers_take_the_last_answer_while_a_probe_runs(backend: EmbeddedBackend) -> None:
    # Event order, not a stopwatch: the probe's reranker is held until the caller has answered, so a
    # caller that waited for the probe would answer only after the safety timer opened the gate.
    slow = CountingReranker(error=ScoringUnavailable("no worker answered"))
    pipeline, probe = SearchPipeline(backend, 10, slow), ModelProbe(fresh_s=0)
    assert probe.fallback(pipeline) == "no worker answered"
    slow.error, slow.gate, slow.entered = None, threading.Event(), threading.Event()  # a worker is back
    events: list[str] = []
    running = threading.Thread(target=lambda: (probe.fallback(pipeline), events.append("probe ended")))
    safety = threading.Timer(60, slow.gate.set)  # only a caller that waits for the probe meets it
    running.start(), safety.start()
    try:
        assert slow.entered.wait(60)  # the probe holds the lock, its reranker is running
        assert probe.fallback(pipeline) == "no worker answered"  # the last answer, while the probe runs
        events.append("caller answered")
    finally:
        slow.gate.set()
        safety.cancel()
        running.join()
    assert events == ["caller answered", "probe ended"]
    assert probe.fallback(pipeline) is None and len(slow.windows) == 3


def test_a_refusing_worker_raises_every_time(backend: EmbeddedBackend) -> None:
    refusing = CountingReranker(error=WorkerSetupError("no statistics for index version 'v1'"))
    probe, pipeline = ModelProbe(fresh_s=60), SearchPipeline(backend, 10, refusing)
    for _ in range(2):
        with pytest.raises(WorkerSetupError, match="no statistics"):
            probe.fallback(pipeline)
    assert len(refusing.windows) == 2  # a refusal is not kept: the next check asks again
