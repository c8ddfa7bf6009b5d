"""The URL parameters clients add to every read (``filter_path``, ``typed_keys``, shard and cache options), driven
through the official Python client against the embedded gateway (the fixtures of ``test_client_calls``).

Each filtered answer is compared with the same call's unfiltered answer, cut by hand here.
"""

from __future__ import annotations

import pytest
from elasticsearch import BadRequestError

from es_rerank.gateway.response_filter import filtered, read_filter_path
from tests.conftest import official_client
from tests.gateway.test_client_calls import ALIAS, client_calls_app
from tests.gateway.test_query_dsl import DOCS

QUERY = {"match": {"text": "green tea bone"}}


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory, free_port):
    """The official client of ``test_client_calls``'s gateway, served over HTTP."""
    with official_client(client_calls_app(tmp_path_factory.mktemp("url-options")), free_port()) as client:
        yield client


def _unfiltered(es, **kwargs):
    return es.search(index=ALIAS, query=QUERY, **kwargs).body


def test_filter_path_keeps_the_paths_named_on_a_search(es):
    whole = _unfiltered(es)
    assert whole["hits"]["hits"], "the query must match for the comparison to mean something"
    ids = es.search(index=ALIAS, query=QUERY, filter_path="hits.hits._id").body
    assert ids == {"hits": {"hits": [{"_id": hit["_id"]} for hit in whole["hits"]["hits"]]}}
    several = es.search(index=ALIAS, query=QUERY, filter_path=["hits.total", "took"]).body
    assert set(several) == {"took", "hits"} and several["hits"] == {"total": whole["hits"]["total"]}


def test_filter_path_wildcards_and_exclusions(es):
    whole = _unfiltered(es)
    titles = es.search(index=ALIAS, query=QUERY, filter_path="hits.hits._sou*.title").body
    assert titles == {
        "hits": {"hits": [{"_source": {"title": hit["_source"]["title"]}} for hit in whole["hits"]["hits"]]}
    }
    anywhere = es.search(index=ALIAS, query=QUERY, filter_path="**._id").body
    assert anywhere == {"hits": {"hits": [{"_id": hit["_id"]} for hit in whole["hits"]["hits"]]}}
    without = es.search(index=ALIAS, query=QUERY, filter_path="-hits.hits._source,-esrr").body
    assert "esrr" not in without and without["hits"]["total"] == whole["hits"]["total"]
    assert [set(hit) for hit in without["hits"]["hits"]] == [set(hit) - {"_source"} for hit in whole["hits"]["hits"]]
    both = es.search(index=ALIAS, query=QUERY, filter_path="hits.hits._source,-hits.hits._source.abstract").body
    assert both["hits"]["hits"][0]["_source"] == {
        key: value for key, value in whole["hits"]["hits"][0]["_source"].items() if key != "abstract"
    }


def test_filter_path_on_a_search_without_hits_is_an_empty_object_as_in_elasticsearch(es):
    none = es.search(index=ALIAS, query={"match": {"text": "zzzunmatched"}}, filter_path="hits.hits._source")
    assert none.body == {}


def test_filter_path_is_honoured_on_every_read(es):
    assert es.count(index=ALIAS, filter_path="count").body == {"count": len(DOCS)}
    assert es.get(index=ALIAS, id="1", filter_path="_source.title").body == {"_source": {"title": DOCS[0].title}}
    assert es.mget(index=ALIAS, ids=["1", "2"], filter_path="docs._id").body == {"docs": [{"_id": "1"}, {"_id": "2"}]}
    searched = es.msearch(searches=[{"index": ALIAS}, {"query": QUERY}], filter_path="responses.status").body
    assert searched == {"responses": [{"status": 200}]}
    assert es.cluster.health(filter_path="status").body.keys() == {"status"}
    assert es.info(filter_path="version.number").body == {"version": {"number": "8.0.0"}}
    mapped = es.indices.get_mapping(index=ALIAS, filter_path="*.mappings.properties.year").body
    assert mapped == {"v1": {"mappings": {"properties": {"year": {"type": "integer"}}}}}


def test_an_error_is_not_filtered_and_a_bad_filter_path_is_a_400(es):
    with pytest.raises(BadRequestError) as refused:
        es.search(index=ALIAS, query={"match": {"text": "tea"}}, size=-1, filter_path="hits.hits._id")
    assert "size" in refused.value.body["error"]["reason"]  # the error body is whole
    with pytest.raises(BadRequestError) as empty:
        es.search(index=ALIAS, query=QUERY, filter_path="hits..hits")
    assert "filter_path" in empty.value.body["error"]["reason"]


def test_typed_keys_names_aggregations_by_type_and_field(es):
    aggs = {"years": {"terms": {"field": "year"}}, "journals": {"terms": {"field": "journal"}}}
    plain = es.search(index=ALIAS, query=QUERY, aggs=aggs, size=0).body["aggregations"]
    typed = es.search(index=ALIAS, query=QUERY, aggs=aggs, size=0, typed_keys=True).body["aggregations"]
    assert typed == {"lterms#years": plain["years"], "sterms#journals": plain["journals"]}
    searched = es.msearch(searches=[{}, {"query": QUERY, "aggs": aggs, "size": 0}], index=ALIAS, typed_keys=True)
    assert set(searched.body["responses"][0]["aggregations"]) == {"lterms#years", "sterms#journals"}


def test_rest_total_hits_as_int_answers_the_total_as_a_number(es):
    whole = _unfiltered(es)
    as_int = es.search(index=ALIAS, query=QUERY, rest_total_hits_as_int=True).body
    assert as_int["hits"]["total"] == whole["hits"]["total"]["value"] and isinstance(as_int["hits"]["total"], int)
    assert as_int["hits"]["hits"] == whole["hits"]["hits"]
    uncounted = es.search(index=ALIAS, query=QUERY, rest_total_hits_as_int=True, track_total_hits=False).body
    assert uncounted["hits"]["total"] == -1
    with pytest.raises(BadRequestError) as inexact:
        es.search(index=ALIAS, query=QUERY, rest_total_hits_as_int=True, track_total_hits=2)
    assert "rest_total_hits_as_int" in inexact.value.body["error"]["reason"]


def test_shard_cache_and_routing_parameters_are_accepted_and_change_nothing(es):
    whole = _unfiltered(es)
    accepted = _unfiltered(
        es,
        request_cache=True,
        preference="_local",
        routing="a",
        timeout="5s",
        search_type="dfs_query_then_fetch",
        ignore_unavailable=True,
        allow_no_indices=True,
        expand_wildcards="open,hidden",
        batched_reduce_size=512,
        ccs_minimize_roundtrips=True,
        max_concurrent_shard_requests=5,
        pre_filter_shard_size=128,
    )
    assert accepted["hits"] == whole["hits"]
    counted = es.count(index=ALIAS, query=QUERY, preference="_local", routing="a").body["count"]
    assert counted == whole["hits"]["total"]["value"]


@pytest.mark.parametrize(
    "params, named",
    [
        ({"search_type": "scan"}, "search type"),
        ({"request_cache": "yes"}, "request_cache"),
        ({"timeout": "soon"}, "timeout"),
        ({"expand_wildcards": "everything"}, "expand wildcard"),
        ({"batched_reduce_size": "0"}, "batched_reduce_size"),
    ],
)
def test_values_elasticsearch_refuses_are_400s_naming_the_parameter(es, params, named):
    with pytest.raises(BadRequestError) as refused:
        es.perform_request("GET", f"/{ALIAS}/_search", params=params)
    assert named in refused.value.body["error"]["reason"]


def test_filter_path_semantics_on_arrays_and_nested_wildcards():
    answer = {"a": [{"b": 1, "c": {"d": 2, "e": 3}}, {"b": 4}], "f": {"g": {"d": 5}}, "h": []}
    assert filtered(answer, read_filter_path("a.c.d")) == {"a": [{"c": {"d": 2}}]}
    assert filtered(answer, read_filter_path("**.d")) == {"a": [{"c": {"d": 2}}], "f": {"g": {"d": 5}}}
    assert filtered(answer, read_filter_path("f.**")) == {"f": {"g": {"d": 5}}}
    assert filtered(answer, read_filter_path("-**.d")) == {
        "a": [{"b": 1, "c": {"e": 3}}, {"b": 4}],
        "f": {"g": {}},
        "h": [],
    }
    assert filtered(answer, read_filter_path("*")) == answer
