"""The served ranking of one query: BM25 top-window, the model, the two votes, the merge.

One place composes the stages of every search (``es_rerank.ranking.answer``: ``_search``,
``esrr search``, ``eval``, ``bench search``), so the benchmark measures exactly what is
served. Torch-free: the model comes in as a ``Reranker`` (``worker.local.LocalReranker`` in
this process, or ``es_rerank.ranking.dispatch.WorkerReranker`` through the broker).

Each stage runs inside ``clock(stage name)``; the default clock does nothing, the
benchmark's records how long each took (``STAGES`` lists them in order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from es_rerank.backends.base import FirstStage, Hit, SearchBackend
from es_rerank.ranking.merge import REPLACE, Combination, RankedHit, merge
from es_rerank.ranking.neighbours import JudgedNeighbours, fuse
from es_rerank.ranking.ranker_name import BM25, RankerName, Refinement
from es_rerank.stats import CorpusStats

if TYPE_CHECKING:  # scipy loads only where feedback runs
    from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams

log = logging.getLogger(__name__)

StageClock = Callable[[str], AbstractContextManager]
PROBE_QUERY = "health"  # any word: a probe asks whether the model answers, not what it scores
STAGES = ("retrieve", "features", "model", "guard", "feedback vectors", "feedback votes", "neighbours", "merge")


def no_clock(stage: str) -> AbstractContextManager:
    """A clock that times nothing."""
    return nullcontext()


class ScoringUnavailable(RuntimeError):
    """The model could not score this query in time (no worker, broker down, deadline passed).

    The pipeline then keeps BM25's order for the query, lets the other stages refine it,
    and says why in ``Ranking.fallback``: a search answers without the model rather than
    not at all. Errors that would repeat on every query (a worker set up wrong, a
    malformed request) are other exceptions and pass through.
    """


class Reranker(Protocol):
    """The model's scores for one query's window of hits, under the statistics the hits came with.

    Raises ``ScoringUnavailable`` when it cannot answer this query in time.
    """

    @property
    def name(self) -> str:
        """The model's name, as rankers show it ("delta-32-lex3"); a worker's names the model it serves."""
        ...

    def __call__(
        self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock
    ) -> np.ndarray: ...

    def skipping(self) -> str | None:
        """Why a query would skip the model now (a breaker open), without admitting one; None: it would ask it."""
        ...

    def close(self) -> None:
        """Release what scoring holds (threads, the model)."""


@dataclass(frozen=True)
class Ranking:
    """One query's final order and what made it."""

    ranked: list[RankedHit]  # cut to the k hits asked for
    ranker: str  # e.g. "delta-32-lex3 + candidate feedback"
    retrieved: int  # hits the first stage returned
    depth: int  # hits the first stage was asked for
    fallback: str | None = None  # why the model did not score this query (``ScoringUnavailable``)
    first_stage: FirstStage | None = None  # the backend's whole answer to the search body
    scores: WindowScores | None = None  # the window's scores after each stage (``esrr eval``'s rows)

    def first_stage_hits(self) -> Sequence[Hit]:
        """The first stage's hits, best first: all it returned where it was kept, else the ranked ones."""
        return self.first_stage.hits if self.first_stage is not None else [item.hit for item in self.ranked]

    def window_stages(self) -> list[tuple[RankerName, np.ndarray]]:
        """The window's scores after each stage that ran (``WindowScores.stages``); none where not kept."""
        return self.scores.stages if self.scores is not None else []


@dataclass(frozen=True)
class WindowScores:
    """One query's window scored by each stage that ran, in order: what ``rank`` merges and ``esrr eval`` rows.

    ``stages`` pairs the ranker after each stage (``RankerName``: "BM25", "delta-32-lex3",
    "delta-32-lex3 + candidate feedback") with the window's scores then; the last pair is the
    final order. ``skipped`` says why a stage that is set did not run (votes of another corpus).
    """

    stages: list[tuple[RankerName, np.ndarray]]
    fallback: str | None = None
    skipped: str | None = None

    @property
    def ranker(self) -> str:
        """What made the final scores, with the stage left out and why, if one was."""
        name = str(self.stages[-1][0])
        return f"{name} (judged neighbours not applied: {self.skipped})" if self.skipped else name

    @property
    def final(self) -> np.ndarray:
        """The window's final scores."""
        return self.stages[-1][1]


@dataclass(frozen=True)
class SearchPipeline:
    """BM25 top-``window`` reordered by each stage that is set; ``window`` 0 keeps BM25's order.

    ``feedback_vectors`` keeps the feedback's document vectors between queries of a
    long-lived process (built anew for every window without it). ``guard_weight`` above 0
    blends the model's scores with BM25's (``es_rerank.ranking.guard``). ``refine_while_skipped``
    False answers BM25's page alone, without the feedback and votes, while the reranker skips its
    workers (``ESRR_BREAKER_REFINE``): the cheapest fallback, in another order than the refined one.
    Every stage reads the backend's statistics at the time of the query, so a reload after a reindex
    holds.
    """

    backend: SearchBackend
    window: int
    reranker: Reranker | None = None
    feedback: FeedbackParams | None = None
    neighbours: JudgedNeighbours | None = None
    feedback_vectors: DocumentVectorCache | None = None
    guard_weight: float = 0.0
    refine_while_skipped: bool = True  # False: while the reranker skips its workers, BM25's page alone

    @property
    def reorders(self) -> bool:
        """Whether any stage reorders the window."""
        return self.window > 0 and (
            self.reranker is not None or self.feedback is not None or self.neighbours is not None
        )

    def depth(self, k: int) -> int:
        """Hits to retrieve for ``k`` shown: the whole window when a stage reorders it (the votes too)."""
        return max(k, self.window) if self.reorders else k

    def model_fallback(self) -> str | None:
        """Why a search would keep BM25's order now (``ScoringUnavailable``); None: the model answers, or none is set.

        Scores a window of the served index's first documents, as large as a search's,
        the way a search would: the probe crosses what a search crosses (broker, worker,
        its statistics and model) and must fit the same deadline. A worker that refuses
        the request raises, as it would for every search.
        """
        stats = self.backend.stats
        if self.reranker is None or self.window == 0 or stats.n_docs == 0:
            return None
        with self.reading():
            probe = [
                Hit(stats.doc_ids[row], 0.0, "", stats.doc_terms(row)) for row in range(min(self.window, stats.n_docs))
            ]
            try:
                self.reranker(PROBE_QUERY, probe, stats)
            except ScoringUnavailable as error:
                return str(error)
        return None

    def reading(self) -> AbstractContextManager:
        """The backend's reads of its files, checked before and after (``EmbeddedBackend.reading``): a ranking
        reads its hits' statistics in every stage, so it reads inside one."""
        return self.backend.reading()

    def neighbours_problem(self, stats: CorpusStats | None = None) -> str | None:
        """Why the votes are set but not applied to the served index (None: applied, or no votes set)."""
        if self.neighbours is None:
            return None
        return self.neighbours.mismatch(stats if stats is not None else self.backend.stats)

    def score_window(
        self, query: str, window: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock
    ) -> WindowScores:
        """The window's scores after each stage; the backend's and the reranker's errors pass through."""
        stages = [(BM25, np.array([h.score for h in window], dtype=np.float32))]
        fallback = skipped = None
        if not window:
            return WindowScores(stages)
        if self.reranker is not None:
            try:
                scores = self.reranker(query, window, stats, clock)
                stages.append(
                    (RankerName(self.reranker.name), scores)
                )  # named after the call: a worker names its model
            except ScoringUnavailable as error:
                fallback = str(error)  # the votes refine BM25's order
            if fallback is None and self.guard_weight > 0:
                from es_rerank.ranking.guard import guarded

                name, scores = stages[-1]
                with clock("guard"):
                    stages.append((name.then(Refinement.GUARD), guarded(scores, stages[0][1], self.guard_weight)))
        if self.feedback is not None:
            from es_rerank.ranking.feedback import document_vectors, with_feedback

            with clock("feedback vectors"):
                terms = [h.terms for h in window]
                vectors = (
                    document_vectors(terms, stats)
                    if self.feedback_vectors is None
                    else self.feedback_vectors.vectors([h.doc_id for h in window], terms, stats)
                )
            name, scores = stages[-1]
            with clock("feedback votes"):
                stages.append((name.then(Refinement.FEEDBACK), with_feedback(scores, vectors, self.feedback)))
        if self.neighbours is not None:
            skipped = self.neighbours_problem(stats)
            if skipped is None:
                name, scores = stages[-1]
                with clock("neighbours"):
                    votes = self.neighbours.scores(query, [h.doc_id for h in window])
                    stages.append(
                        (name.then(Refinement.NEIGHBOURS), fuse(scores, votes, self.neighbours.params.weight))
                    )
        return WindowScores(stages, fallback, skipped)

    def rank(
        self,
        query: str,
        k: int,
        prepared: object,
        clock: StageClock = no_clock,
        window: int | None = None,
        combination: Combination = REPLACE,
    ) -> Ranking:
        """The top ``k`` of a search body the backend ``prepared``, ``query`` being what the model reads; the
        backend's and the reranker's errors pass through (``es_rerank.ranking.answer`` asks for a request).

        ``window`` (at most this pipeline's) reorders fewer hits, 0 none; ``combination`` says
        how the window's scores combine.
        """
        with self.reading():  # a file changed during the ranking: a BackendError, never its answer
            return self._rank(query, k, prepared, clock, window, combination)

    def _rank(
        self, query: str, k: int, prepared: object, clock: StageClock, window: int | None, combination: Combination
    ) -> Ranking:
        window = self.window if window is None else min(window, self.window)
        skipped_model = None
        if window > 0 and self.reorders and not self.refine_while_skipped:
            skipped_model = self._skipping_model()
            if skipped_model is not None:  # the cheapest answer during an outage: no window to retrieve or refine
                window = 0
        reorders = window > 0 and self.reorders
        depth = max(k, window) if reorders else k
        with clock("retrieve"):
            first_stage, stats = self._first_stage(prepared, depth)
            hits = first_stage.hits
        scored_hits = hits[:window] if reorders else []
        scored = self.score_window(query, scored_hits, stats, clock)
        with clock("merge"):
            ranked = merge(hits, scored.final if scored_hits else None, len(scored_hits), combination, k)
        return Ranking(ranked, scored.ranker, len(hits), depth, skipped_model or scored.fallback, first_stage, scored)

    def _skipping_model(self) -> str | None:
        """Why the reranker would skip its workers for this query (a breaker open); None: it would ask them."""
        return self.reranker.skipping() if self.reranker is not None else None

    def _first_stage(self, prepared: object, depth: int) -> tuple[FirstStage, CorpusStats]:
        """A prepared body's first stage with the statistics of the index it came from."""
        # A backend whose index was deleted under it (a prune) follows its alias during a search, this
        # one's or another thread's: hits searched before the move must not meet the new statistics.
        stats = self.backend.stats
        answer = self.backend.first_stage(prepared, depth)
        if self.backend.stats is not stats:
            stats = self.backend.stats
            answer = self.backend.first_stage(prepared, depth)
        return answer, stats
