"""The ``_source`` layout Haystack's document store reads (``es_rerank/gateway/client_layouts.py``), and the count of
searches by what ranked them (``esrr_searches_total``), on the embedded backend over Flask's test client.

Haystack itself reads these answers in ``tests/apps/test_rag_libraries.py``; here each rule is checked alone.
"""

from __future__ import annotations

import pytest

from es_rerank.gateway.client_layouts import HAYSTACK_AGENT, haystack_source
from tests.gateway.test_query_dsl import DOCS, docs_app

HAYSTACK = {"User-Agent": f"{HAYSTACK_AGENT}2.31.0"}
TEA = {"query": {"match": {"text": "green tea"}}}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    return docs_app(tmp_path_factory.mktemp("layouts")).test_client()


def _hits(response) -> list[dict]:
    assert response.status_code == 200, response.get_json()
    return response.get_json()["hits"]["hits"]


def test_haystacks_store_gets_id_and_content_with_the_abstract_inside(client):
    stored = {doc.doc_id: doc for doc in DOCS}
    for hit in _hits(client.post("/_search", json=TEA, headers=HAYSTACK)):
        doc = stored[hit["_id"]]
        expected = {key: value for key, value in doc.source().items() if key != "abstract"}
        assert hit["_source"] == {"id": doc.doc_id, **expected, "content": f"{doc.title}\n\n{doc.abstract}"}


def test_other_clients_get_the_records_as_stored(client):
    stored = {doc.doc_id: doc.source() for doc in DOCS}
    hits = _hits(client.post("/_search", json=TEA, headers={"User-Agent": "elasticsearch-py/8.19.3"}))
    assert hits and all(hit["_source"] == stored[hit["_id"]] for hit in hits)


def test_filter_path_and_source_filters_apply_to_the_laid_out_hits(client):
    filtered = client.post("/_search?filter_path=hits.hits._source.content", json=TEA, headers=HAYSTACK)
    assert filtered.status_code == 200
    assert all(set(hit["_source"]) == {"content"} for hit in filtered.get_json()["hits"]["hits"])
    # A _source without the text (here: only the year) is left as asked: there is nothing to lay out.
    years = _hits(client.post("/_search", json={**TEA, "_source": ["year"]}, headers=HAYSTACK))
    assert all(set(hit["_source"]) <= {"year"} for hit in years)


def test_haystack_source_keeps_a_content_or_an_id_of_its_own():
    assert haystack_source("1", {"content": "x", "title": "t"}) == {"content": "x", "title": "t"}
    assert haystack_source("1", {"id": "own", "abstract": "a"}) == {"id": "own", "content": "a"}
    assert haystack_source("1", {"year": 2001}) == {"year": 2001}


def test_searches_are_counted_by_what_ranked_them(client):
    def counts() -> dict[str, float]:
        text = client.get("/metrics").get_data(as_text=True)
        lines = [line.split() for line in text.splitlines() if line.startswith("esrr_searches_total{")]
        return {line[0].split('"')[1]: float(line[1]) for line in lines}

    before = counts()
    _hits(client.post("/_search", json=TEA))  # the feedback reorders the window
    _hits(client.post("/_search", json={**TEA, "sort": [{"year": "desc"}]}))
    _hits(client.post("/_search", json={**TEA, "ext": {"esrr": {"window_size": 0}}}))
    _hits(client.post("/_search", json={"query": {"match": {"text": "unfound"}}}))  # no hit: nothing to reorder
    after = counts()
    assert {label: after[label] - before.get(label, 0) for label in after} == {
        "reranked": 1,
        "skipped": 1,
        "bm25": 2,
    }
