"""One search answered, whoever asks: the request's body prepared, its answer weighed, ranked and its page read.

The one path of every search: the gateway's ``_search`` (and ``_msearch``, the site page),
``esrr search``, ``batch-search``, ``eval`` and the benchmarks all call ``answer`` on a
``SearchRequest`` (a shell's query text is ``request.text_request``), so what the shell,
the quality tables and the benchmarks measure is what ``_search`` serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from es_rerank.backends.answer_budget import AnswerLimits
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.pipeline import Ranking, SearchPipeline, StageClock, no_clock
from es_rerank.ranking.request import SearchRequest


@dataclass(frozen=True)
class Answer:
    """A search's ranking, the page of it asked for (``from``, ``size``) and each page hit's ``_source`` and
    highlight as the body asks."""

    ranking: Ranking
    page: list[RankedHit]
    shown: list[dict[str, Any]]


def answer(
    pipeline: SearchPipeline,
    asked: SearchRequest,
    limits: AnswerLimits | None = None,
    clock: StageClock = no_clock,
    prepared: object | None = None,
) -> Answer:
    """``asked`` ranked by ``pipeline`` and its page read, its answer within ``limits`` (None: unbounded, for a
    shell reading its own index); ``prepared`` is ``asked.body`` already prepared by the pipeline's backend.

    The backend's errors pass through (``QueryRefused`` for a body it will not answer,
    ``AnswerTooLarge`` past the limits), as do the reranker's.
    """
    backend = pipeline.backend
    if prepared is None:
        prepared = backend.prepare(asked.body)
    if limits is not None:
        backend.check_answer(prepared, asked.size, limits)
    ranking = pipeline.rank(
        asked.text,
        asked.depth,
        prepared,
        clock=clock,
        window=0 if asked.skipped or not asked.size else asked.window,  # size 0: counts
        combination=asked.combination,
    )
    page = ranking.ranked[asked.offset : asked.offset + asked.size]
    shown = backend.page(prepared, [item.hit for item in page], None if limits is None else limits.max_bytes)
    return Answer(ranking, page, shown)
