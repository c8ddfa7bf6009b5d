"""Issue 35: the 10,000-hit result window of Elasticsearch (index.max_result_window) on the embedded backend, through
the official client: pages past the first 1,000 hits, the reranked window at its size and the rest in BM25 order,
from + size over 10,000 a 400 as Elasticsearch's, and a 10,000-hit page bounded by the answer budget.

The real app over a real embedded index of 1,500 documents, the window reordered by the candidate feedback (a real
stage that needs no model), so "reranked" is observable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticsearch import BadRequestError

from es_rerank.backends.base import MAX_K
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import official_client
from tests.gateway.test_query_limits import synthetic_documents

DOCS = synthetic_documents(1500, seed=35)
WINDOW = 30
QUERY = {"match": {"text": "the study"}}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("result-window")
    build_embedded_index(DOCS, home / "indexes" / "embedded", version="v1", progress=False)
    return home


def _client(home: Path, port: int, **settings: object):
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    served = ServedSearch(SearchPipeline(backend, WINDOW, feedback=FeedbackParams(2, 1.0)), 3600)
    return official_client(create_app(served, GatewaySettings(home=home, **settings)), port)


@pytest.fixture(scope="module")
def es(home: Path, free_port):
    with _client(home, free_port()) as client:
        yield client


def _matching() -> set[str]:
    return {doc.doc_id for doc in DOCS if {"the", "study"} & set(f"{doc.title} {doc.abstract}".split())}


def test_a_page_of_every_hit_is_served_with_the_window_reranked_and_the_rest_in_bm25_order(es):
    assert len(_matching()) > 1000, "the corpus must match more hits than the old 1,000 window"
    answer = es.search(index="_all", query=QUERY, size=MAX_K, source=False)
    hits = answer["hits"]["hits"]
    assert {hit["_id"] for hit in hits} == _matching()
    assert answer["hits"]["total"] == {"value": len(_matching()), "relation": "eq"}
    reranked = [hit["fields"]["reranked"] == [True] for hit in hits]
    assert reranked == [True] * WINDOW + [False] * (len(hits) - WINDOW)
    tail = [hit["fields"]["bm25_score"][0] for hit in hits[WINDOW:]]
    assert tail == sorted(tail, reverse=True)  # past the window, BM25's order


def test_a_page_past_the_first_thousand_is_the_same_hits_as_in_the_whole_answer(es):
    whole = [hit["_id"] for hit in es.search(query=QUERY, size=1200, source=False)["hits"]["hits"]]
    page = [hit["_id"] for hit in es.search(query=QUERY, from_=1100, size=100, source=False)["hits"]["hits"]]
    assert page == whole[1100:1200]


def test_from_and_size_past_ten_thousand_is_elasticsearchs_400(es):
    with pytest.raises(BadRequestError) as caught:
        es.search(query=QUERY, from_=9995, size=6)
    message = str(caught.value)
    assert "Result window is too large" in message and "[10000] but was [10001]" in message
    assert "index.max_result_window" in message


def test_a_ten_thousand_hit_page_is_bounded_by_the_answer_budget(home: Path, free_port):
    with _client(home, free_port(), gateway_max_answer_bytes=64 << 10) as client:
        with pytest.raises(BadRequestError) as caught:
            client.search(query=QUERY, size=MAX_K)
        assert "ESRR_GATEWAY_MAX_ANSWER_BYTES=65536" in str(caught.value)
        # Without _source, the same page weighs its envelopes alone: still over 64 KB, refused before the work.
        with pytest.raises(BadRequestError, match="MAX_ANSWER_BYTES"):
            client.search(query=QUERY, size=MAX_K, source=False)


def test_haystacks_filter_documents_pages_through_every_document(es):
    """elasticsearch-haystack's ``filter_documents()`` without filters: no query, no size, ``from_`` moved by the
    hits read until it reaches the total (``ElasticsearchDocumentStore._search_documents``)."""
    read: list[str] = []
    while True:
        answer = es.search(index="_all", from_=len(read))
        read.extend(hit["_id"] for hit in answer["hits"]["hits"])
        if len(read) >= answer["hits"]["total"]["value"]:
            break
    assert sorted(read) == sorted(doc.doc_id for doc in DOCS)
