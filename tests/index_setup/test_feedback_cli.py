"""Candidate feedback in ``esrr search`` (embedded backend, no model: BM25 is the ranker it refines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from es_rerank.backends import open_backend
from es_rerank.backends.base import text_hits
from es_rerank.cli import main
from es_rerank.ranking.feedback import FeedbackParams, document_vectors, with_feedback
from es_rerank.settings import CommonSettings
from tests.index_setup.test_cli import RECORDS, assert_clean_failure, assert_ok, write_corpus

MORE_RECORDS = [
    *RECORDS,
    {"_id": "d4", "title": "Curcumin in colorectal tumour growth", "text": "Turmeric slows colorectal tumours."},
    {"_id": "d5", "title": "Cancer statistics", "text": "Cancer incidence by country."},
]


@pytest.fixture
def indexed(esrr, tmp_path: Path) -> None:
    assert_ok(esrr("index", "build", "--data", str(write_corpus(tmp_path / "corpus.jsonl", MORE_RECORDS))))


def esrr_with(home: Path, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"ESRR_HOME": str(home), "ESRR_BACKEND": "embedded", **env})


def rows(output: str) -> tuple[str, list[tuple[str, float]]]:
    """The line naming the ranker, and each row's id and score (the table's header is the third line)."""
    ranker, _, _, *lines = output.splitlines()
    return ranker, [(line.split()[3], float(line.split()[1])) for line in lines]


@pytest.mark.usefixtures("indexed")
def test_search_refines_bm25_with_the_votes_of_similar_hits(esrr, home: Path) -> None:
    ranker, shown = rows(assert_ok(esrr("search", "cancer curcumin")))
    assert ranker.endswith(" → BM25 + candidate feedback")
    served = open_backend(CommonSettings(home=home))
    hits = text_hits(served, "cancer curcumin", 500)
    vectors = document_vectors([h.terms for h in hits], served.stats)
    expected = with_feedback(np.array([h.score for h in hits]), vectors, FeedbackParams.from_settings(CommonSettings()))
    order = np.argsort(-expected, kind="stable")
    assert [doc_id for doc_id, _ in shown] == [hits[i].doc_id for i in order]
    lifted = expected + _lift(hits, expected)
    assert [score for _, score in shown] == pytest.approx([lifted[i] for i in order], abs=1e-3)


@pytest.mark.usefixtures("indexed")
def test_weight_zero_or_no_feedback_gives_the_bm25_order(esrr, home: Path) -> None:
    plain = assert_ok(esrr("search", "cancer curcumin", "--no-feedback"))
    assert rows(plain)[0] == "ranked by: BM25 (no stage reordered the hits)"
    assert assert_ok(esrr_with(home, "search", "cancer curcumin", ESRR_FEEDBACK_WEIGHT="0")) == plain
    result = esrr_with(home, "search", "cancer", "--feedback", ESRR_FEEDBACK_WEIGHT="0")
    assert result.exit_code == 2 and "ESRR_FEEDBACK_WEIGHT is 0" in result.output


@pytest.mark.usefixtures("indexed")
def test_settings_k_changes_the_votes(esrr, home: Path) -> None:
    served = open_backend(CommonSettings(home=home))
    hits = text_hits(served, "cancer", 500)
    vectors = document_vectors([h.terms for h in hits], served.stats)
    expected = with_feedback(np.array([h.score for h in hits]), vectors, FeedbackParams(k=1, weight=2.0))
    _, shown = rows(assert_ok(esrr_with(home, "search", "cancer", ESRR_FEEDBACK_K="1", ESRR_FEEDBACK_WEIGHT="2")))
    assert sorted(score for _, score in shown) == pytest.approx(sorted(expected + _lift(hits, expected)), abs=1e-3)


def _lift(hits, refined: np.ndarray) -> float:
    """What the merge adds to the window's scores so the lowest sits one point above its lowest BM25 score
    (es_rerank/ranking/merge.py): a _score is never negative and the same on every page."""
    return max(min(hit.score for hit in hits), 0.0) + 1.0 - float(refined.min())


@pytest.mark.usefixtures("indexed")
@pytest.mark.parametrize(
    "env, name",
    [
        ({"ESRR_FEEDBACK_K": "0"}, "ESRR_FEEDBACK_K"),
        ({"ESRR_FEEDBACK_WEIGHT": "-1"}, "ESRR_FEEDBACK_WEIGHT"),
        ({"ESRR_FEEDBACK_WEIGHT": "nan"}, "ESRR_FEEDBACK_WEIGHT"),
    ],
)
def test_bad_feedback_settings_fail_cleanly(home: Path, env: dict[str, str], name: str) -> None:
    assert_clean_failure(esrr_with(home, "search", "cancer", **env), name)


@pytest.mark.usefixtures("indexed")
def test_feedback_needs_a_window(esrr) -> None:
    result = esrr("search", "cancer", "--window", "0", "--feedback")
    assert result.exit_code == 2 and "--feedback reorders the top --window hits" in result.output


@pytest.mark.usefixtures("indexed")
def test_feedback_reads_the_hits_own_terms_not_statistics_rows(esrr, monkeypatch) -> None:
    """A hit missing from the statistics (another index version behind an alias) still gets its feedback."""
    from es_rerank.stats import CorpusStats, StatsError

    def no_row(self, doc_id: str) -> int:
        raise StatsError(f"document {doc_id!r} is not in these statistics")

    monkeypatch.setattr(CorpusStats, "row", no_row)
    ranker, shown = rows(assert_ok(esrr("search", "cancer curcumin")))
    assert "candidate feedback" in ranker and shown
