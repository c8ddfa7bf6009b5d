"""The client calls beside ``_search`` on the Elasticsearch backend, through the official client over HTTP.

The gateway fronts an index of ``DOCS`` loaded into the Elasticsearch stand-in (noida-db,
or ``ESRR_TEST_ES_URL``); each answer is compared with what the documents hold (computed
here) and, where Elasticsearch answers the same call, with Elasticsearch's own answer.
The embedded backend's answers are in ``tests/gateway/test_client_calls.py``.
"""

from __future__ import annotations

import pytest
from elasticsearch import AuthorizationException, NotFoundError, helpers

from es_rerank.backends.es_layout import TERM_FIELDS
from tests.gateway.test_client_calls import _ids_with
from tests.gateway.test_query_dsl import DOCS

pytestmark = pytest.mark.es


def test_info_says_es_rerank_in_front_of_elasticsearch(gateway, es_backend):
    client, _, index = gateway
    info = client.info().body
    assert (info["version"]["distribution"], info["version"]["backend"]) == ("es-rerank", es_backend)
    product = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}[es_backend]
    assert f"in front of {product}" in info["tagline"] and info["esrr"]["index"] == index


def test_the_index_exists_and_shows_its_mapping_without_esrrs_term_ids(gateway, es_client):
    client, alias, index = gateway
    assert client.indices.exists(index=alias) and not client.indices.exists(index=f"{alias}-other")
    described = client.indices.get(index=alias).body
    assert list(described) == [index] and described[index]["aliases"] == {alias: {}}
    properties = described[index]["mappings"]["properties"]
    assert not set(TERM_FIELDS) & set(properties)
    behind = es_client.indices.get(index=index).body[index]["mappings"]["properties"]
    assert {name: spec for name, spec in behind.items() if name not in TERM_FIELDS} == properties


def test_count_is_elasticsearchs_for_the_same_query(gateway, es_client):
    client, alias, index = gateway
    anded = {"match": {"text": {"query": "green tea", "operator": "and"}}}
    filtered = {"bool": {"must": [{"match": {"text": "tea"}}], "filter": [{"range": {"year": {"gte": 2005}}}]}}
    assert client.count(index=alias).body["count"] == len(DOCS)
    assert client.count(index=alias, query=anded).body["count"] == len(_ids_with("green", "tea"))
    for query in (anded, filtered):
        assert (
            client.count(index=alias, query=query).body["count"]
            == es_client.count(index=index, query=query).body["count"]
        )


def test_documents_come_back_with_their_metadata_and_without_esrrs_fields(gateway):
    client, alias, index = gateway
    found = client.get(index=alias, id="1").body
    assert (found["_index"], found["found"], found["_source"]) == (index, True, DOCS[0].source())
    assert client.get(index=alias, id="1", source_includes=["journal"]).body["_source"] == {"journal": "Nutrients"}
    assert client.get_source(index=alias, id="4").body == DOCS[3].source()  # BEIR metadata passes through
    with pytest.raises(NotFoundError):
        client.get(index=alias, id="nope")
    docs = client.mget(index=alias, ids=["2", "nope", "5"]).body["docs"]
    assert [doc["found"] for doc in docs] == [True, False, True]
    assert [doc["_source"] for doc in docs if doc["found"]] == [DOCS[1].source(), DOCS[4].source()]


def test_msearch_reranks_each_search_as_search_does(gateway):
    client, alias, _ = gateway
    query = {
        "bool": {
            "must": [{"match": {"text": "green tea cancer"}}],
            "filter": [{"range": {"year": {"gte": 2000, "lte": 2012}}}],
        }
    }
    responses = client.msearch(
        searches=[
            {"index": alias},
            {"query": query, "aggs": {"year": {"terms": {"field": "year"}}}},
            {"index": alias},
            {"query": {"no_such_query": {}}},
        ]
    ).body["responses"]
    assert [response["status"] for response in responses] == [200, 400]
    alone = client.search(index=alias, query=query, aggs={"year": {"terms": {"field": "year"}}}).body
    assert [hit["_id"] for hit in responses[0]["hits"]["hits"]] == [hit["_id"] for hit in alone["hits"]["hits"]]
    assert responses[0]["aggregations"] == alone["aggregations"]
    assert all(hit["fields"]["reranked"] == [True] for hit in responses[0]["hits"]["hits"])


def test_a_scroll_and_a_point_in_time_page_through_elasticsearch_in_its_order(gateway):
    client, alias, _ = gateway
    first = client.search(index=alias, scroll="1m", size=2, query={"match": {"text": "tea"}}).body
    assert "sorts by" not in str(first["esrr"]) and "scroll" in first["esrr"]["skipped"]
    second = client.scroll(scroll_id=first["_scroll_id"], scroll="1m").body
    assert second["hits"]["hits"] and second["esrr"]["ranker"] == "Elasticsearch"
    assert all(hit["fields"]["reranked"] == [False] and "text" not in hit["_source"] for hit in second["hits"]["hits"])
    assert client.clear_scroll(scroll_id=first["_scroll_id"]).body["succeeded"]
    with_tea = {doc.doc_id for doc in DOCS if "tea" in f"{doc.title} {doc.abstract}".lower().split()}
    scanned = helpers.scan(client, index=alias, query={"query": {"match": {"text": "tea"}}}, size=2)
    assert {hit["_id"] for hit in scanned} == with_tea  # helpers.scan: every page of the scroll
    pit = client.open_point_in_time(index=alias, keep_alive="1m").body["id"]
    paged = client.search(pit={"id": pit, "keep_alive": "1m"}, sort=[{"doc_id": "asc"}], size=2).body
    assert [hit["_id"] for hit in paged["hits"]["hits"]] == sorted(doc.doc_id for doc in DOCS)[:2]
    assert client.close_point_in_time(id=pit).body["succeeded"]


def test_cluster_health_is_green_and_writes_are_refused(gateway, es_client):
    client, alias, index = gateway
    assert client.cluster.health(wait_for_status="yellow").body["status"] == "green"
    with pytest.raises(AuthorizationException):
        client.index(index=alias, id="1", document={"title": "overwritten"})
    with pytest.raises(AuthorizationException):
        client.indices.delete(index=alias)
    assert es_client.get(index=index, id="1").body["_source"]["title"] == DOCS[0].title


def test_documents_are_read_from_the_index_the_alias_names_after_a_prune(es_client, es_settings):
    from es_rerank.backends.elasticsearch import ElasticsearchBackend
    from es_rerank.backends.es_layout import stats_root
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.ranking.served import ServedSearch
    from index_setup.es_index import delete_old_versions, load_index

    load_index(es_client, DOCS, es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    client = create_app(
        ServedSearch(SearchPipeline(backend, 0), check_every_s=3600), GatewaySettings(**es_settings.model_dump())
    ).test_client()
    load_index(es_client, DOCS, es_settings, version="v2", progress=False)
    assert delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)  # v1, still served
    alias = es_settings.es_alias
    found = client.get(f"/{alias}/_doc/1")
    assert found.status_code == 200 and found.get_json()["_source"] == DOCS[0].source()
    assert found.get_json()["_index"].endswith("v2")  # the index the alias names now
    docs = client.post(f"/{alias}/_mget", json={"ids": ["1", "nope"]}).get_json()["docs"]
    assert [doc["found"] for doc in docs] == [True, False]


def test_text_is_in_source_where_the_search_asks_for_it(gateway):
    """RAG libraries read the field they searched from ``_source`` (LangChain's ElasticsearchStore asks for
    ``["text", "metadata"]``): ``text`` is title and abstract joined, as on the embedded backend, reranked or sorted."""
    client, alias, _ = gateway
    joined = {doc.doc_id: "\n\n".join(part for part in (doc.title, doc.abstract) if part) for doc in DOCS}
    asked = client.search(index=alias, query={"match": {"text": "tea"}}, source=["text", "metadata"]).body
    hits = asked["hits"]["hits"]
    assert hits and all(hit["fields"]["reranked"] == [True] for hit in hits)
    assert all(set(hit["_source"]) <= {"text", "metadata"} for hit in hits)
    assert {hit["_id"]: hit["_source"]["text"] for hit in hits} == {hit["_id"]: joined[hit["_id"]] for hit in hits}
    with_title = client.search(index=alias, query={"match": {"text": "tea"}}, source=["text", "title"]).body
    assert all(set(hit["_source"]) == {"text", "title"} for hit in with_title["hits"]["hits"])
    sorted_hits = client.search(
        index=alias, query={"match": {"text": "tea"}}, source=["text"], sort=[{"year": "desc"}]
    ).body["hits"]["hits"]
    assert sorted_hits and all(hit["_source"] == {"text": joined[hit["_id"]]} for hit in sorted_hits)
    plain = client.search(index=alias, query={"match": {"text": "tea"}}).body["hits"]["hits"]
    assert all("text" not in hit["_source"] for hit in plain)  # the default _source stays as stored
