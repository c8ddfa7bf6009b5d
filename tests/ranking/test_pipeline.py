"""The served pipeline over a real embedded index: which stages run, in what order, on which hits.

Six documents, two topics (tea: a, b, f; bone: c, d) and one stranger (e). The
reranker here is a plain class that favours bone documents, so every stage's effect
can be checked against the stage's own function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from es_rerank.backends.base import Hit, text_hits
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams, document_vectors, with_feedback
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours, NeighbourParams, fuse
from es_rerank.ranking.pipeline import STAGES, ScoringUnavailable, SearchPipeline, StageClock, no_clock
from es_rerank.stats import CorpusStats, Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import ranked

DOCS = {
    "a": ("green tea", "green tea catechins and health"),
    "b": ("green tea", "catechins in tea"),
    "c": ("bone health", "bone density and tea"),
    "d": ("bone density", "bone health"),
    "e": ("unrelated", "health"),
    "f": ("black tea", "tea catechins"),
}
QUERY = "tea health"
FEEDBACK = FeedbackParams(k=2, weight=0.5)


class BoneFirst:
    """A reranker that scores bone documents up: 1 per 'bone' in the title, minus the BM25 rank / 100."""

    name = "bone-first"

    def __init__(self) -> None:
        self.windows: list[list[str]] = []

    def skipping(self) -> None:
        return None

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        self.windows.append([h.doc_id for h in hits])
        with clock("model"):
            # The title from the corpus: hits carry none where stored fields are read for the page only.
            return np.array(
                [DOCS[h.doc_id][0].count("bone") - rank / 100 for rank, h in enumerate(hits)], dtype=np.float32
            )

    def close(self) -> None:
        pass


class Unanswered(BoneFirst):
    """A reranker whose worker never answers."""

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        raise ScoringUnavailable("no worker answered on queue 'rerank'")


class Recorder:
    """A clock that lists the stages in the order they ran."""

    def __init__(self) -> None:
        self.stages: list[str] = []

    def __call__(self, stage: str):
        self.stages.append(stage)
        return no_clock(stage)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    root = tmp_path_factory.mktemp("pipeline") / "embedded"
    build_embedded_index([Document(i, t, a) for i, (t, a) in DOCS.items()], root, version="v1", progress=False)
    return EmbeddedBackend.open_current(root)


def votes_for(corpus: CorpusIdentity | None) -> JudgedNeighbours:
    """Votes of two training queries, recorded as built for ``corpus``."""
    return JudgedNeighbours(
        {"q1": "tea catechins", "q2": "bone density"},
        {"q1": {"b": 2, "f": 1}, "q2": {"d": 1}},
        NeighbourParams(k=1, power=1.0, weight=2.0),
        corpus,
    )


@pytest.fixture(scope="module")
def neighbours(backend: EmbeddedBackend) -> JudgedNeighbours:
    return votes_for(CorpusIdentity.of(backend.stats))


def ids(ranking) -> list[str]:
    return [item.hit.doc_id for item in ranking.ranked]


def test_without_a_stage_the_order_is_bm25s(backend: EmbeddedBackend) -> None:
    ranking = ranked(SearchPipeline(backend, window=500), QUERY, 3)
    assert ids(ranking) == [h.doc_id for h in text_hits(backend, QUERY, 3)]
    assert ranking.ranker == "BM25" and ranking.depth == 3 and ranking.retrieved == 3
    assert not any(item.reranked for item in ranking.ranked)


def test_the_reranker_reorders_the_whole_window_not_only_the_hits_shown(backend: EmbeddedBackend) -> None:
    reranker = BoneFirst()
    ranking = ranked(SearchPipeline(backend, window=500, reranker=reranker), QUERY, 2)
    every = [h.doc_id for h in text_hits(backend, QUERY, 500)]
    assert len(every) == 6 and reranker.windows == [every] and ranking.depth == 500 and ranking.retrieved == 6
    assert ids(ranking) == ["c", "d"]  # the two bone documents, from BM25 ranks 2 and 6
    assert ranking.ranker == "bone-first" and all(item.reranked for item in ranking.ranked)


def test_a_short_window_leaves_the_bm25_tail_below_it(backend: EmbeddedBackend) -> None:
    bm25 = [h.doc_id for h in text_hits(backend, QUERY, 500)]
    ranking = ranked(SearchPipeline(backend, window=2, reranker=BoneFirst()), QUERY, 500)
    assert sorted(ids(ranking)[:2]) == sorted(bm25[:2]) and ids(ranking)[2:] == bm25[2:]
    assert [item.reranked for item in ranking.ranked] == [True, True] + [False] * (len(bm25) - 2)


def test_feedback_and_votes_refine_the_models_scores_in_that_order(
    backend: EmbeddedBackend, neighbours: JudgedNeighbours
) -> None:
    clock = Recorder()
    ranking = ranked(SearchPipeline(backend, 500, BoneFirst(), FEEDBACK, neighbours), QUERY, 500, clock)
    window = text_hits(backend, QUERY, 500)
    model = BoneFirst()(QUERY, window, backend.stats)
    fed = with_feedback(model, document_vectors([h.terms for h in window], backend.stats), FEEDBACK)
    expected = fuse(fed, neighbours.scores(QUERY, [h.doc_id for h in window]), neighbours.params.weight)
    by_id = dict(zip((h.doc_id for h in window), expected))
    assert [item.combined for item in ranking.ranked] == pytest.approx(sorted(expected, reverse=True))
    assert all(item.combined == pytest.approx(by_id[item.hit.doc_id]) for item in ranking.ranked)
    assert ranking.ranker == "bone-first + candidate feedback + judged neighbours"
    assert clock.stages == ["retrieve", "model", "feedback vectors", "feedback votes", "neighbours", "merge"]
    assert [s for s in STAGES if s in clock.stages] == clock.stages  # STAGES lists them in the order they run


@pytest.mark.parametrize(
    "corpus, reason",
    [
        (None, "does not say which corpus it was built for"),
        (
            CorpusIdentity(6, "0" * 64, "other", "b1"),
            "built for another corpus (6 documents, index other); the served index v1 holds other document ids",
        ),
        (CorpusIdentity(3633, "0" * 64, "nfcorpus", "b2"), "the served index v1 holds 6 documents"),
    ],
)
def test_votes_of_another_corpus_are_not_applied_and_the_ranker_says_why(
    backend: EmbeddedBackend, corpus: CorpusIdentity | None, reason: str
) -> None:
    foreign = SearchPipeline(backend, 500, BoneFirst(), neighbours=votes_for(corpus))
    ranking, plain = ranked(foreign, QUERY, 500), ranked(SearchPipeline(backend, 500, BoneFirst()), QUERY, 500)
    assert ids(ranking) == ids(plain) and [i.score for i in ranking.ranked] == [i.score for i in plain.ranked]
    assert ranking.ranker.startswith("bone-first (judged neighbours not applied: ") and reason in ranking.ranker
    assert reason in foreign.neighbours_problem()
    rebuilt = replace(votes_for(CorpusIdentity.of(backend.stats)).corpus, build_id="another build")
    reindexed = SearchPipeline(backend, 500, BoneFirst(), neighbours=votes_for(rebuilt))
    assert reindexed.neighbours_problem() is None  # the same documents, indexed again: the votes apply
    assert ranked(reindexed, QUERY, 500).ranker == "bone-first + judged neighbours"


def test_without_a_model_the_votes_refine_bm25(backend: EmbeddedBackend) -> None:
    ranking = ranked(SearchPipeline(backend, 500, feedback=FEEDBACK), QUERY, 500)
    window = text_hits(backend, QUERY, 500)
    fed = with_feedback(
        np.array([h.score for h in window]), document_vectors([h.terms for h in window], backend.stats), FEEDBACK
    )
    assert ranking.ranker == "BM25 + candidate feedback"
    assert [item.combined for item in ranking.ranked] == pytest.approx(sorted(fed, reverse=True))


def test_cached_feedback_vectors_give_the_same_ranking(backend: EmbeddedBackend) -> None:
    cache = DocumentVectorCache(max_documents=100)
    plain = SearchPipeline(backend, 500, BoneFirst(), FEEDBACK)
    cached = SearchPipeline(backend, 500, BoneFirst(), FEEDBACK, feedback_vectors=cache)
    for query in (QUERY, "bone density", QUERY):  # cold, partly warm, warm
        assert [(i.hit.doc_id, i.score) for i in ranked(cached, query, 500).ranked] == [
            (i.hit.doc_id, i.score) for i in ranked(plain, query, 500).ranked
        ]
    assert len(cache) == 6


def test_window_zero_turns_every_stage_off(backend: EmbeddedBackend, neighbours: JudgedNeighbours) -> None:
    reranker = BoneFirst()
    pipeline = SearchPipeline(backend, 0, reranker, FEEDBACK, neighbours)
    ranking = ranked(pipeline, QUERY, 2)
    assert not pipeline.reorders and ranking.depth == 2 and ranking.ranker == "BM25" and reranker.windows == []


def test_a_query_without_hits_runs_no_stage_after_retrieval(
    backend: EmbeddedBackend, neighbours: JudgedNeighbours
) -> None:
    clock = Recorder()
    ranking = ranked(SearchPipeline(backend, 500, BoneFirst(), FEEDBACK, neighbours), "zebra", 10, clock)
    assert ranking.ranked == [] and ranking.retrieved == 0 and clock.stages == ["retrieve", "merge"]


def test_a_model_that_cannot_answer_keeps_bm25s_order_and_says_why(backend: EmbeddedBackend) -> None:
    ranking = ranked(SearchPipeline(backend, 500, Unanswered()), QUERY, 3)
    assert ids(ranking) == ids(ranked(SearchPipeline(backend, 500), QUERY, 3))
    assert ranking.ranker == "BM25" and ranking.fallback == "no worker answered on queue 'rerank'"


def test_the_model_probe_scores_the_first_documents_as_a_search_would(backend: EmbeddedBackend) -> None:
    reranker = BoneFirst()
    assert SearchPipeline(backend, 500, reranker).model_fallback() is None
    assert SearchPipeline(backend, 2, reranker).model_fallback() is None
    assert reranker.windows == [backend.stats.doc_ids, backend.stats.doc_ids[:2]]  # a search's window, at most
    assert SearchPipeline(backend, 500, Unanswered()).model_fallback() == "no worker answered on queue 'rerank'"
    assert SearchPipeline(backend, 500).model_fallback() is None  # no model: nothing to fall back from
    unused = BoneFirst()
    assert SearchPipeline(backend, 0, unused).model_fallback() is None and unused.windows == []


def test_the_pipeline_does_not_import_torch_or_scipy_until_feedback_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = "import sys, es_rerank.ranking.pipeline; print('torch' in sys.modules, 'scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_guard_blends_the_models_scores_with_bm25s_before_the_feedback(backend: EmbeddedBackend) -> None:
    from es_rerank.ranking.guard import guarded

    clock = Recorder()
    pipeline = SearchPipeline(backend, 500, BoneFirst(), FEEDBACK, guard_weight=0.5)
    ranking = ranked(pipeline, QUERY, 500, clock)
    window = text_hits(backend, QUERY, 500)
    bm25 = np.array([h.score for h in window])
    blended = guarded(BoneFirst()(QUERY, window, backend.stats), bm25, 0.5)
    expected = with_feedback(blended, document_vectors([h.terms for h in window], backend.stats), FEEDBACK)
    assert [item.combined for item in ranking.ranked] == pytest.approx(sorted(expected, reverse=True))
    assert ranking.ranker == "bone-first + BM25 guard + candidate feedback"
    assert clock.stages == ["retrieve", "model", "guard", "feedback vectors", "feedback votes", "merge"]
    stages = pipeline.score_window(QUERY, window, backend.stats).stages
    assert [str(name) for name, _ in stages] == [
        "BM25",
        "bone-first",
        "bone-first + BM25 guard",
        "bone-first + BM25 guard + candidate feedback",
    ]
    unanswered = ranked(SearchPipeline(backend, 500, Unanswered(), guard_weight=0.5), QUERY, 500)
    assert unanswered.ranker == "BM25" and unanswered.fallback  # no model scores: nothing to guard


def test_a_guard_weight_tends_to_bm25s_order() -> None:
    from es_rerank.ranking.guard import guarded

    model, bm25 = np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0])
    assert np.argsort(-guarded(model, bm25, 0.0)).tolist() == [0, 1, 2]
    assert np.argsort(-guarded(model, bm25, 10.0)).tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="one BM25 score per model score"):
        guarded(model, bm25[:2], 1.0)


class Skipping(BoneFirst):
    """A reranker behind an open breaker: it skips its workers and says why."""

    reason = "the model stage is skipped for 4.0 s more: 3 searches in a row got no worker answer"

    def skipping(self) -> str | None:
        return self.reason

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        self.windows.append([h.doc_id for h in hits])
        raise ScoringUnavailable(self.reason)


def test_while_the_workers_are_skipped_the_window_is_refined_unless_told_otherwise(backend):
    refined = ranked(SearchPipeline(backend, 6, Skipping(), FEEDBACK), QUERY, 2)
    assert refined.fallback == Skipping.reason and "candidate feedback" in refined.ranker and refined.depth == 6
    reranker = Skipping()
    cheapest = ranked(SearchPipeline(backend, 6, reranker, FEEDBACK, refine_while_skipped=False), QUERY, 2)
    assert (cheapest.fallback, cheapest.ranker, cheapest.depth) == (Skipping.reason, "BM25", 2)
    assert [item.hit.doc_id for item in cheapest.ranked] == [hit.doc_id for hit in text_hits(backend, QUERY, 2)]
    assert reranker.windows == []  # not even asked
    answered = ranked(SearchPipeline(backend, 6, BoneFirst(), FEEDBACK, refine_while_skipped=False), QUERY, 2)
    assert answered.fallback is None and answered.depth == 6  # a reranker that does not skip: reranked as ever
    unranked = ranked(SearchPipeline(backend, 6, Skipping(), FEEDBACK, refine_while_skipped=False), QUERY, 2, window=0)
    assert unranked.fallback is None  # no window asked for: no model would have scored it, so no fallback
