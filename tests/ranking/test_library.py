"""``es_rerank.open_search`` and the assembly behind it (``ranking/assemble.py``): the served pipeline from a home
folder, and domain errors (``es_rerank.errors``) naming the fix, never a command line's."""

from __future__ import annotations

from pathlib import Path

import pytest

import es_rerank
from es_rerank import OptionsError, PipelineOptions, SetupError, Switch, open_search
from es_rerank.ranking.assemble import model_note
from es_rerank.settings import BrokerSettings
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS, ranked


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ESRR_HOME with the embedded index of the tiny corpus, and no model or votes file."""
    home = tmp_path_factory.mktemp("library")
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    return home


def test_open_search_serves_the_index_with_the_stages_set_up_there(home: Path) -> None:
    pipeline = open_search(home=home)
    assert (pipeline.backend.index, pipeline.window) == ("v1", 500)
    assert pipeline.reranker is None and pipeline.neighbours is None and pipeline.feedback is not None
    assert ranked(pipeline, "vitamin d and bone", 10).ranker == "BM25 + candidate feedback"
    plain = open_search(home, PipelineOptions(0), feedback_weight=0.0)  # settings by field name
    assert plain.feedback is None and ranked(plain, "vitamin d and bone", 10).ranker == "BM25"


def test_why_no_model_scores_is_a_note_not_an_error(home: Path) -> None:
    settings = BrokerSettings(home=home)
    assert "no model at" in (model_note(settings, PipelineOptions(500)) or "")
    assert model_note(settings, PipelineOptions(500, rerank=Switch.OFF)) is None
    assert model_note(settings, PipelineOptions(0)) is None


@pytest.mark.parametrize(
    "options, named",
    [
        (PipelineOptions(500, rerank=Switch.OFF, via_worker=True), "drop --no-rerank"),
        (PipelineOptions(0, feedback=Switch.ON), "give a window above 0"),
        (PipelineOptions(0, rerank=Switch.ON), "--rerank reorders the top --window hits"),
    ],
)
def test_options_that_contradict_each_other_are_an_options_error(home: Path, options, named) -> None:
    with pytest.raises(OptionsError, match=named):
        open_search(home, options)


def test_what_cannot_be_served_is_a_setup_error_naming_the_fix(home: Path, tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="no embedded index in .*esrr index build"):
        open_search(home=tmp_path)
    with pytest.raises(SetupError, match="ESRR_CHECKPOINT names .*missing.pt, which does not exist"):
        open_search(home, checkpoint=str(tmp_path / "missing.pt"))
    with pytest.raises(SetupError, match="ESRR_FEEDBACK_WEIGHT: Input should be greater than or equal to 0") as bad:
        open_search(home, feedback_weight=-1)
    assert not isinstance(bad.value, OptionsError)
    with pytest.raises(OptionsError, match="ESRR_FEEDBACK_WEIGHT is 0"):
        open_search(home, PipelineOptions(500, feedback=Switch.ON), feedback_weight=0.0)


def test_the_package_exports_the_entry_point_lazily() -> None:
    assert es_rerank.open_search is open_search and "open_search" in es_rerank.__all__
    with pytest.raises(AttributeError):
        es_rerank.no_such_name  # noqa: B018
