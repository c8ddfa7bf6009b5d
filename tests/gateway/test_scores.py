"""A hit's ``_score`` through the gateway: the same on every page it appears on, never negative, the reranked window
above the BM25 tail, ``max_score`` the whole result's.

The embedded index holds NFCorpus documents; the reranker is a deterministic function of the query and the
document (negative half the time, as a model's scores are), so what is tested is the real merge and response.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from es_rerank.backends.base import Hit
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline, StageClock, no_clock
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import CorpusStats
from index_setup.embedded_index import build_embedded_index
from tests.artifact_home import read_documents

WINDOW = 40
QUERIES = ("cancer risk", "vitamin d", "breast cancer and diet", "omega 3 fatty acids", "green tea", "obesity")


class HashReranker:
    """A model score in [-10, 10) from the query and the document's id alone."""

    name = "hash"

    def skipping(self) -> None:
        return None

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        return np.array(
            [zlib.crc32(f"{query}|{hit.doc_id}".encode()) % 2000 / 100 - 10 for hit in hits], dtype=np.float32
        )

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    home: Path = tmp_path_factory.mktemp("scores")
    build_embedded_index(read_documents(1500), home / "indexes" / "embedded", version="v1", progress=False)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    served = ServedSearch(SearchPipeline(backend, WINDOW, HashReranker()), 3600)
    return create_app(served, GatewaySettings(home=home)).test_client()


def _page(client, query: str, offset: int, size: int, **esrr) -> dict:
    body = {
        "query": {"match": {"text": query}},
        "from": offset,
        "size": size,
        **({"ext": {"esrr": esrr}} if esrr else {}),
    }
    response = client.post("/esrr-docs/_search", json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["hits"]


@pytest.mark.parametrize("mode", ["replace", "total", "multiply"])
def test_a_hit_scores_the_same_on_every_page_and_never_below_zero(client, mode):
    for query in QUERIES:
        whole = _page(client, query, 0, WINDOW + 30, score_mode=mode)
        assert len(whole["hits"]) > WINDOW + 10, "the query must reach past the window"
        scores = {hit["_id"]: hit["_score"] for hit in whole["hits"]}
        assert all(score >= 0 for score in scores.values())
        ordered = [hit["_score"] for hit in whole["hits"]]
        assert ordered == sorted(ordered, reverse=True)
        reranked = [hit["_score"] for hit in whole["hits"] if hit["fields"]["reranked"] == [True]]
        tail = [hit for hit in whole["hits"] if hit["fields"]["reranked"] == [False]]
        assert len(reranked) == WINDOW and min(reranked) > max(hit["_score"] for hit in tail)
        assert all(hit["_score"] == hit["fields"]["bm25_score"][0] for hit in tail)  # the tail is BM25's
        for size in (1, 7, 10, 25):
            for offset in range(0, len(whole["hits"]) - size + 1, 3):
                page = _page(client, query, offset, size, score_mode=mode)
                assert {hit["_id"]: hit["_score"] for hit in page["hits"]} == {
                    hit["_id"]: scores[hit["_id"]] for hit in whole["hits"][offset : offset + size]
                }
                assert page["max_score"] == whole["max_score"] == ordered[0]


def test_the_window_sits_a_point_above_the_tail_at_its_edge(client):
    hits = _page(client, "vitamin d", WINDOW - 2, 4)["hits"]  # two of the window's last, two of the tail's first
    assert [hit["fields"]["reranked"] for hit in hits] == [[True], [True], [False], [False]]
    assert hits[1]["_score"] >= hits[2]["_score"] + 1.0 and hits[3]["_score"] >= 0


def test_a_page_without_hits_keeps_the_whole_results_max_score_and_size_0_has_none(client):
    top = _page(client, "green tea", 0, 1)["max_score"]
    assert _page(client, "green tea", 900, 10)["max_score"] in (top, None)
    assert _page(client, "green tea", 0, 0)["max_score"] is None
