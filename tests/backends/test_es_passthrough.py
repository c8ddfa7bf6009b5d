"""An application's whole request through the gateway to Elasticsearch, driven by the official client over HTTP.

The gateway (the real app, served by werkzeug on a free loopback port) fronts an index
loaded into the Elasticsearch stand-in (noida-db, or ``ESRR_TEST_ES_URL``); the window is
reordered by the candidate feedback (a real stage that needs no model). The request is
an application's: a text query with a year filter, highlighted snippets and facet counts.

noida-db limits what this shows (docs/operations.md, "Query DSL"): its highlighter and
terms aggregations answer in Elasticsearch's shape and are checked here, but scores are
its own BM25 (custom k1/b ignored) and ``index.query.default_field`` is ignored, so
``q=`` is sent on the ``text`` field explicitly rather than relying on the default.
"""

from __future__ import annotations

import pytest
from elasticsearch import BadRequestError

from tests.gateway.test_query_dsl import DOCS

pytestmark = pytest.mark.es


def test_an_applications_request_is_reranked_with_its_aggregations_and_highlights(gateway):
    client, alias, _ = gateway
    response = client.search(
        index=alias,
        query={
            "bool": {
                "must": [{"match": {"text": {"query": "green tea cancer"}}}],
                "filter": [{"range": {"year": {"gte": 2000, "lte": 2012}}}],
            }
        },
        highlight={"encoder": "html", "fields": {"title": {}, "abstract": {}}},
        aggs={"year": {"terms": {"field": "year", "size": 50}}},
        size=10,
    ).body
    hits = response["hits"]["hits"]
    assert {hit["_id"] for hit in hits} == {"1", "2", "5"}  # 3 is 2015, 4 is 1999
    assert response["hits"]["total"] == {"value": 3, "relation": "eq"}
    assert sorted((b["key"], b["doc_count"]) for b in response["aggregations"]["year"]["buckets"]) == [
        (2001, 1),
        (2005, 1),
        (2010, 1),
    ]
    assert all(hit["fields"]["reranked"] == [True] for hit in hits)
    assert "candidate feedback" in response["esrr"]["ranker"]
    first = next(hit for hit in hits if hit["_id"] == "1")
    assert first["_source"] == DOCS[0].source()  # the metadata, without the index's own fields
    assert "<em>" in first["highlight"]["title"][0] and "&amp;" in first["highlight"]["abstract"][0]
    assert response["_shards"]["failed"] == 0


def test_and_phrases_and_query_string_are_elasticsearchs(gateway):
    client, alias, _ = gateway

    def ids(**request) -> set[str]:
        return {hit["_id"] for hit in client.search(index=alias, **request).body["hits"]["hits"]}

    assert ids(query={"match": {"text": "green cancer"}}) == {"1", "2", "3", "4", "5"}
    assert ids(query={"match": {"text": {"query": "green cancer", "operator": "and"}}}) == {"1", "5"}
    assert ids(query={"match": {"text": {"query": "green tea cancer", "minimum_should_match": "100%"}}}) == {"1", "5"}
    assert ids(query={"match_phrase": {"text": "green tea extract"}}) == {"5"}
    assert ids(q='"green tea" AND breast', df="text") == {"1"}
    assert ids(query={"match": {"text": "green"}}, post_filter={"term": {"journal": "Nutrients"}}) == {"1", "4"}


def test_a_sort_skips_reranking_and_says_why(gateway):
    client, alias, _ = gateway
    response = client.search(index=alias, query={"match": {"text": "green"}}, sort=[{"year": "desc"}]).body
    assert [hit["_id"] for hit in response["hits"]["hits"]] == ["2", "5", "1", "4"]
    assert "sorts by" in response["esrr"]["skipped"] and response["esrr"]["ranker"] == "Elasticsearch"
    assert not any(hit["fields"]["reranked"][0] for hit in response["hits"]["hits"])
    assert all("title_ids" not in hit["_source"] for hit in response["hits"]["hits"])
    by_url = client.search(index=alias, q="green", df="text", sort="year:asc").body
    assert [hit["_id"] for hit in by_url["hits"]["hits"]] == ["4", "1", "5", "2"]
    assert "sorts by" in by_url["esrr"]["skipped"]


def test_ext_esrr_options_reach_the_ranking(gateway):
    client, alias, _ = gateway
    response = client.search(
        index=alias, query={"match": {"text": "green tea"}}, ext={"esrr": {"window_size": 1, "explain": True}}
    ).body
    flags = [hit["fields"]["reranked"][0] for hit in response["hits"]["hits"]]
    assert flags[0] is True and not any(flags[1:])
    assert all("_explanation" in hit for hit in response["hits"]["hits"])


def test_elasticsearchs_own_refusal_is_a_400_with_its_reason(gateway, es_backend):
    client, alias, _ = gateway
    with pytest.raises(BadRequestError) as refused:
        client.search(index=alias, query={"no_such_query": {}})
    product = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}[es_backend]
    assert f"{product} refused the search" in str(refused.value)
