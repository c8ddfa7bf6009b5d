"""The Node libraries used unchanged against the embedded gateway, on the machine's Node: the official client's
``helpers.search`` and ``helpers.scrollDocuments`` (@elastic/elasticsearch 8.19 and 9.5; ``helpers.search`` adds
``filter_path``) and ``@searchkit/api`` with its default query (fuzzy words, ``bool_prefix``, a phrase) and facets.

``tests/apps/node/clients.mjs`` runs each as an application does and prints what it returned; the expected orders
and facet counts are the gateway's answers and the corpus's metadata (``metadata_of``), computed here.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.apps.conftest import WINDOW, Gateway, run_node

pytestmark = pytest.mark.apps

QUERY = "vitamin d cancer"
MATCH = {"match": {"text": QUERY}}
VERSIONS = ["8", "9"]  # @elastic/elasticsearch-8 (8.19) and @elastic/elasticsearch (9.5), tests/apps/node/package.json


@pytest.mark.parametrize("major", VERSIONS)
def test_helpers_search_returns_the_reranked_page(gateway: Gateway, node: str, major: str):
    reranked, bm25 = gateway.orders(MATCH, 10)
    assert reranked != bm25
    before = gateway.searches()
    found = run_node(node, "clients.mjs", "search", major, gateway.url, QUERY)
    assert gateway.since(before) == {"reranked": 1}
    assert found["ids"] == reranked
    titles = {doc.doc_id: doc.title for doc in gateway.docs}
    assert found["titles"] == [titles[doc_id] for doc_id in reranked]


@pytest.mark.parametrize("major", VERSIONS)
def test_scroll_documents_reads_every_match_once_in_score_order(gateway: Gateway, node: str, major: str):
    whole = gateway.search({"query": MATCH, "size": 1000, "sort": ["_score", "_doc"], "_source": False})
    total = whole["hits"]["total"]["value"]
    assert total > WINDOW
    before = gateway.searches()
    scrolled = run_node(node, "clients.mjs", "scroll", major, gateway.url, QUERY)
    assert scrolled["ids"] == [hit["_id"] for hit in whole["hits"]["hits"]]
    assert scrolled["paged"] == total and scrolled["pages"] == -(-total // 10)
    # Scrolled pages are in the scroll's order (by score, then index order), not reranked: the reason is given.
    assert set(gateway.since(before)) == {"skipped"}


def test_searchkit_default_query_facets_and_sort(gateway: Gateway, node: str):
    before = gateway.searches()
    answer = run_node(node, "clients.mjs", "searchkit", gateway.url, QUERY)
    assert gateway.since(before) == {"reranked": 2, "skipped": 1}
    [first], [refined], [newest] = answer["first"], answer["refined"], answer["newest"]
    sent = [exchange["searches"][0] for exchange in answer["exchanges"]]
    assert [exchange["url"].rsplit("/", 1)[1] for exchange in answer["exchanges"]] == ["_msearch"] * 3
    assert "bool_prefix" in str(sent[0]["query"]) and "AUTO:4,8" in str(sent[0]["query"])  # its default query

    # The page is the gateway's reranked answer to the query Searchkit sent, which differs from BM25's order.
    query = sent[0]["query"]
    reranked, bm25 = gateway.orders(query, 10)
    assert first["ids"] == reranked and reranked != bm25
    assert [exchange["esrr"][0]["ranker"] for exchange in answer["exchanges"][:2]] == ["BM25 + candidate feedback"] * 2
    # Each title whole, and highlighted as InstantSearch marks it (the tags Searchkit puts for the <em> it asked).
    titles = {doc.doc_id: doc.title for doc in gateway.docs}
    assert first["titles"] == [titles[doc_id] for doc_id in reranked]
    unmarked = [re.sub(r"</?ais-highlight-0+/?>", "", marked) for marked in first["highlighted"]]
    assert unmarked == first["titles"] and "ais-highlight" in first["highlighted"][0]

    # Facets over the matches, counted from the corpus's metadata.
    meta = {doc.doc_id: doc for doc in gateway.docs}
    matched = [hit["_id"] for hit in gateway.search({"query": query, "size": 1000, "_source": False})["hits"]["hits"]]
    assert first["nbHits"] == len(matched)
    types = Counter(t for doc_id in matched for t in meta[doc_id].publication_types)
    assert first["facets"]["publication_types"] == dict(types)
    assert first["facets"]["journal"] == dict(Counter(meta[doc_id].journal for doc_id in matched))
    years = [meta[doc_id].year for doc_id in matched]
    assert first["facets_stats"]["year"] == {
        "min": min(years),
        "max": max(years),
        "avg": pytest.approx(sum(years) / len(years)),
        "sum": sum(years),
    }
    reviews = [doc_id for doc_id in matched if "Review" in meta[doc_id].publication_types]
    assert refined["nbHits"] == len(reviews) and set(refined["ids"]) <= set(reviews)
    assert refined["facets"]["journal"] == dict(Counter(meta[doc_id].journal for doc_id in reviews))

    # A sort index: newest first, not reranked, with the reason.
    assert "sorts by" in answer["exchanges"][2]["esrr"][0]["skipped"]
    assert newest["nbHits"] == len(matched) and newest["years"] == sorted(newest["years"], reverse=True)
    assert newest["years"][0] == max(years)
