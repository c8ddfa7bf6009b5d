"""Prometheus metrics of one gateway: requests by route and status, time per pipeline stage, model fallbacks.

Each app has its own registry, so several apps in one process (tests) count apart. The per-request counts and
the stage clock reach their labelled children through ``Children``: ``labels`` takes a lock and checks the label
values at every call (5 us), a dictionary look-up of the child kept does not (1 us).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.context_managers import Timer
from prometheus_client.metrics import MetricWrapperBase

Metric = TypeVar("Metric", bound=MetricWrapperBase)

# Milliseconds matter here: a reranked search takes 10-30 ms on two cores (README).
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Children(Generic[Metric]):
    """The labelled children of one metric, each looked up by ``labels`` once and kept (thread-safe: ``labels``
    hands every thread the same child, and a dictionary's item is set atomically)."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Metric] = {}

    def __call__(self, *values: str) -> Metric:
        """The child of ``values``, as ``metric.labels(*values)``."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class GatewayMetrics:
    """The gateway's counters and histograms, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "esrr_http_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.search_seconds = Histogram(
            "esrr_search_seconds",
            "Time to rank one search, first stage to merge",
            buckets=BUCKETS_S,
            registry=self.registry,
        )
        self.stage_seconds = Histogram(
            "esrr_search_stage_seconds",
            "Time in each stage of the pipeline",
            ["stage"],
            buckets=BUCKETS_S,
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "esrr_model_fallbacks",
            "Searches answered in BM25 order because no worker scored them in time",
            registry=self.registry,
        )
        # What each search's answer is ranked by (``ranking_outcome``): applications' libraries send requests of
        # their own, and this says whether their window was reranked, from outside the answer they filter.
        self.searches = Counter(
            "esrr_searches",
            "Searches answered, by what ranked them: reranked (a stage reordered the window), skipped (on purpose: "
            "a sort, no words; esrr.skipped says why), fallback (the model did not answer), bm25 (nothing to reorder)",
            ["ranking"],
            registry=self.registry,
        )
        # Events (POST /_esrr/events, es_rerank/learning/recorder.py): taken, written, and dropped by reason.
        self.events_received = Counter(
            "esrr_events_received", "Events accepted by POST /_esrr/events, by type", ["type"], registry=self.registry
        )
        self.events_stored = Counter("esrr_events_stored", "Events written to the event store", registry=self.registry)
        self.events_dropped = Counter(
            "esrr_events_dropped",
            "Events dropped: queue_full (the writer is behind), "
            "store_error or store_unavailable (the store cannot be written)",
            ["reason"],
            registry=self.registry,
        )
        self.requests_by = Children(self.requests)  # (route, status) -> its counter
        self.searches_by = Children(self.searches)  # ranking -> its counter
        self._stages = Children(self.stage_seconds)

    def stage(self, name: str) -> Timer:
        """A ``pipeline.StageClock`` that records each stage's time (``Histogram.time``: wall seconds, observed at the
        stage's end, an exception's included)."""
        return self._stages(name).time()


def ranking_outcome(esrr: Mapping[str, Any]) -> str:
    """The ``esrr_searches`` label of a search answered with the ``esrr`` section ``esrr`` (``search_response``):
    the window's first stage alone is named "BM25" (``WindowScores``), any stage that scored it adds its name."""
    if esrr.get("fallback"):
        return "fallback"
    if esrr.get("skipped"):
        return "skipped"
    return "bm25" if esrr.get("ranker") == "BM25" else "reranked"
