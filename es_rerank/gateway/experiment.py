"""The running interleaving experiment in the gateway (``ESRR_EXPERIMENT``, ``es_rerank.ranking.experiment``):
which searches take part, and their first page drawn from the served ranking and the candidate's.

A search takes part when it is a scored first page: from 0, at least one hit, ranked by score
(not sorted by a field, scrolled, paged with search_after, nor skipped). Every other search
is answered as before. The page's
hits the served answer already rendered are reused; only the candidate's own are read.
"""

from __future__ import annotations

import random
from typing import Any

from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.answer import Answer
from es_rerank.ranking.experiment import Experiment, parse_experiment
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.request import SearchRequest


def load_experiment(settings: GatewaySettings, pipeline: SearchPipeline) -> Experiment | None:
    """The experiment ``ESRR_EXPERIMENT`` names for ``pipeline``'s index, None for none; ``ExperimentError`` says
    why it cannot run."""
    spec = parse_experiment(settings.experiment)
    return None if spec is None else Experiment.load(spec, pipeline.backend.stats)


def takes_part(asked: SearchRequest) -> bool:
    """Whether a search is interleaved: a first page of at least one hit, ranked by score (no scroll, no
    search_after: their pages follow one order)."""
    return (
        asked.offset == 0
        and asked.size >= 1
        and asked.skipped is None
        and not asked.sorts_by_field
        and "scroll" not in asked.passthrough
        and "search_after" not in asked.body
    )


def interleaved_page(
    experiment: Experiment,
    answered: Answer,
    asked: SearchRequest,
    backend: Any,
    prepared: object,
    max_bytes: int | None,
) -> tuple[list[RankedHit], list[dict[str, Any]], list[str]]:
    """The interleaved first page of ``answered``: its hits, each one's rendered ``_source`` and highlight, and the
    team that picked it."""
    drafted = experiment.interleave(answered.ranking, asked.text, asked.size, random.Random(), asked.combination)
    page = [item for item, _ in drafted]
    return page, rendered_hits(answered, page, backend, prepared, max_bytes), [team for _, team in drafted]


def rendered_hits(
    answered: Answer, page: list[RankedHit], backend: Any, prepared: object, max_bytes: int | None
) -> list[dict[str, Any]]:
    """Each hit of ``page`` (a first page other than the served one) rendered: the served answer's rendering where
    it showed the hit, else read from ``backend`` (only the hits it did not show are read)."""
    rendered = {item.hit.doc_id: shown for item, shown in zip(answered.page, answered.shown)}
    missing = [item.hit for item in page if item.hit.doc_id not in rendered]
    if missing:
        rendered.update((hit.doc_id, shown) for hit, shown in zip(missing, backend.page(prepared, missing, max_bytes)))
    return [rendered[item.hit.doc_id] for item in page]
