"""The RAG libraries' Elasticsearch stores used unchanged against the embedded gateway: LangChain's
``ElasticsearchStore`` (``BM25Strategy``) and Haystack's ``ElasticsearchBM25Retriever`` in a pipeline, each with
its defaults, finding each document's text and getting the gateway's reranked order.

The reranked order is the gateway's answer to the query each library sends (LangChain: a ``match`` on its query
field, ``text``; Haystack: ``haystack_bm25_body``), checked to differ from BM25's for the queries used here.
"""

from __future__ import annotations

import pytest

from tests.apps.conftest import ALIAS, Gateway, library
from tests.gateway.test_fuzzy_prefix import haystack_bm25_body

pytestmark = pytest.mark.apps

QUERY = "vitamin d cancer"


def test_langchain_elasticsearch_store_finds_the_text_in_the_reranked_order(gateway: Gateway):
    stores = library("langchain_elasticsearch")
    store = stores.ElasticsearchStore(index_name=ALIAS, es_url=gateway.url, strategy=stores.BM25Strategy())
    reranked, bm25 = gateway.orders({"match": {"text": QUERY}}, 4)
    assert reranked != bm25  # the window's reordering shows in the first four

    before = gateway.searches()
    documents = store.similarity_search(QUERY)  # k=4
    assert gateway.since(before) == {"reranked": 1}
    assert [doc.page_content for doc in documents] == [gateway.text_of(doc_id) for doc_id in reranked]
    assert all(doc.page_content.strip() for doc in documents)

    retrieved = store.as_retriever().invoke(QUERY)  # what a chain calls
    assert [doc.page_content for doc in retrieved] == [doc.page_content for doc in documents]
    store.client.close()


def test_haystack_bm25_retriever_in_a_pipeline_gets_content_ids_and_metadata(gateway: Gateway, monkeypatch):
    monkeypatch.setenv("HAYSTACK_TELEMETRY_ENABLED", "False")  # nothing leaves the machine
    haystack = library("haystack")
    stores = library("haystack_integrations.document_stores.elasticsearch")
    retrievers = library("haystack_integrations.components.retrievers.elasticsearch")
    store = stores.ElasticsearchDocumentStore(hosts=gateway.url, index=ALIAS)
    pipeline = haystack.Pipeline()
    pipeline.add_component("retriever", retrievers.ElasticsearchBM25Retriever(document_store=store))
    query = "vitamin d deficency"  # misspelt: the retriever's fuzziness "AUTO" finds "deficiency"
    reranked, bm25 = gateway.orders(haystack_bm25_body(query)["query"], 10)
    assert reranked != bm25

    before = gateway.searches()
    documents = pipeline.run({"retriever": {"query": query}})["retriever"]["documents"]
    assert gateway.since(before) == {"reranked": 1}
    assert [doc.id for doc in documents] == reranked
    assert [doc.content for doc in documents] == [gateway.text_of(doc_id) for doc_id in reranked]
    metadata = {doc.doc_id: doc for doc in gateway.docs}
    for doc in documents:
        assert doc.score > 0 and doc.meta["doc_id"] == doc.id and "abstract" not in doc.meta
        assert doc.meta["title"] == metadata[doc.id].title and doc.meta["year"] == metadata[doc.id].year

    assert store.count_documents() == len(gateway.docs)
    every = store.filter_documents()  # no filters: pages through the index, 10 hits a request
    assert sorted(doc.id for doc in every) == sorted(metadata) and all(doc.content for doc in every)
    recent_reviews = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.year", "operator": ">=", "value": 2015},
            {"field": "meta.publication_types", "operator": "==", "value": "Review"},
        ],
    }
    expected = {doc.doc_id for doc in gateway.docs if doc.year >= 2015 and "Review" in doc.publication_types}
    assert {doc.id for doc in store.filter_documents(filters=recent_reviews)} == expected and expected
