"""What one gateway app holds for its requests: ``GatewayState``, attached once by ``create_app``.

The routes, the search path, the heavy searches' processes and ``esrr serve`` read it through
``gateway_state`` (typed), never through ``app.extensions`` keys of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app

from es_rerank.gateway.health import ModelProbe
from es_rerank.gateway.heavy_lane import HeavyLane
from es_rerank.gateway.metrics import GatewayMetrics
from es_rerank.learning.recorder import EventRecorder
from es_rerank.ranking.experiment import Experiment
from es_rerank.ranking.exploration import Exploration
from es_rerank.ranking.served import ServedSearch

EXTENSION = "esrr"  # the app's one entry in ``app.extensions``, Flask's place for an extension's state


@dataclass(frozen=True)
class GatewayState:
    """The served pipeline and what serves it: metrics, the model probe, the interleaving experiment
    (``ESRR_EXPERIMENT``, None for none), the heavy searches' lane and the events recorder (None with
    ``ESRR_EVENTS=false``)."""

    served: ServedSearch
    metrics: GatewayMetrics
    probe: ModelProbe
    heavy_lane: HeavyLane
    experiment: Experiment | None = None
    events: EventRecorder | None = None
    exploration: Exploration | None = None  # ESRR_EXPLORE


def attach_state(app: Flask, state: GatewayState) -> None:
    """Give ``app`` its state; once, by ``create_app``."""
    if EXTENSION in app.extensions:
        raise RuntimeError("this app already has its gateway state; build another app with create_app")
    app.extensions[EXTENSION] = state


def gateway_state(app: Flask | None = None) -> GatewayState:
    """The state of ``app`` (default: the app of the request or app context under way)."""
    state = (app or current_app).extensions[EXTENSION]
    assert isinstance(state, GatewayState), "the app was not built by create_app"
    return state
