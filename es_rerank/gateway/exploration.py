"""Exploration in the gateway (``ESRR_EXPLORE``, ``es_rerank.ranking.exploration``): which searches may explore,
and their first page with its last places drawn from below it.

The searches that may explore are those an experiment would interleave (``takes_part``: a
scored first page); with ``ESRR_EXPERIMENT`` set, its pages are interleaved instead. The page's
hits the served answer already rendered are reused; only the drawn ones are read.
"""

from __future__ import annotations

import random
from typing import Any

from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.experiment import rendered_hits
from es_rerank.ranking.answer import Answer
from es_rerank.ranking.exploration import Exploration, explored_page
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.request import SearchRequest


def load_exploration(settings: GatewaySettings) -> Exploration | None:
    """The exploration ``ESRR_EXPLORE`` asks for, None for none (a share of 0, or an experiment running)."""
    if not settings.explore or settings.experiment:
        return None
    return Exploration(settings.explore, settings.explore_slots, settings.explore_depth)


def exploring_page(
    exploration: Exploration,
    answered: Answer,
    asked: SearchRequest,
    backend: Any,
    prepared: object,
    max_bytes: int | None,
) -> tuple[list[RankedHit], list[dict[str, Any]], list[int]] | None:
    """The exploring first page of ``answered``: its hits, each one's rendered ``_source`` and highlight, and the
    places (1-based) that show drawn documents; None when this search does not explore."""
    drawn = explored_page(exploration, answered.page, answered.ranking, random.Random(), asked.combination)
    if drawn is None:
        return None
    page, places = drawn
    return page, rendered_hits(answered, page, backend, prepared, max_bytes), places
