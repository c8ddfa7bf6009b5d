"""Exploration (``ESRR_EXPLORE``): on a bounded share of first pages, the last few places show documents the served
ranking put just below the page, so that clicks can judge documents it does not yet show.

Learning from clicks (``esrr learn``) can only judge what people were shown: a ranker that
always shows a query the same ten documents never learns about the eleventh. With
exploration on, each scored first page is, with probability ``share``, changed in its last
``slots`` places: each of them shows a document drawn at random (without replacement) from
the served ranking's places ``size + 1`` to ``depth``, in the order drawn; the page's first
``size - slots`` places are the served ones, unchanged. The click model corrects for the
lower places being read less (their examination is fitted per position), and a drawn
document that people click is judged like any other. The cost is bounded: at most
``slots`` places of ``share`` of the first pages, the top of every page untouched.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from es_rerank.ranking.merge import REPLACE, Combination, RankedHit, merge
from es_rerank.ranking.pipeline import Ranking

SETTING = "ESRR_EXPLORE"


@dataclass(frozen=True)
class Exploration:
    """How often a first page explores (``share``), how many of its last places do (``slots``), and how deep in the
    served ranking the shown documents are drawn from (``depth``)."""

    share: float
    slots: int = 3
    depth: int = 30

    def served_order(self, ranking: Ranking, combination: Combination = REPLACE) -> list[RankedHit]:
        """The served ranking's first ``depth`` hits, in its order (the page is its first ``size``)."""
        hits, stages = ranking.first_stage_hits(), ranking.window_stages()
        scored = len(stages[0][1]) if stages else 0
        return merge(hits, stages[-1][1] if scored else None, scored, combination, self.depth)


def explored_page(
    exploration: Exploration,
    page: list[RankedHit],
    ranking: Ranking,
    rng: random.Random,
    combination: Combination = REPLACE,
) -> tuple[list[RankedHit], list[int]] | None:
    """The served first ``page`` of ``ranking`` with its last places showing documents drawn from below it, and
    those places (1-based); None when this page does not explore (the draw, or nothing below it to show)."""
    if exploration.share <= 0 or not page or rng.random() >= exploration.share:
        return None
    shown = {item.hit.doc_id for item in page}
    below = [item for item in exploration.served_order(ranking, combination) if item.hit.doc_id not in shown]
    slots = min(exploration.slots, len(page), len(below))
    if not slots:
        return None
    kept = len(page) - slots
    return page[:kept] + rng.sample(below, slots), list(range(kept + 1, len(page) + 1))
