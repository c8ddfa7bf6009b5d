"""ServedSearch checks whether the judged-neighbour votes belong to the served index when it starts and when it
follows a reindex, so that no search computes the corpus digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking import neighbours as neighbours_module
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import ranked

OLD = [Document("a", "Green tea", "green tea and cancer"), Document("b", "Vitamin D", "vitamin d and bones")]
NEW = [OLD[0], Document("c", "Coffee", "coffee and the heart")]  # as many documents, other ids


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many corpora's ids were digested, counted as the votes check them."""
    counted: list[int] = []
    real = neighbours_module.doc_ids_digest

    def counting(doc_ids):
        counted.append(len(doc_ids))
        return real(doc_ids)

    monkeypatch.setattr(neighbours_module, "doc_ids_digest", counting)
    return counted


def test_the_votes_are_checked_at_start_and_when_a_reindex_is_followed_not_in_a_search(tmp_path: Path, digests):
    build_embedded_index(OLD, tmp_path, version="v1", progress=False)
    backend = EmbeddedBackend.open_current(tmp_path)
    # The votes' identity names another build of the same documents: only the digest can tell that they belong.
    votes = JudgedNeighbours(
        {"q1": "green tea"},
        {"q1": {"a": 1}},
        corpus=CorpusIdentity(2, neighbours_module.doc_ids_digest(["a", "b"]), "v0", "other"),
    )
    digests.clear()
    served = ServedSearch(SearchPipeline(backend, 10, neighbours=votes), check_every_s=3600)
    assert digests == [2]  # at start
    assert ranked(served.pipeline(), "green tea", 2).ranker == "BM25 + judged neighbours"
    assert digests == [2]  # the search read the checked answer
    build_embedded_index(NEW, tmp_path, version="v2", progress=False)
    assert served.follow() and digests == [2, 2]  # the new index, checked as it is followed
    ranking = ranked(served.pipeline(), "green tea", 2)
    assert ranking.ranker.startswith("BM25 (judged neighbours not applied: built for another corpus (2 documents")
    assert "holds other document ids" in ranking.ranker and digests == [2, 2]
