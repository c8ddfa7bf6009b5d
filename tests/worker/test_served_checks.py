"""How the served model fits the served index (coverage, empty titles) and each request's feature scale."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from es_rerank.lex import LEX3, LEX3_WINDOW
from es_rerank.stats import Document, build_stats
from index_setup.embedded_index import build_embedded_index
from worker.inputs import term_rows
from worker.runtime import Runtime
from worker.served_checks import MIN_REQUESTS, MIN_WINDOW, SCALE_REPORT_EVERY, ScaleMonitor, index_fit
from worker.settings import WorkerSettings


def test_coverage_counts_the_first_tokens_the_model_reads(artifacts) -> None:
    from es_rerank.embeddings import Embeddings

    embeddings = Embeddings.load(artifacts.home / "embeddings" / "e-test")
    rows = term_rows(artifacts.stats.vocab.terms, embeddings)
    fit = index_fit(artifacts.stats, rows, LEX3)
    first = np.asarray(artifacts.stats.first_values)
    known = {w for w in artifacts.words[2:]}
    expected = np.mean([artifacts.stats.vocab.terms[t] in known for t in first])
    assert fit.token_coverage == pytest.approx(expected) and 0.8 < fit.token_coverage < 0.95  # ~10% have no vector
    assert any(f"only {fit.token_coverage:.1%} of the first 50 tokens" in w for w in fit.warnings)
    assert fit.empty_titles == 0.0 and f"{fit.token_coverage:.1%} of the documents' first 50 tokens" in fit.summary()


def test_empty_titles_are_said_for_the_papers_title_features_only() -> None:
    stats = build_stats("v", [Document("a", "", "vitamin"), Document("b", "", "bone"), Document("c", "Tea", "tea")])
    rows = np.full(len(stats.vocab), 5, dtype=np.int64)  # every word has a vector
    paper = index_fit(stats, rows, LEX3)
    assert paper.empty_titles == pytest.approx(2 / 3) and paper.token_coverage == 1.0
    assert len(paper.warnings) == 1 and "66.7% of index v's documents have no title" in paper.warnings[0]
    assert index_fit(stats, rows, LEX3_WINDOW).warnings == ()  # the window variant reads them as unknown


def test_the_scale_monitor_warns_when_many_full_windows_drift_then_every_thousandth_window() -> None:
    monitor = ScaleMonitor(
        [*LEX3, "title_idf_jaccard_wz"], np.array([3.5, 0.02, 0.05, 0.0]), np.array([2.5, 0.03, 0.13, 1.0])
    )
    on_scale = np.tile([3.5, 0.02, 0.05, 0.0], (MIN_WINDOW, 1)).astype(np.float32)
    long_query = on_scale.copy()
    long_query[:, 0] = 8.5  # +2 training standard deviations
    assert monitor.observe(long_query[: MIN_WINDOW - 1]) is None and monitor.windows == 0  # too short to count
    said = [monitor.observe(on_scale if i % 4 == 0 else long_query) for i in range(MIN_REQUESTS)]
    assert said[:-1] == [None] * (MIN_REQUESTS - 1)  # too few windows seen to say
    assert said[-1] is not None and "15 of the 20 windows scored so far (75%)" in said[-1]
    assert "this one: abstract_bm25 at +2.0" in said[-1]
    later = [monitor.observe(long_query) for _ in range(SCALE_REPORT_EVERY)]
    assert sum(s is not None for s in later) == 1 and later[-1] is not None
    quiet = ScaleMonitor(list(LEX3), np.array([3.5, 0.02, 0.05]), np.array([2.5, 0.03, 0.13]))
    mostly_on_scale = [quiet.observe(long_query[:, :3] if i % 10 == 0 else on_scale[:, :3]) for i in range(200)]
    assert mostly_on_scale == [None] * 200  # 10% drifting: below the share worth a warning
    window_only = ScaleMonitor(list(LEX3_WINDOW), np.zeros(3), np.ones(3))
    assert window_only.observe(np.full((MIN_WINDOW, 3), 9.0, dtype=np.float32)) is None  # _wz are not watched


class Records(logging.Handler):
    """The records a logger emits, whatever other tests did to its propagation or level (a logging set-up may
    disable loggers that exist when it runs)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_worker_checks_the_served_index_when_it_loads(artifacts, corpus_documents, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    build_embedded_index(
        [Document(d.doc_id, "", d.abstract) for d in corpus_documents[:30]],
        home / "indexes" / "embedded",
        version="untitled",
        progress=False,
    )
    logger, records = logging.getLogger("worker.runtime"), Records()
    logger.addHandler(records)
    level, disabled = logger.level, logger.disabled
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        runtime = Runtime.load(WorkerSettings(home=home))
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
        logger.disabled = disabled
    try:
        described = runtime.describe()["fit to untitled"]
        assert "100.0% of its documents have no title" in described and "WARNING: " in described
        assert any("have no title" in r.getMessage() and r.levelno == logging.WARNING for r in records.records)
    finally:
        runtime.close()
