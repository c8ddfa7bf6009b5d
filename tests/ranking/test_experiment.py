"""The experiment's candidate (``es_rerank.ranking.experiment``), read off the served ranking without a second
search, is the ranking the candidate's own pipeline serves; parse_experiment's forms."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking.experiment import Experiment, ExperimentError, ExperimentSpec, parse_experiment
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours, NeighbourParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index

# Six documents on vitamins, BM25 preferring the lower numbers; the votes lift others.
DOCS = [
    Document(f"d{n}", f"Vitamin study {n}", " ".join(["vitamin"] * (6 - n) + ["bone", "health", "cancer"][: n % 3 + 1]))
    for n in range(6)
]


@pytest.fixture
def backend(tmp_path: Path) -> EmbeddedBackend:
    build_embedded_index(DOCS, tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return EmbeddedBackend.open_current(tmp_path / "indexes" / "embedded")


def _votes(backend: EmbeddedBackend, judged: dict[str, dict[str, int]]) -> JudgedNeighbours:
    queries = {
        query: text
        for query, text in (("q1", "vitamin"), ("q2", "bone health"), ("q3", "cancer risk"))
        if query in judged
    }
    return JudgedNeighbours(
        queries, judged, NeighbourParams(weight=20.0, confidence=0.0), CorpusIdentity.of(backend.stats)
    )


@pytest.mark.parametrize("text", ["vitamin", "vitamin bone", "health"])
def test_the_votes_candidate_is_what_its_own_pipeline_serves(backend, text):
    served_votes = _votes(backend, {"q1": {"d0": 2}, "q2": {"d1": 1}})
    candidate_votes = _votes(backend, {"q1": {"d5": 2}, "q2": {"d4": 2}, "q3": {"d2": 1}})
    prepared = backend.prepare({"query": {"match": {"text": text}}})
    served = SearchPipeline(backend, 10, neighbours=served_votes).rank(text, 10, prepared)
    own = SearchPipeline(backend, 10, neighbours=candidate_votes).rank(text, 10, prepared)
    experiment = Experiment(ExperimentSpec("votes", Path("learned.json")), candidate_votes)
    candidate = experiment.candidate(served, text, 10)
    assert [item.hit.doc_id for item in candidate] == [item.hit.doc_id for item in own.ranked]
    assert [item.hit.doc_id for item in candidate] != [item.hit.doc_id for item in served.ranked]
    bm25 = Experiment(ExperimentSpec("bm25")).candidate(served, text, 10)
    assert [item.hit.doc_id for item in bm25] == [hit.doc_id for hit in served.first_stage.hits[:10]]
    drafted = experiment.interleave(served, text, 3, random.Random(0))
    assert len(drafted) == min(3, len(served.ranked)) and {team for _, team in drafted} <= {"served", "candidate"}


def test_parse_experiment(tmp_path):
    votes = tmp_path / "learned.json"
    votes.write_text("{}")
    assert parse_experiment("") is None and parse_experiment(" BM25 ").name == "bm25"
    assert parse_experiment(f"votes:{votes}") == ExperimentSpec("votes", votes)
    assert parse_experiment(f"votes:{votes}").name == "votes:learned.json"
    for bad in ("votes:", "model:x.pt", "bm25x"):
        with pytest.raises(ExperimentError, match="ESRR_EXPERIMENT"):
            parse_experiment(bad)
