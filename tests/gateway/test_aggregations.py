"""Issue 35: aggregations through the official client on the embedded backend: elasticsearch-dsl's ``FacetedSearch``
(filter buckets around terms and histogram facets, a post_filter), the metrics of numeric facets, MeSH terms, and
the bucket limit's 400 naming ``ESRR_GATEWAY_MAX_BUCKETS``.

The expected facets are computed by hand from ``DOCS``; that each aggregation answers as Elasticsearch does is
checked against a real node in ``tests/backends/test_aggregations.py``.
"""

from __future__ import annotations

import pytest
from elasticsearch import BadRequestError
from elasticsearch.dsl import FacetedSearch, HistogramFacet, TermsFacet

from tests.conftest import official_client
from tests.gateway.test_query_dsl import docs_app


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory, free_port):
    app = docs_app(tmp_path_factory.mktemp("aggregations"), gateway_max_buckets=40)
    with official_client(app, free_port()) as client:
        yield client


class PaperSearch(FacetedSearch):
    index = "_all"
    fields = ["title", "abstract"]
    facets = {
        "publication_types": TermsFacet(field="publication_types"),
        "year": HistogramFacet(field="year", interval=10),
        "journal": TermsFacet(field="journal"),
    }


def test_faceted_search_serves_its_facets_each_without_its_own_filter(es):
    search = type(
        "GatewayPaperSearch", (PaperSearch,), {"using": es}
    )  # FacetedSearch takes its client as a class field
    response = search("green tea", filters={"publication_types": "Review"}).execute()
    # "green tea" finds 1, 2, 4 and 5; the Review filter keeps 1 and 5 as hits, and every facet but its own.
    assert {hit.meta.id for hit in response} == {"1", "5"}
    assert response.facets.publication_types == [("Journal Article", 3, False), ("Review", 2, True)]
    assert response.facets.year == [(2000, 2, False)]  # 2001 and 2005, the reviews
    assert sorted(response.facets.journal) == [("", 1, False), ("Nutrients", 1, False)]  # 5: journal "", as in ES
    assert all(hit.meta.id in {"1", "5"} for hit in response)


def test_numeric_facets_and_mesh_terms(es):
    answer = es.search(
        query={"match": {"text": "green"}},
        size=0,
        aggs={
            "years": {"stats": {"field": "year"}},
            "first": {"min": {"field": "year"}},
            "journals": {"cardinality": {"field": "journal"}},
            "mesh": {"terms": {"field": "mesh"}},
            "decades": {"histogram": {"field": "year", "interval": 10}, "aggs": {"mean": {"avg": {"field": "year"}}}},
        },
    )
    aggregations = answer["aggregations"]
    # green: 1 (2001), 2 (2010), 4 (1999), 5 (2005)
    assert aggregations["years"] == {"count": 4, "min": 1999.0, "max": 2010.0, "avg": 2003.75, "sum": 8015.0}
    assert aggregations["first"] == {"value": 1999.0}
    assert aggregations["journals"] == {"value": 3}  # "" is a journal too, as Elasticsearch indexes it
    assert aggregations["mesh"]["buckets"] == [
        {"key": "Breast Neoplasms", "doc_count": 1},
        {"key": "Tea", "doc_count": 1},
    ]
    assert aggregations["decades"]["buckets"] == [
        {"key": 1990.0, "doc_count": 1, "mean": {"value": 1999.0}},
        {"key": 2000.0, "doc_count": 2, "mean": {"value": 2003.0}},
        {"key": 2010.0, "doc_count": 1, "mean": {"value": 2010.0}},
    ]


def test_typed_keys_name_the_new_kinds(es):
    answer = es.search(
        query={"match": {"text": "tea"}},
        size=0,
        typed_keys=True,
        aggs={
            "f": {"filter": {"term": {"journal": "Nutrients"}}, "aggs": {"y": {"terms": {"field": "year"}}}},
            "s": {"stats": {"field": "year"}},
        },
    )
    assert set(answer["aggregations"]) == {"filter#f", "stats#s"}
    assert answer["aggregations"]["filter#f"]["lterms#y"]["buckets"] == [{"key": 2001, "doc_count": 1}]


def test_too_many_buckets_is_a_400_naming_the_setting(es):
    with pytest.raises(BadRequestError) as caught:
        es.search(size=0, aggs={"y": {"histogram": {"field": "year", "interval": 0.25}}})
    message = str(caught.value)
    assert "Trying to create too many buckets" in message and "ESRR_GATEWAY_MAX_BUCKETS=40" in message
    assert "search.max_buckets" in message
