"""The calls an Elasticsearch client makes besides ``_search``, driven through the official client over HTTP.

The gateway (the real app, served by werkzeug on a free loopback port) fronts an embedded
index of ``DOCS``; the Elasticsearch backend's answers to the same calls are in
``tests/backends/test_client_calls_es.py``. Expected counts and documents are computed
here from ``DOCS`` with plain Python, not through the backend. Malformed requests and
limits are driven through Flask's test client, where the raw bytes can be anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from elasticsearch import AuthorizationException, BadRequestError, NotFoundError
from flask import Flask

from es_rerank.backends.base import BackendError
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.gateway.state import gateway_state
from es_rerank.payload import WorkerSetupError
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from index_setup.embedded_index import build_embedded_index
from tests.conftest import official_client
from tests.gateway.test_query_dsl import DOCS

ALIAS = "esrr-docs"
MAX_MGET, MAX_MSEARCH = 4, 3


def _words(doc) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", f"{doc.title} {doc.abstract}".lower()))


def _ids_with(*words: str) -> set[str]:
    """The documents holding every one of ``words`` in title or abstract (an AND, computed without the backend)."""
    return {doc.doc_id for doc in DOCS if set(words) <= _words(doc)}


def client_calls_app(home: Path) -> Flask:
    """The gateway over an embedded index of ``DOCS`` in ``home``, with small mget and msearch limits (shared with
    ``test_url_options``)."""
    build_embedded_index(DOCS, home / "indexes" / "embedded", version="v1", progress=False)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    served = ServedSearch(SearchPipeline(backend, 10, feedback=FeedbackParams(2, 1.0)), 3600)
    return create_app(
        served, GatewaySettings(home=home, gateway_max_mget_docs=MAX_MGET, gateway_max_msearch_searches=MAX_MSEARCH)
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    return client_calls_app(tmp_path_factory.mktemp("client-calls"))


@pytest.fixture(scope="module")
def es(app, free_port):
    """The official Elasticsearch client of the gateway, served over HTTP."""
    with official_client(app, free_port()) as client:
        yield client


def test_info_has_a_version_block_naming_es_rerank_and_its_backend(es):
    info = es.info().body
    assert info["version"]["number"].startswith("8.")
    assert (info["version"]["distribution"], info["version"]["backend"]) == ("es-rerank", "embedded")
    assert "es-rerank in front of the embedded tantivy index" in info["tagline"]
    assert info["esrr"]["index"] == "v1" and info["esrr"]["documents"] == len(DOCS)


def test_the_served_index_exists_under_its_alias_and_version_and_no_other(es):
    assert es.indices.exists(index=ALIAS) and es.indices.exists(index="v1") and es.indices.exists(index="esrr-*")
    assert not es.indices.exists(index="other")


def test_get_index_shows_the_alias_and_what_is_searched_and_filtered(es):
    described = es.indices.get(index=ALIAS).body
    assert list(described) == ["v1"] and described["v1"]["aliases"] == {ALIAS: {}}
    properties = described["v1"]["mappings"]["properties"]
    assert properties["year"] == {"type": "integer"} and properties["publication_types"] == {"type": "keyword"}
    assert properties["title"]["copy_to"] == "text"  # searched as `text`, title and abstract together
    assert es.indices.get_mapping(index=ALIAS).body == {"v1": {"mappings": described["v1"]["mappings"]}}
    with pytest.raises(NotFoundError) as refused:
        es.indices.get(index="other")
    assert refused.value.body["error"]["type"] == "index_not_found_exception"


def test_count_honours_the_query_as_search_does(es):
    assert es.count(index=ALIAS).body["count"] == len(DOCS)
    assert es.count().body["count"] == len(DOCS)
    anded = {"match": {"text": {"query": "green tea", "operator": "and"}}}
    assert es.count(index=ALIAS, query=anded).body["count"] == len(_ids_with("green", "tea"))
    assert es.count(index=ALIAS, q="tea").body["count"] == len({d.doc_id for d in DOCS if "tea" in _words(d)})
    recent = {"bool": {"filter": [{"range": {"year": {"gte": 2005}}}]}}
    assert es.count(index=ALIAS, query=recent).body["count"] == sum(1 for d in DOCS if (d.year or 0) >= 2005)
    searched = es.search(index=ALIAS, query=anded, size=0).body["hits"]["total"]["value"]
    assert searched == es.count(index=ALIAS, query=anded).body["count"]


def test_get_returns_the_document_and_its_metadata(es):
    found = es.get(index=ALIAS, id="1").body
    assert (found["_index"], found["_id"], found["found"]) == ("v1", "1", True)
    assert found["_source"] == DOCS[0].source()
    some = es.get(index=ALIAS, id="1", source_includes=["title", "year"]).body["_source"]
    assert some == {"title": DOCS[0].title, "year": DOCS[0].year}
    assert "_source" not in es.get(index=ALIAS, id="1", source=False).body
    assert es.get_source(index=ALIAS, id="2").body == DOCS[1].source()
    assert es.exists(index=ALIAS, id="2") and not es.exists(index=ALIAS, id="nope")


def test_a_missing_document_is_a_404_found_false(es):
    with pytest.raises(NotFoundError) as missing:
        es.get(index=ALIAS, id="nope")
    assert missing.value.body == {"_index": "v1", "_id": "nope", "found": False}
    with pytest.raises(NotFoundError) as missing_source:
        es.get_source(index=ALIAS, id="nope")
    assert missing_source.value.body["error"]["type"] == "resource_not_found_exception"
    with pytest.raises(NotFoundError):
        es.get(index="other", id="1")


def test_mget_reads_each_document_in_order_found_or_not(es):
    docs = es.mget(index=ALIAS, ids=["3", "nope", "1", "3"]).body["docs"]
    assert [(doc["_id"], doc["found"]) for doc in docs] == [("3", True), ("nope", False), ("1", True), ("3", True)]
    assert docs[2]["_source"] == DOCS[0].source()
    mixed = es.mget(docs=[{"_index": ALIAS, "_id": "2", "_source": ["journal"]}, {"_index": "other", "_id": "1"}])
    first, second = mixed.body["docs"]
    assert first["_source"] == {"journal": "Circulation"}
    assert second["error"]["type"] == "index_not_found_exception" and second["_index"] == "other"


def test_msearch_answers_each_search_reranked_or_with_its_own_error(es):
    responses = es.msearch(
        searches=[
            {"index": ALIAS},
            {"query": {"match": {"text": {"query": "green tea", "operator": "and"}}}, "size": 10},
            {},
            {"query": {"geo_shape": {"x": {}}}},
            {"index": "other"},
            {"query": {"match_all": {}}},
        ]
    ).body["responses"]
    assert [response["status"] for response in responses] == [200, 400, 404]
    assert {hit["_id"] for hit in responses[0]["hits"]["hits"]} == _ids_with("green", "tea")
    assert all(hit["fields"]["reranked"] == [True] for hit in responses[0]["hits"]["hits"])
    assert "embedded backend" in responses[1]["error"]["reason"]
    assert responses[2]["error"]["type"] == "index_not_found_exception"
    alone = es.search(index=ALIAS, query={"match": {"text": {"query": "green tea", "operator": "and"}}}).body
    assert [hit["_id"] for hit in alone["hits"]["hits"]] == [hit["_id"] for hit in responses[0]["hits"]["hits"]]


def test_cluster_health_is_green_when_searches_are_answered(es):
    health = es.cluster.health().body
    assert (health["status"], health["timed_out"], health["active_shards_percent_as_number"]) == ("green", False, 100.0)
    assert health["esrr"]["index"] == "v1"
    assert es.cluster.health(wait_for_status="yellow", timeout="1s").body["status"] == "green"
    assert es.cluster.health(index=ALIAS).body["status"] == "green"


@pytest.mark.parametrize(
    "call",
    [
        lambda es: es.index(index=ALIAS, id="1", document={"title": "x"}),
        lambda es: es.index(index=ALIAS, document={"title": "x"}),
        lambda es: es.create(index=ALIAS, id="9", document={"title": "x"}),
        lambda es: es.update(index=ALIAS, id="1", doc={"title": "x"}),
        lambda es: es.delete(index=ALIAS, id="1"),
        lambda es: es.bulk(operations=[{"delete": {"_index": ALIAS, "_id": "1"}}]),
        lambda es: es.delete_by_query(index=ALIAS, query={"match_all": {}}),
        lambda es: es.update_by_query(index=ALIAS, query={"match_all": {}}),
        lambda es: es.indices.delete(index=ALIAS),
        lambda es: es.indices.create(index="new-index"),
        lambda es: es.indices.put_mapping(index=ALIAS, properties={"x": {"type": "keyword"}}),
        lambda es: es.indices.put_settings(index=ALIAS, settings={"number_of_replicas": 1}),
        lambda es: es.indices.refresh(index=ALIAS),
        lambda es: es.indices.update_aliases(actions=[{"remove": {"index": "v1", "alias": ALIAS}}]),
    ],
    ids=[
        "index",
        "index-auto-id",
        "create",
        "update",
        "delete",
        "bulk",
        "delete_by_query",
        "update_by_query",
        "indices.delete",
        "indices.create",
        "put_mapping",
        "put_settings",
        "refresh",
        "update_aliases",
    ],
)
def test_writes_and_admin_calls_are_refused_as_read_only_and_change_nothing(es, call):
    with pytest.raises(AuthorizationException) as refused:
        call(es)
    error = refused.value.body["error"]
    assert error["type"] == "cluster_block_exception" and refused.value.meta.status == 403
    assert "read-only" in error["reason"] and "esrr index build" in error["reason"]
    assert es.count(index=ALIAS).body["count"] == len(DOCS)
    assert es.get(index=ALIAS, id="1").body["_source"] == DOCS[0].source()


@pytest.mark.parametrize(
    "call",
    [
        lambda es: es.open_point_in_time(index=ALIAS, keep_alive="1m"),
        lambda es: es.close_point_in_time(id="abc"),
        lambda es: es.search(index=ALIAS, query={"match_all": {}}, pit={"id": "abc", "keep_alive": "1m"}),
    ],
    ids=["open_point_in_time", "close_point_in_time", "search_pit"],
)
def test_points_in_time_are_400s_naming_the_backend_that_serves_them(es, call):  # scrolls: test_scroll.py
    with pytest.raises(BadRequestError) as refused:
        call(es)
    assert "Elasticsearch backend" in refused.value.body["error"]["reason"]


@pytest.mark.parametrize(
    "call",
    [
        lambda es: es.cat.indices(),
        lambda es: es.field_caps(index=ALIAS, fields="*"),
        lambda es: es.explain(index=ALIAS, id="1", query={"match_all": {}}),
    ],
    ids=["cat.indices", "field_caps", "explain"],
)
def test_a_read_the_gateway_does_not_serve_is_a_404_that_lists_those_it_does(es, call):
    with pytest.raises(NotFoundError) as missing:  # not a 403: these read, they do not write
        call(es)
    assert missing.value.body["error"]["type"] == "no_handler_found_exception"
    assert "_msearch" in missing.value.body["error"]["reason"]


def test_the_alias_exists_and_names_the_served_index(es):
    assert es.indices.exists_alias(name=ALIAS) and not es.indices.exists_alias(name="other")
    assert es.indices.get_alias(name=ALIAS).body == {"v1": {"aliases": {ALIAS: {}}}}
    assert es.indices.exists_alias(index=ALIAS, name=ALIAS)


def test_the_limits_on_mget_and_msearch_are_400s_that_name_them(es):
    with pytest.raises(BadRequestError) as mget:
        es.mget(index=ALIAS, ids=[str(n) for n in range(MAX_MGET + 1)])
    assert "ESRR_GATEWAY_MAX_MGET_DOCS" in mget.value.body["error"]["reason"]
    with pytest.raises(BadRequestError) as msearch:
        es.msearch(index=ALIAS, searches=[{}, {"query": {"match_all": {}}}] * (MAX_MSEARCH + 1))
    assert "ESRR_GATEWAY_MAX_MSEARCH_SEARCHES" in msearch.value.body["error"]["reason"]


NDJSON = "application/x-ndjson"


@pytest.mark.parametrize(
    "data, named",
    [
        (b"", "empty"),
        (b'{"index": "esrr-docs"}\n', "has a header and no body"),
        (b'{"index": "esrr-docs"\n{}\n', "line 1"),
        (b"[]\n{}\n", "header object"),
        (b'{"indexx": "a"}\n{}\n', "unknown key [indexx]"),
        (b'{"index": 5}\n{}\n', "as a string"),
        (b'{}\n{"query": \n', "line 2"),
    ],
)
def test_a_malformed_msearch_is_a_400_naming_the_line(app, data, named):
    response = app.test_client().post("/_msearch", data=data, content_type=NDJSON)
    assert response.status_code == 400 and named in response.get_json()["error"]["reason"]


def test_msearch_answers_a_search_body_that_is_not_an_object_in_its_slot(app):
    response = app.test_client().post("/esrr-docs/_msearch", data=b'{}\n[1]\n\n{"size": 1}\n', content_type=NDJSON)
    first, second = response.get_json()["responses"]
    assert (first["status"], second["status"]) == (400, 200) and len(second["hits"]["hits"]) == 1


@pytest.mark.parametrize(
    "path, body, named",
    [
        ("/_mget", {"ids": ["1"]}, "/<index>/_mget"),
        ("/_mget", {"docs": [{"_id": "1"}]}, "index is missing for doc 0"),
        ("/esrr-docs/_mget", {"docs": [{"_id": "1", "stored": 1}]}, "unknown key [stored]"),
        ("/esrr-docs/_mget", {"docs": [{"_id": None}]}, "must be a string"),
        ("/esrr-docs/_mget", {"docs": []}, "non-empty list"),
        ("/esrr-docs/_mget", {"ids": ["1"], "docs": []}, "docs or ids"),
        ("/esrr-docs/_mget", {"ids": ["x" * 513]}, "too long"),
        ("/esrr-docs/_mget", {"docs": [{"_id": "1", "_source": 5}]}, "[_source]"),
        ("/esrr-docs/_count", {"query": {"match_all": {}}, "size": 3}, "request does not support [size]"),
        ("/esrr-docs/_count", {"query": {"span_near": {}}}, "span_near"),
    ],
)
def test_a_malformed_document_read_or_count_is_a_400_naming_the_problem(app, path, body, named):
    response = app.test_client().post(path, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400 and named in response.get_json()["error"]["reason"], response.get_json()


def test_unknown_parameters_are_400s_naming_those_read(app):
    client = app.test_client()
    for path in ("/esrr-docs/_doc/1?version=3", "/_count?size=3", "/_msearch?analyzer=x", "/_cluster/health?wait=1"):
        response = client.get(path)
        assert response.status_code == 400, path
        error = response.get_json()["error"]
        assert error["type"] == "parsing_exception" and "reads" in error["reason"] and "pretty" in error["reason"]
    assert "green, yellow or red" in client.get("/_cluster/health?wait_for_status=blue").get_json()["error"]["reason"]


class _RefusingWorker:
    """A reranker whose worker refuses every request (set up for another index)."""

    name = "delta-32-lex3"

    def __call__(self, *args):
        raise WorkerSetupError("the worker serves index v0, not v1: start it with this ESRR_HOME")

    def close(self) -> None:
        pass


def test_a_worker_refusal_fails_only_the_searches_of_an_msearch_that_ask_it(app, tmp_path):
    backend = gateway_state(app).served.pipeline().backend
    refusing = create_app(
        ServedSearch(SearchPipeline(backend, 10, _RefusingWorker()), 3600), GatewaySettings(home=tmp_path)
    ).test_client()
    data = (
        b'{}\n{"query": {"match": {"text": "green tea"}}}\n'
        b'{}\n{"query": {"bool": {"filter": [{"range": {"year": {"gte": 2005}}}]}}}\n'
    )
    first, second = refusing.post("/_msearch", data=data, content_type=NDJSON).get_json()["responses"]
    assert first["status"] == 503 and "refused" in first["error"]["reason"]
    assert second["status"] == 200 and second["hits"]["total"]["value"] == sum(1 for d in DOCS if (d.year or 0) >= 2005)


class _BackendThatFails:
    """The served index, whose searches fail as an unreachable Elasticsearch's do."""

    engine = "embedded"

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.index, self.stats = backend.index, backend.stats

    def prepare(self, *args):
        raise BackendError("cannot reach Elasticsearch at http://127.0.0.1:9; start it or set ESRR_ES_URL")

    first_stage = count = sources = description = prepare

    def current(self):
        return self


def test_health_is_red_not_an_error_while_searches_cannot_be_answered(app, tmp_path):
    backend = gateway_state(app).served.pipeline().backend
    failing = create_app(
        ServedSearch(SearchPipeline(_BackendThatFails(backend), 10), 3600), GatewaySettings(home=tmp_path)
    ).test_client()
    health = failing.get("/_cluster/health")
    assert health.status_code == 200 and health.get_json()["status"] == "red"
    assert "start it or set ESRR_ES_URL" in health.get_json()["esrr"]["problem"]
    waited = failing.get("/_cluster/health?wait_for_status=yellow")
    assert waited.status_code == 408 and waited.get_json()["timed_out"] is True
    assert failing.get("/esrr-docs/_doc/1").status_code == 503
    batch = failing.post("/_msearch", data=b'{}\n{"query": {"match_all": {}}}\n', content_type=NDJSON).get_json()
    assert batch["responses"][0]["status"] == 503


def test_source_exclude_vectors_is_accepted_as_elasticsearch_dsl_9_sends_it(es):
    # The index holds no vector field: either value leaves the _source as it is.
    query = {"match": {"text": "leafy"}}
    whole = es.search(index=ALIAS, query=query, source={"exclude_vectors": False}).body["hits"]["hits"]
    assert [hit["_source"] for hit in whole] == [DOCS[3].source()]
    some = es.search(index=ALIAS, query=query, source={"includes": ["year"], "exclude_vectors": True}).body
    assert some["hits"]["hits"][0]["_source"] == {"year": DOCS[3].year}
    docs = es.mget(index=ALIAS, docs=[{"_id": "4", "_source": {"exclude_vectors": False}}]).body["docs"]
    assert docs[0]["_source"] == DOCS[3].source()
    with pytest.raises(BadRequestError) as refused:
        es.search(index=ALIAS, query=query, source={"exclude_vectors": "no"})
    assert "exclude_vectors" in refused.value.body["error"]["reason"]
