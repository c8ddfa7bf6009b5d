"""elasticsearch-py's ``helpers.scan`` and elasticsearch-dsl (the ``elasticsearch_dsl`` package) used unchanged
against the embedded gateway: a ``FacetedSearch`` with a filter, ``.sort()``, ``.scan()``.

The expected facets and orders are computed here from the corpus's metadata (``metadata_of``) and its index order;
the set of matches is the gateway's own (a count, then the scan's ids, checked against each other).
"""

from __future__ import annotations

from collections import Counter

import pytest
from elasticsearch import Elasticsearch, helpers

from tests.apps.conftest import ALIAS, WINDOW, Gateway, library

pytestmark = pytest.mark.apps

QUERY = "vitamin d cancer"
MATCH = {"match": {"text": QUERY}}


@pytest.fixture(scope="module")
def es(gateway: Gateway):
    client = Elasticsearch(gateway.url, request_timeout=60)
    yield client
    client.close()


def _index_order(gateway: Gateway, ids) -> list[str]:
    row = {doc.doc_id: n for n, doc in enumerate(gateway.docs)}
    return sorted(ids, key=row.__getitem__)


def test_scan_in_index_order_returns_every_match_once(gateway: Gateway, es):
    total = es.count(index=ALIAS, query=MATCH)["count"]
    assert total > WINDOW  # the matches reach past the window
    before = gateway.searches()
    scanned = [hit["_id"] for hit in helpers.scan(es, index=ALIAS, query={"query": MATCH}, size=20)]
    assert len(scanned) == total and scanned == _index_order(gateway, set(scanned))
    # Each page is a search in the sort's order (_doc), not scored: reranking is skipped, with the reason.
    assert gateway.since(before) == {"skipped": -(-total // 20) + 1}  # the last page comes back empty


def test_scan_preserving_order_follows_the_score_then_index_order(gateway: Gateway, es):
    total = es.count(index=ALIAS, query=MATCH)["count"]
    scanned = list(helpers.scan(es, index=ALIAS, query={"query": MATCH}, size=20, preserve_order=True))
    whole = list(helpers.scan(es, index=ALIAS, query={"query": MATCH}, preserve_order=True))  # its default size
    assert [hit["_id"] for hit in scanned] == [hit["_id"] for hit in whole] and len(scanned) == total
    keys = [(-hit["_score"], row) for row, hit in enumerate(scanned)]
    assert keys == sorted(keys) and all(hit["_score"] > 0 for hit in scanned)
    in_order = [hit["_id"] for hit in helpers.scan(es, index=ALIAS, query={"query": MATCH})]
    assert sorted(in_order) == sorted(hit["_id"] for hit in scanned)


def paper_search_class(es: Elasticsearch) -> type:
    """elasticsearch-dsl's faceted search of the papers, as an application declares it."""
    dsl = library("elasticsearch_dsl")

    class PaperSearch(dsl.FacetedSearch):
        index = ALIAS
        fields = ["title", "abstract"]
        facets = {
            "publication_types": dsl.TermsFacet(field="publication_types"),
            "journal": dsl.TermsFacet(field="journal"),
            "year": dsl.HistogramFacet(field="year", interval=5),
        }
        using = es

    return PaperSearch


def test_faceted_search_counts_its_facets_and_reranks_its_hits(gateway: Gateway, es):
    paper_search = paper_search_class(es)
    matched = {
        hit["_id"]
        for hit in helpers.scan(
            es, index=ALIAS, query={"query": {"multi_match": {"query": QUERY, "fields": ["title", "abstract"]}}}
        )
    }
    meta = {doc.doc_id: doc for doc in gateway.docs}
    reviews = {doc_id for doc_id in matched if "Review" in meta[doc_id].publication_types}
    assert len(matched) > WINDOW and 10 < len(reviews) < len(matched)

    before = gateway.searches()
    response = paper_search(QUERY, filters={"publication_types": "Review"}).execute()
    assert gateway.since(before) == {"reranked": 1}
    assert "skipped" not in response.esrr and response.esrr.ranker == "BM25 + candidate feedback"
    assert response.hits.total.value == len(reviews) and {hit.meta.id for hit in response} <= reviews
    assert len(response) == 10 and all(hit.meta.score > 0 for hit in response)
    # Each facet counts the matches under every filter but its own (FacetedSearch's post_filter and filter aggs).
    types = Counter(t for doc_id in matched for t in meta[doc_id].publication_types)
    assert sorted(response.facets.publication_types) == sorted(
        (name, count, name == "Review") for name, count in types.items()
    )
    journals = Counter(meta[doc_id].journal for doc_id in reviews)
    assert sorted(response.facets.journal) == sorted((name, count, False) for name, count in journals.items())
    years = Counter(meta[doc_id].year // 5 * 5 for doc_id in reviews)
    assert response.facets.year == [(float(year), years[year], False) for year in sorted(years)]


def test_dsl_sort_newest_first_and_scan(gateway: Gateway, es):
    dsl = library("elasticsearch_dsl")
    search = dsl.Search(using=es, index=ALIAS).query("match", text=QUERY)
    total = search.count()
    before = gateway.searches()
    newest = search.sort("-year").extra(size=30).execute()
    assert gateway.since(before) == {"skipped": 1}
    assert "sorts by" in newest.esrr.skipped
    rows = {doc.doc_id: n for n, doc in enumerate(gateway.docs)}
    ids = [hit.meta.id for hit in newest]
    assert [hit.year for hit in newest] == sorted((hit.year for hit in newest), reverse=True)
    for one, two in zip(newest, newest[1:]):  # ties in index order, as Elasticsearch breaks them on one shard
        assert one.year > two.year or rows[one.meta.id] < rows[two.meta.id]
    assert len(ids) == 30 and [hit.meta.sort for hit in newest] == [[hit.year] for hit in newest]

    scanned = [hit.meta.id for hit in search.scan()]
    assert len(scanned) == total and len(set(scanned)) == total and scanned == _index_order(gateway, scanned)
