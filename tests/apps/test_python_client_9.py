"""The 9.x Python client (elasticsearch 9.5) and its ``elasticsearch.dsl`` used unchanged against the embedded
gateway, from an environment of their own (``tests/apps/python9``: the core pins ``elasticsearch>=8,<9``):
``helpers.scan`` both ways, a ``FacetedSearch`` with a filter, ``.sort()``, ``.scan()`` and ``Document.search()``
(which sends ``_source: {"exclude_vectors": false}``). The same checks as the 8.x client's in
``test_elasticsearch_py.py``, on what ``tests/apps/python9/clients.py`` printed.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.apps.conftest import PYTHON9_DIR, WINDOW, Gateway, run_script

pytestmark = pytest.mark.apps

QUERY = "vitamin d cancer"
MATCH = {"match": {"text": QUERY}}


def test_scan_both_ways(gateway: Gateway, python9: str):
    before = gateway.searches()
    scanned = run_script(python9, PYTHON9_DIR, "clients.py", "scan", gateway.url, QUERY)
    assert set(gateway.since(before)) == {"skipped"}  # scrolled pages, not reranked: the reason is given
    total = scanned["count"]
    rows = {doc.doc_id: n for n, doc in enumerate(gateway.docs)}
    assert total > WINDOW and len(scanned["in_order"]) == total
    assert scanned["in_order"] == sorted(set(scanned["in_order"]), key=rows.__getitem__)
    whole = gateway.search({"query": MATCH, "size": 1000, "sort": ["_score", "_doc"], "_source": False})
    assert scanned["by_score"] == [hit["_id"] for hit in whole["hits"]["hits"]]
    assert scanned["scores"] == sorted(scanned["scores"], reverse=True) and min(scanned["scores"]) > 0


def test_dsl_faceted_search_sort_scan_and_document_search(gateway: Gateway, python9: str):
    before = gateway.searches()
    answered = run_script(python9, PYTHON9_DIR, "clients.py", "dsl", gateway.url, QUERY)
    # Reranked: the faceted search and Document.search; skipped: the sort and the scan's two pages (1,000 hits a page,
    # the second empty).
    assert gateway.since(before) == {"reranked": 2, "skipped": 3}
    faceted, newest, papers = answered["faceted"], answered["newest"], answered["papers"]

    matched = {
        hit["_id"]
        for hit in gateway.search(
            {
                "query": {"multi_match": {"query": QUERY, "fields": ["title", "abstract"]}},
                "size": 1000,
                "_source": False,
            }
        )["hits"]["hits"]
    }
    meta = {doc.doc_id: doc for doc in gateway.docs}
    reviews = {doc_id for doc_id in matched if "Review" in meta[doc_id].publication_types}
    assert faceted["esrr"] == {"ranker": "BM25 + candidate feedback"}
    assert faceted["total"] == len(reviews) and set(faceted["ids"]) <= reviews and len(faceted["ids"]) == 10
    types = Counter(t for doc_id in matched for t in meta[doc_id].publication_types)
    assert sorted(map(tuple, faceted["facets"]["publication_types"])) == sorted(
        (name, count, name == "Review") for name, count in types.items()
    )
    years = Counter(meta[doc_id].year // 5 * 5 for doc_id in reviews)
    assert faceted["facets"]["year"] == [[float(year), years[year], False] for year in sorted(years)]

    assert "sorts by" in newest["esrr"]["skipped"] and newest["sort"] == [[year] for year in newest["years"]]
    assert newest["years"] == sorted(newest["years"], reverse=True) and len(newest["ids"]) == 30
    assert len(answered["scan"]) == answered["count"] == len(set(answered["scan"]))

    reranked, bm25 = gateway.orders(MATCH, 10)
    assert [paper["id"] for paper in papers] == reranked and reranked != bm25
    assert all(paper["title"] == meta[paper["id"]].title for paper in papers)
