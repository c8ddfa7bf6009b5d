"""The served pipeline's stages as evaluation rows: exactly what ``_search`` serves, query by query.

Each query's words are the request a client sends for them (``text_request``), answered by
``es_rerank.ranking.answer``, the code path of every search; the window's scores after each
stage that ran (``Ranking.scores``) become a row ("served: delta-32-lex3", "served: delta-32-lex3 +
candidate feedback", ...); the last stage is the served default, the row the verdict is about.
Where a model and the feedback both run, "served: BM25 + candidate feedback" shows the feedback
without the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from tqdm import tqdm

from es_rerank.ranking.answer import answer
from es_rerank.ranking.pipeline import SearchPipeline, WindowScores
from es_rerank.ranking.ranker_name import BM25
from es_rerank.ranking.request import DEFAULT_SIZE, text_request
from training.metrics import Run

SERVED_PREFIX = "served: "
DEFAULT_PREFIX = "served default: "
ADAPTED_PREFIX = "adapted: "  # the same stages served with an `esrr train --adapt` checkpoint (esrr eval --adapted)


class ServedEvaluationError(RuntimeError):
    """The served pipeline could not score a query (no model answered); the message says why."""


@dataclass
class ServedRuns:
    """One run per served stage, the served default's row name, what was left out and why, and each query's
    served page (its first ``DEFAULT_SIZE`` hits and their ``_score``, as ``_search`` answers them)."""

    runs: dict[str, Run] = field(default_factory=dict)
    default: str = ""
    skipped: str | None = None  # why the judged-neighbour votes were not applied
    pages: dict[str, list[tuple[str, float]]] = field(default_factory=dict)


def row_names(stage_names: list[str]) -> list[str]:
    """Row names of a query's stages: "BM25" stays, the others "served: ...", the last "served default: ..."."""
    names = ["BM25"] + [SERVED_PREFIX + name for name in stage_names[1:]]
    if len(names) > 1:  # BM25 alone is no stage of its own
        names[-1] = DEFAULT_PREFIX + stage_names[-1]
    return names


def served_runs(pipeline: SearchPipeline, queries: Mapping[str, str], progress: bool = True) -> ServedRuns:
    """Every stage of ``pipeline`` over each query's window (its ``window`` BM25 hits), as runs."""
    out = ServedRuns()
    without_model = (
        replace(pipeline, reranker=None, neighbours=None)
        if pipeline.reranker is not None and pipeline.feedback is not None
        else None
    )
    stats = pipeline.backend.stats
    names: list[str] | None = None
    for query_id in tqdm(sorted(queries), desc="served stages", unit="query", disable=not progress):
        text = queries[query_id]
        answered = answer(pipeline, text_request(text, DEFAULT_SIZE))
        ranking = answered.ranking
        if ranking.fallback is not None:
            raise ServedEvaluationError(
                f"the model did not score query {query_id} ({ranking.fallback}); an "
                "evaluation of the served stages needs every query scored"
            )
        out.pages[query_id] = [(item.hit.doc_id, item.score) for item in answered.page]
        window = list(ranking.first_stage.hits[: pipeline.window]) if ranking.first_stage is not None else []
        scored = ranking.scores
        if scored is None or len(scored.final) != len(window):  # no stage reorders: BM25's window alone
            scored = WindowScores([(BM25, np.array([h.score for h in window], dtype=np.float32))])
        out.skipped = out.skipped or scored.skipped
        if not window:  # no hit: the query counts 0 in every row
            continue
        stage_names = [str(name) for name, _ in scored.stages]
        if names is None:
            names = row_names(stage_names)
            out.default = names[-1]
        elif row_names(stage_names) != names:  # cannot happen in one process; said rather than mislabelled
            raise ServedEvaluationError(
                f"query {query_id} went through other stages ({stage_names}) than the queries before it ({names})"
            )
        doc_ids = [h.doc_id for h in window]
        for name, (_, scores) in zip(names, scored.stages):
            out.runs.setdefault(name, {})[query_id] = dict(zip(doc_ids, map(float, scores)))
        if without_model is not None:
            _, fed = without_model.score_window(text, window, stats).stages[-1]
            out.runs.setdefault(SERVED_PREFIX + "BM25 + candidate feedback", {})[query_id] = dict(
                zip(doc_ids, map(float, fed))
            )
    if names is None:
        out.default = "BM25"
        out.runs["BM25"] = {}
    feedback_alone = SERVED_PREFIX + "BM25 + candidate feedback"
    if feedback_alone in out.runs:  # shown next to BM25, before the model's rows
        out.runs = {"BM25": out.runs.pop("BM25"), feedback_alone: out.runs.pop(feedback_alone), **out.runs}
    return out
