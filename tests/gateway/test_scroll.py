"""Scrolls on the embedded backend, through the official client's ``helpers.scan`` and ``scroll`` over HTTP.

The scroll id carries the search (``es_rerank/gateway/scroll_ids.py``); the expected orders are computed from the
documents of ``test_sort`` with plain Python.
"""

from __future__ import annotations

import time

import pytest
from elasticsearch import BadRequestError, NotFoundError, helpers

from es_rerank.gateway.scroll_ids import ScrollState, encode
from tests.conftest import official_client
from tests.gateway.test_sort import ALIAS, DOCS, _by_year, _ids, sort_app

FISH = {"match": {"text": "fish"}}
FISH_IDS = [doc.doc_id for doc in DOCS if "fish" in doc.abstract]  # in index order


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory, free_port):
    """The official client of ``test_sort``'s gateway, served over HTTP."""
    with official_client(sort_app(tmp_path_factory.mktemp("scroll")), free_port()) as client:
        yield client


def test_scan_returns_every_match_once_in_index_order(es):
    scanned = [hit["_id"] for hit in helpers.scan(es, index=ALIAS, query={"query": FISH}, size=3)]
    assert scanned == FISH_IDS and len(FISH_IDS) > 3 * 3
    assert len(list(helpers.scan(es, index=ALIAS, size=7))) == len(DOCS)


def test_scan_preserving_order_follows_the_score_then_index_order(es):
    scanned = list(
        helpers.scan(es, index=ALIAS, query={"query": {"match": {"text": "diet fish"}}}, size=4, preserve_order=True)
    )
    whole = es.search(index=ALIAS, query={"match": {"text": "diet fish"}}, size=40, sort=[{"_score": "desc"}, "_doc"])
    assert [hit["_id"] for hit in scanned] == _ids(whole) and len(scanned) == len(DOCS)
    assert [hit["_score"] for hit in scanned] == [hit["_score"] for hit in whole["hits"]["hits"]]
    assert all("sort" not in hit for hit in scanned)  # the request named no sort


def test_a_sorted_scroll_pages_in_the_sort_and_shows_its_values(es):
    page = es.search(index=ALIAS, scroll="1m", size=7, sort=[{"year": "desc"}]).body
    seen, total = [], page["hits"]["total"]
    while page["hits"]["hits"]:
        assert all(len(hit["sort"]) == 1 for hit in page["hits"]["hits"])  # the request's key only
        assert page["hits"]["total"] == total and "sorts by" in page["esrr"]["skipped"]
        seen += _ids(page)
        page = es.scroll(scroll_id=page["_scroll_id"], scroll="1m").body
    assert seen == _by_year(descending=True) and total == {"value": len(DOCS), "relation": "eq"}
    assert es.clear_scroll(scroll_id=page["_scroll_id"]).body == {"succeeded": True, "num_freed": 1}


def test_an_expired_or_reindexed_scroll_is_a_404_saying_to_start_again(es):
    page = es.search(index=ALIAS, scroll="1ms", size=2, query=FISH).body
    time.sleep(0.05)
    with pytest.raises(NotFoundError) as expired:
        es.scroll(scroll_id=page["_scroll_id"], scroll="1m")
    assert expired.value.body["error"]["type"] == "search_context_missing_exception"
    assert "keep-alive" in expired.value.body["error"]["reason"]
    moved = encode(ScrollState("v0", {"query": FISH}, 2, None, "1m", time.time() + 60))
    with pytest.raises(NotFoundError) as reindexed:
        es.scroll(scroll_id=moved, scroll="1m")
    assert "reindex" in reindexed.value.body["error"]["reason"]


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda es: es.scroll(scroll_id="abc", scroll="1m"), "Cannot parse scroll id"),
        (lambda es: es.search(index=ALIAS, scroll="1m", from_=5), "[from] is not allowed in a scroll context"),
        (lambda es: es.search(index=ALIAS, scroll="2d"), "Keep alive for request (2d) is too large"),
        (lambda es: es.search(index=ALIAS, scroll="1m", size=0), "[size] cannot be [0]"),
        (lambda es: es.search(index=ALIAS, scroll="soon"), "keep-alive such as 1m"),
        (lambda es: es.search(index=ALIAS, scroll="1m", sort=["_doc"], search_after=[3]), "[search_after] cannot"),
    ],
)
def test_a_scroll_elasticsearch_would_refuse_is_a_400_naming_why(es, call, named):
    with pytest.raises(BadRequestError) as refused:
        call(es)
    assert named in refused.value.body["error"]["reason"]


def test_clearing_an_unknown_scroll_frees_none(es):
    assert es.clear_scroll(scroll_id="abc").body == {"succeeded": True, "num_freed": 0}
    assert es.clear_scroll(scroll_id="_all").body == {"succeeded": True, "num_freed": 0}
    with pytest.raises(BadRequestError) as none:
        es.perform_request("DELETE", "/_search/scroll", body={}, headers={"content-type": "application/json"})
    assert "no scroll ids" in none.value.body["error"]["reason"]
