"""The gateway's ``_search`` with the Query DSL on the embedded backend: the site page's request, metadata in
``_source``, highlight, aggregations, ``ext.esrr`` options and the reasons reranking is skipped.

Flask's test client drives the real app over a real embedded index; the window is reordered
by the candidate feedback (a real stage that needs no model), so "reranked" is observable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index

DOCS = [
    Document(
        "1",
        "Green tea and breast cancer",
        "Green tea catechins & <b>tumour</b> growth in breast cancer.",
        journal="Nutrients",
        year=2001,
        authors=("Smith JA", "Lee K"),
        mesh=("Tea", "Breast Neoplasms"),
        publication_types=("Journal Article", "Review"),
        doi="10.5555/esrr.1",
    ),
    Document(
        "2",
        "Tea drinking habits",
        "Black tea and green leaves in a survey of breast health.",
        journal="Circulation",
        year=2010,
        publication_types=("Journal Article",),
    ),
    Document(
        "3",
        "Coffee and cancer",
        "Coffee drinking and cancer risk in a cohort.",
        year=2015,
        publication_types=("Journal Article", "Randomized Controlled Trial"),
    ),
    Document(
        "4",
        "Green vegetables",
        "Leafy green vegetables and bone health.",
        journal="Nutrients",
        year=1999,
        metadata={"source": "beir", "tags": ["x", {"y": 1}]},
    ),
    Document(
        "5",
        "Green tea extract",
        "A green tea extract in cancer prevention trials.",
        year=2005,
        publication_types=("Journal Article", "Review"),
    ),
]
SITE_REQUEST = {
    "query": {
        "bool": {
            "must": [{"match": {"text": {"query": "green tea cancer"}}}],
            "filter": [
                {"range": {"year": {"gte": 2000, "lte": 2012}}},
                {"terms": {"publication_types": ["Review", "Journal Article"]}},
            ],
        }
    },
    "from": 0,
    "size": 10,
    "highlight": {"encoder": "html", "fields": {"title": {}, "abstract": {}}},
    "aggs": {
        "year": {"terms": {"field": "year", "size": 50}},
        "publication_types": {"terms": {"field": "publication_types", "size": 20}},
    },
}


def docs_app(home: Path, **settings):
    """A gateway over an embedded index of ``DOCS`` built under ``home``: BM25's top 10 refined by the feedback,
    with the gateway ``settings`` given."""
    build_embedded_index(DOCS, home / "indexes" / "embedded", version="v1", progress=False)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    pipeline = SearchPipeline(backend, 10, feedback=FeedbackParams(2, 1.0))
    return create_app(ServedSearch(pipeline, 3600), GatewaySettings(home=home, **settings))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    return docs_app(tmp_path_factory.mktemp("dsl")).test_client()


def _search(client, body: dict, path: str = "/_search") -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_the_site_pages_request_is_served_whole(client):
    body = _search(client, SITE_REQUEST)
    hits = body["hits"]["hits"]
    assert {hit["_id"] for hit in hits} == {"1", "2", "5"}  # 3 is 2015, 4 is 1999
    assert body["hits"]["total"] == {"value": 3, "relation": "eq"}
    assert body["aggregations"]["year"]["buckets"] == [
        {"key": 2001, "doc_count": 1},
        {"key": 2005, "doc_count": 1},
        {"key": 2010, "doc_count": 1},
    ]
    assert body["aggregations"]["publication_types"]["buckets"] == [
        {"key": "Journal Article", "doc_count": 3},
        {"key": "Review", "doc_count": 2},
    ]
    assert body["_shards"]["failed"] == 0
    first = next(hit for hit in hits if hit["_id"] == "1")
    assert first["_source"] == DOCS[0].source()
    assert first["_source"]["authors"] == ["Smith JA", "Lee K"] and first["_source"]["doi"] == "10.5555/esrr.1"
    assert first["highlight"]["title"] == ["<em>Green</em> <em>tea</em> and breast <em>cancer</em>"]
    assert first["highlight"]["abstract"] == [
        "<em>Green</em> <em>tea</em> catechins &amp; &lt;b&gt;tumour&lt;/b&gt; growth in breast <em>cancer</em>."
    ]
    assert all(hit["fields"]["reranked"] == [True] for hit in hits)
    assert "candidate feedback" in body["esrr"]["ranker"] and "skipped" not in body["esrr"]


def test_without_the_html_encoder_the_text_is_raw(client):
    body = _search(client, {"query": {"match": {"text": "tumour"}}, "highlight": {"fields": {"abstract": {}}}})
    assert body["hits"]["hits"][0]["highlight"]["abstract"] == [
        "Green tea catechins & <b><em>tumour</em></b> growth in breast cancer."
    ]


def test_source_filtering_and_metadata_pass_through(client):
    body = _search(client, {"query": {"match": {"text": "leafy"}}, "_source": ["title", "meta*"]})
    assert body["hits"]["hits"][0]["_source"] == {
        "title": "Green vegetables",
        "metadata": {"source": "beir", "tags": ["x", {"y": 1}]},
    }
    hidden = _search(client, {"query": {"match": {"text": "leafy"}}, "_source": False})
    assert "_source" not in hidden["hits"]["hits"][0]
    url = client.get("/_search?q=leafy&_source_includes=year,journal").get_json()
    assert url["hits"]["hits"][0]["_source"] == {"year": 1999, "journal": "Nutrients"}


def test_and_and_phrases_are_honoured_through_the_gateway(client):
    def ids(body):
        return {hit["_id"] for hit in _search(client, body)["hits"]["hits"]}

    assert ids({"query": {"match": {"text": "green cancer"}}}) == {"1", "2", "3", "4", "5"}
    assert ids({"query": {"match": {"text": {"query": "green cancer", "operator": "and"}}}}) == {"1", "5"}
    assert ids({"query": {"match_phrase": {"text": "green tea extract"}}}) == {"5"}
    assert {hit["_id"] for hit in client.get('/_search?q="green tea" AND breast').get_json()["hits"]["hits"]} == {"1"}


def test_filters_only_are_answered_in_the_first_stages_order_with_the_reason(client):
    body = _search(client, {"query": {"bool": {"filter": [{"term": {"journal": "Nutrients"}}]}}})
    assert {hit["_id"] for hit in body["hits"]["hits"]} == {"1", "4"}
    assert "no words for the model" in body["esrr"]["skipped"]
    assert not any(hit["fields"]["reranked"][0] for hit in body["hits"]["hits"])
    texted = _search(
        client,
        {
            "query": {"bool": {"filter": [{"term": {"journal": "Nutrients"}}]}},
            "ext": {"esrr": {"query_text": "green tea"}},
        },
    )
    assert "skipped" not in texted["esrr"] and all(hit["fields"]["reranked"][0] for hit in texted["hits"]["hits"])


def test_ext_esrr_sets_the_window_the_combination_and_explains(client):
    query = {"match": {"text": "green tea cancer"}}
    none = _search(client, {"query": query, "ext": {"esrr": {"window_size": 0}}})
    assert not any(hit["fields"]["reranked"][0] for hit in none["hits"]["hits"]) and none["esrr"]["ranker"] == "BM25"
    two = _search(client, {"query": query, "ext": {"esrr": {"window_size": 2}}})
    assert [hit["fields"]["reranked"][0] for hit in two["hits"]["hits"]][:3] == [True, True, False]
    total = _search(
        client,
        {
            "query": query,
            "ext": {"esrr": {"score_mode": "total", "query_weight": 1.0, "rerank_weight": 0.0, "explain": True}},
        },
    )
    # With the ranker weighted 0, "total" keeps the first stage's scores: BM25's order.
    bm25 = [hit["_id"] for hit in none["hits"]["hits"]]
    assert [hit["_id"] for hit in total["hits"]["hits"]] == bm25
    explained = total["hits"]["hits"][0]["_explanation"]
    assert explained["value"] == total["hits"]["hits"][0]["_score"]
    assert [detail["description"] for detail in explained["details"]] == [
        "first-stage score (BM25)",
        "model score",
        "the window's combined score",
    ]
    # total with the ranker weighted 0: the combined score is BM25's, lifted above the tail
    assert explained["details"][2]["value"] == pytest.approx(explained["details"][0]["value"])


def test_the_model_reads_the_text_clauses_not_the_filters(client):
    from es_rerank.backends.query_dsl import query_text

    assert query_text(SITE_REQUEST["query"]) == "green tea cancer"
    assert (
        query_text(
            {
                "bool": {
                    "must": [{"match_phrase": {"text": "a b"}}],
                    "should": [{"query_string": {"query": 'title:tea AND "green tea"'}}],
                    "must_not": [{"match": {"text": "no"}}],
                    "filter": [{"match": {"text": "filtered"}}],
                }
            }
        )
        == "a b tea green tea"
    )
