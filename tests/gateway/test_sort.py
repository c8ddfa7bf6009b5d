"""``sort`` and ``search_after`` on the embedded backend, through the official client (and its DSL) over HTTP.

Expected orders are computed here from ``DOCS`` with plain Python: by year (missing last), by index order
(``_doc``, the order the index was built in), by id, ties by index order, as Elasticsearch orders them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticsearch import BadRequestError
from elasticsearch.dsl import Search
from flask import Flask

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.sorting import LONG_MAX, LONG_MIN
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import official_client
from tests.gateway.test_scores import HashReranker

ALIAS = "esrr-docs"
YEARS = (2001, None, 1999, 2010, 2001, 2015, None, 2010, 2005, 1999)
# 40 documents, every one about diet, every third about fish too; ids out of index order to tell _id from _doc.
DOCS = [
    Document(
        f"d{(n * 7) % 40:02d}",
        f"Diet study {n}",
        f"Diet and {'fish oil' if n % 3 == 0 else 'fibre'} intake, cohort {n}.",
        year=YEARS[n % len(YEARS)],
    )
    for n in range(40)
]
ROW = {doc.doc_id: n for n, doc in enumerate(DOCS)}
YEAR = {doc.doc_id: doc.year for doc in DOCS}


def _by_year(descending: bool) -> list[str]:
    dated = sorted((doc for doc in DOCS if doc.year is not None), key=lambda doc: ROW[doc.doc_id])
    dated.sort(key=lambda doc: doc.year, reverse=descending)
    return [doc.doc_id for doc in dated] + [doc.doc_id for doc in DOCS if doc.year is None]


def sort_app(home: Path) -> Flask:
    """The gateway over an embedded index of ``DOCS`` in ``home``, reranked by ``HashReranker`` (shared with
    ``test_scroll``)."""
    build_embedded_index(DOCS, home / "indexes" / "embedded", version="v1", progress=False)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    return create_app(ServedSearch(SearchPipeline(backend, 20, HashReranker()), 3600), GatewaySettings(home=home))


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory, free_port):
    with official_client(sort_app(tmp_path_factory.mktemp("sort")), free_port()) as client:
        yield client


def _ids(answer) -> list[str]:
    return [hit["_id"] for hit in answer["hits"]["hits"]]


def test_sort_by_score_alone_is_reranked_as_without_a_sort(es):
    plain = es.search(index=ALIAS, query={"match": {"text": "fish"}}, size=20).body
    by_score = es.search(index=ALIAS, query={"match": {"text": "fish"}}, size=20, sort=["_score"]).body
    assert "skipped" not in by_score["esrr"] and _ids(by_score) == _ids(plain)
    assert all(hit["fields"]["reranked"] == [True] for hit in by_score["hits"]["hits"])


@pytest.mark.parametrize("sort", [[{"year": "desc"}], [{"year": {"order": "desc"}}], "year:desc"])
def test_newest_first_in_each_form_skips_reranking_and_shows_sort_values(es, sort):
    answer = es.search(index=ALIAS, size=40, sort=sort).body
    assert _ids(answer) == _by_year(descending=True)
    assert "sorts by" in answer["esrr"]["skipped"]
    assert [hit["sort"] for hit in answer["hits"]["hits"]] == [
        [YEAR[i] if YEAR[i] is not None else LONG_MIN] for i in _ids(answer)
    ]
    assert all(hit["_score"] is None for hit in answer["hits"]["hits"]) and answer["hits"]["max_score"] is None


def test_year_ascending_doc_and_id_orders(es):
    assert _ids(es.search(index=ALIAS, size=40, sort=["year"]).body) == _by_year(descending=False)
    ascending = es.search(index=ALIAS, size=40, sort=["year"]).body["hits"]["hits"]
    assert ascending[-1]["sort"] == [LONG_MAX]  # a missing year sorts last, as Elasticsearch shows it
    assert _ids(es.search(index=ALIAS, size=40, sort=["_doc"]).body) == [doc.doc_id for doc in DOCS]
    assert _ids(es.search(index=ALIAS, size=40, sort=[{"_id": "desc"}]).body) == sorted(ROW, reverse=True)
    fish = {doc.doc_id for doc in DOCS if "fish" in doc.abstract}
    assert _ids(es.search(index=ALIAS, size=40, sort=["_id"], query={"match": {"text": "fish"}}).body) == sorted(fish)


def test_a_score_key_after_a_field_shows_the_score(es):
    answer = es.search(index=ALIAS, size=40, query={"match": {"text": "fish"}}, sort=[{"year": "desc"}, "_score"])
    hits = answer.body["hits"]["hits"]
    assert all(hit["_score"] is not None and hit["sort"][1] == hit["_score"] for hit in hits)
    assert [hit["sort"][0] for hit in hits] == sorted((hit["sort"][0] for hit in hits), reverse=True)


@pytest.mark.parametrize("sort", [[{"year": "desc"}, {"_id": "asc"}], ["_doc"], [{"_score": "desc"}, "_id"]])
def test_search_after_pages_through_every_hit_once(es, sort):
    query = {"match": {"text": "diet fish"}}
    whole = es.search(index=ALIAS, size=40, query=query, sort=sort).body["hits"]["hits"]
    seen, cursor = [], None
    while True:
        extra = {"search_after": cursor} if cursor is not None else {}
        page = es.search(index=ALIAS, size=7, query=query, sort=sort, **extra).body
        if not page["hits"]["hits"]:
            break
        if cursor is not None:
            assert "search_after" in page["esrr"]["skipped"] or "sorts by" in page["esrr"]["skipped"]
        seen += _ids(page)
        cursor = page["hits"]["hits"][-1]["sort"]
    assert seen == [hit["_id"] for hit in whole] and len(seen) == len(DOCS)


def test_the_dsl_sort_and_extra_search_after(es):
    search = Search(using=es, index=ALIAS).sort("-year", "_id").extra(size=5)
    first = search.execute()
    assert [hit.meta.id for hit in first] == _ids(es.search(index=ALIAS, size=5, sort=[{"year": "desc"}, "_id"]))
    after = search.extra(search_after=list(first.hits[-1].meta.sort)).execute()
    both = _ids(es.search(index=ALIAS, size=10, sort=[{"year": "desc"}, "_id"]))
    assert [hit.meta.id for hit in first] + [hit.meta.id for hit in after] == both


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"sort": ["title"]}, "ESRR_BACKEND=elasticsearch"),
        ({"sort": [{"year": {"order": "up"}}]}, "asc or desc"),
        ({"sort": ["year", "_id"], "search_after": [2001]}, "search_after has 1 value(s) but sort has 2"),
        ({"sort": ["_id"], "search_after": [3]}, "must be a string"),
        ({"sort": ["year"], "search_after": [2001], "from_": 10}, "[from] parameter must be set to 0"),
    ],
)
def test_a_sort_the_embedded_backend_cannot_serve_is_a_400_naming_why(es, kwargs, named):
    with pytest.raises(BadRequestError) as refused:
        es.search(index=ALIAS, **kwargs)
    assert named in refused.value.body["error"]["reason"]
