"""``title`` and ``abstract`` searched alone through the gateway on the embedded backend: the hits Elasticsearch
would find there, the window reranked as for ``text`` (the candidate feedback stands in for a model), and
``_mapping`` naming both fields as searched."""

from __future__ import annotations

import pytest

from tests.gateway.test_query_dsl import DOCS, docs_app


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    return docs_app(tmp_path_factory.mktemp("fields")).test_client()


def _hits(client, query: dict) -> list[dict]:
    response = client.post("/_search", json={"query": query})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert "skipped" not in body["esrr"], body["esrr"]
    assert all(hit["fields"]["reranked"] == [True] for hit in body["hits"]["hits"])
    return body["hits"]["hits"]


@pytest.mark.parametrize(
    "query, field, word",
    [
        ({"match": {"title": "cancer"}}, "title", "cancer"),
        ({"match": {"abstract": "drinking"}}, "abstract", "drinking"),
        ({"multi_match": {"query": "breast", "fields": ["title^2"]}}, "title", "breast"),
        ({"query_string": {"query": "drinking", "fields": ["title"]}}, "title", "drinking"),
        ({"simple_query_string": {"query": "cancer", "default_field": "title"}}, "title", "cancer"),
        ({"term": {"title": "green"}}, "title", "green"),
    ],
)
def test_a_field_alone_finds_its_own_words_and_is_reranked(client, query, field, word):
    found = {hit["_id"] for hit in _hits(client, query)}
    assert found == {doc.doc_id for doc in DOCS if word in getattr(doc, field).lower().replace(".", " ").split()}
    everywhere = {doc.doc_id for doc in DOCS if word in f"{doc.title} {doc.abstract}".lower().replace(".", " ").split()}
    assert found < everywhere  # each case leaves out a document with the word in the other field


def test_a_phrase_in_the_title_does_not_run_into_the_abstract(client):
    assert {hit["_id"] for hit in _hits(client, {"match_phrase": {"title": "green tea"}})} == {"1", "5"}
    assert _hits(client, {"match_phrase": {"title": "habits black"}}) == []
    assert {hit["_id"] for hit in _hits(client, {"match_phrase": {"text": "habits black"}})} == {"2"}


def test_the_mapping_names_title_and_abstract_searched(client):
    mapping = client.get("/v1/_mapping").get_json()
    properties = next(iter(mapping.values()))["mappings"]["properties"]
    assert properties["title"]["type"] == "text" and "index" not in properties["title"]
    assert properties["abstract"]["index_options"] == "positions"
