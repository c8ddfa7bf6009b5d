"""The HTTP gateway (``es_rerank.gateway.app``) over a real embedded index, without a model.

Flask's test client drives the real app; the worker-backed gateway, served over real
HTTP to the official Elasticsearch client, is tested in ``tests/gateway/test_gateway_worker.py``.
"""

from __future__ import annotations

import shutil
import socket
from contextlib import nullcontext
from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.backends.base import BackendError
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.cli import main
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

MORE_DOCS = (
    Document("d", "Vitamin D and bone fractures", "Vitamin D supplements and the risk of bone fractures."),
    Document("e", "Green tea", "Green tea catechins and breast cancer risk."),
)


def _index(root: Path, version: str, docs=TINY_DOCS) -> None:
    build_embedded_index(list(docs), root, version=version, progress=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    _index(tmp_path / "indexes" / "embedded", "v1")
    return tmp_path


def _client(home: Path, check_every_s: float = 5.0, window: int = 10, backend=None):
    backend = backend or EmbeddedBackend.open_current(home / "indexes" / "embedded")
    served = ServedSearch(SearchPipeline(backend, window), check_every_s)
    return create_app(served, GatewaySettings(home=home)).test_client()


def _ids(response) -> list[str]:
    return [hit["_id"] for hit in response.get_json()["hits"]["hits"]]


def test_search_answers_as_elasticsearch_would(home):
    response = _client(home).get("/_search?q=vitamin bone")
    body = response.get_json()
    assert response.status_code == 200
    assert response.headers["X-Elastic-Product"] == "Elasticsearch"  # the ES 8 clients check it
    assert _ids(response) == ["a", "b"]
    assert body["hits"]["total"] == {"value": 2, "relation": "eq"}
    assert body["hits"]["hits"][0]["_index"] == "v1"
    assert body["hits"]["max_score"] == body["hits"]["hits"][0]["_score"]
    assert body["esrr"] == {"ranker": "BM25"}
    assert set(body) >= {"took", "timed_out", "hits"}


@pytest.mark.parametrize(
    "path",
    ["/_search", "/esrr-docs/_search", "/v1/_search", "/_all/_search", "/esrr-*/_search", "/v1,esrr-docs/_search"],
)
@pytest.mark.parametrize(
    "query",
    [
        {"match": {"text": "vitamin bone"}},
        {"match": {"text": {"query": "vitamin bone", "operator": "or"}}},
        {"multi_match": {"query": "vitamin bone", "fields": ["title", "abstract^2"]}},
        {"query_string": {"query": "vitamin bone"}},
        {"simple_query_string": {"query": "vitamin bone", "fields": ["text"]}},
    ],
)
def test_every_keyword_query_form_searches_the_same_words(home, path, query):
    assert _ids(_client(home).post(path, json={"query": query})) == ["a", "b"]


def test_from_and_size_page_through_the_ranking(home):
    client = _client(home)
    everything = _ids(client.get("/_search?q=vitamin bone"))
    assert (
        _ids(client.post("/_search", json={"query": {"match": {"text": "vitamin bone"}}, "from": 1, "size": 1}))
        == everything[1:2]
    )
    counted = client.get("/_search?q=vitamin bone&size=0").get_json()["hits"]
    assert counted["hits"] == [] and counted["total"] == {"value": 2, "relation": "eq"}  # counted, as ES counts


@pytest.mark.parametrize(
    "request_args, fix",
    [
        (
            {"json": {"query": {"match": {"text": "bone"}}, "aggs": {"y": {"percentiles": {"field": "year"}}}}},
            "[percentiles] aggregations are not served",
        ),
        ({"json": {"query": {"match": {"text": "bone"}}, "rescore": {}}}, "served by the Elasticsearch backend"),
        ({"json": {"query": {"term": {"authors": "bone"}}}}, "served by the Elasticsearch backend"),
        ({"json": {"query": {"fuzzy": {"journal": "bone"}}}}, "served by the Elasticsearch backend"),
        ({"json": {"query": {"match": {"text": {"query": "bone", "fuzziness": "lots"}}}}}, "fuzziness must be 0, 1, 2"),
        ({"json": {"query": {"query_string": {"query": "journal:bone*"}}}}, "served by the Elasticsearch backend"),
        ({"json": {"query": {"query_string": {"query": "bone AND (vitamin"}}}}, "cannot parse"),
        ({"json": {"query": {"match": {"text": "bone"}}, "ext": {"esrr": {"window_size": 11}}}}, "from 0 to 10"),
        ({"json": {"query": {"match": {"text": "bone"}}, "ext": {"esrr": {"score_mode": "max"}}}}, "replace, total"),
        ({"json": {"query": {"match": {"text": "bone"}}, "ext": {"other": {}}}}, "only the section [esrr]"),
        ({"json": {"query": {"match": {"text": "bone"}}, "sort": [{"title": "desc"}]}}, "served by the Elasticsearch"),
        ({"json": {"query": {"match": {"authors": "bone"}}}}, "title and abstract together"),
        ({"json": {"query": {"match": {"text": "bone", "title": "bone"}}}}, "one field"),
        ({"json": {"query": {"match": {"text": 3}}}}, "as a string"),
        ({"json": ["bone"]}, "not an object"),
        ({"data": "{bone", "content_type": "application/json"}, "not JSON"),
        ({"query_string": "q=bone&size=-1"}, "[size] must be a whole number"),
        ({"query_string": "q=bone&from=two"}, "[from] must be a whole number"),
        ({"json": {"query": {"match": {"text": "bone"}}, "size": True}}, "[size] must be a whole number"),
        ({"query_string": "q=bone&from=9990&size=20"}, "Result window is too large"),
        ({"query_string": "q=bone&size=50000"}, "at most 10000 hits"),
        ({"query_string": "q=bone&size=" + "9" * 5000}, "[size] must be a whole number"),
        ({"query_string": "q=bone&size=%C2%B2"}, "[size] must be a whole number"),  # a superscript 2
        ({"query_string": "q=bone&size=%D9%A3"}, "[size] must be a whole number"),  # an Arabic-Indic 3
        ({"query_string": "q=bone&df=authors"}, "title and abstract together"),
        ({"query_string": "q=bone&analyzer=x"}, "unrecognized parameter: [analyzer]"),
        ({"json": {"query": {"multi_match": {"query": "bone", "fields": [["title"]]}}}}, "a list of them"),
        ({"json": {"query": {"multi_match": {"query": "bone", "fields": [{"a": 1}]}}}}, "a list of them"),
        ({"data": "[" * 100_000 + "]" * 100_000, "content_type": "application/json"}, "nests too deeply"),
        ({"query_string": "q=bone", "json": {"query": {"match": {"text": "bone"}}}}, "send one of them"),
    ],
)
def test_a_bad_search_is_a_400_that_names_the_fix(home, request_args, fix):
    response = _client(home).post("/_search", **request_args)
    error = response.get_json()
    assert response.status_code == 400, error
    assert error["status"] == 400 and error["error"]["type"] == "parsing_exception"
    assert fix in error["error"]["reason"]
    assert error["error"]["root_cause"][0]["reason"] == error["error"]["reason"]


@pytest.mark.parametrize("path", ["/pubmed/_search", "/esrr-docs,pubmed/_search", "/x*/_search", "/,/_search"])
def test_another_index_is_a_404_naming_the_served_one(home, path):
    response = _client(home).get(f"{path}?q=bone")
    assert response.status_code == 404
    assert response.get_json()["error"]["type"] == "index_not_found_exception"
    assert "/esrr-docs/_search" in response.get_json()["error"]["reason"]


def test_an_oversized_body_is_a_413_before_it_is_read(home):
    response = _client(home).post("/_search", data=b" " * (2 << 20), content_type="application/json")
    assert response.status_code == 413 and response.get_json()["status"] == 413


def test_unknown_routes_and_methods_answer_in_elasticsearch_shape(home):
    client = _client(home)
    missing, wrong_method = client.get("/_cat/indices"), client.open("/_search", method="TRACE")
    assert (missing.status_code, wrong_method.status_code) == (404, 405)
    assert missing.get_json()["error"]["type"] == "no_handler_found_exception"
    assert wrong_method.get_json()["status"] == 405
    assert set(wrong_method.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "POST"}
    # A write to one of the gateway's own APIs is a 405 too; a write to an index is read-only (test_client_calls).
    assert client.delete("/_esrr/health").status_code == 405


class _BackendThatFails:
    """The served index, whose searches fail as an unreachable Elasticsearch's do."""

    engine = "elasticsearch"

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend
        self.index, self.stats = backend.index, backend.stats

    def reading(self):
        return nullcontext()

    def check_answer(self, prepared, hits, limits):
        pass

    def prepare(self, body):
        return body

    def first_stage(self, prepared, k: int):
        raise BackendError("cannot reach Elasticsearch at http://127.0.0.1:9; check ESRR_ES_URL")

    def current(self):
        return self


def test_a_backend_that_cannot_answer_is_a_503_with_its_fix(home):
    backend = _BackendThatFails(EmbeddedBackend.open_current(home / "indexes" / "embedded"))
    response = _client(home, backend=backend).get("/_search?q=bone")
    assert response.status_code == 503
    assert "check ESRR_ES_URL" in response.get_json()["error"]["reason"]


def test_a_reindex_is_followed_without_a_restart(home):
    client = _client(home, check_every_s=0)
    assert client.get("/_search?q=green tea").get_json()["hits"]["hits"] == []
    _index(home / "indexes" / "embedded", "v2", TINY_DOCS + MORE_DOCS)
    body = client.get("/_search?q=green tea").get_json()
    assert [hit["_id"] for hit in body["hits"]["hits"]] == ["e"]
    assert body["hits"]["hits"][0]["_index"] == "v2"
    assert client.get("/v1/_search?q=bone").status_code == 404  # the old version is no longer served


def test_reload_follows_at_once_and_a_damaged_version_leaves_the_old_one_serving(home):
    client = _client(home, check_every_s=3600)
    _index(home / "indexes" / "embedded", "v2", TINY_DOCS + MORE_DOCS)
    assert client.get("/_esrr/health").get_json()["index"] == "v1"  # not time to look yet
    assert client.post("/_esrr/reload").get_json() == {"index": "v2", "changed": True}
    assert client.post("/_esrr/reload").get_json() == {"index": "v2", "changed": False}
    (home / "indexes" / "embedded" / "v3").mkdir()  # no meta.json: not a complete index
    (home / "indexes" / "embedded" / "CURRENT").write_text("v3\n")
    damaged = client.post("/_esrr/reload")
    reason = damaged.get_json()["error"]["reason"]
    assert damaged.status_code == 503 and "still serving index [v2]" in reason and "not a complete" in reason
    assert _ids(client.get("/_search?q=green tea")) == ["e"]


def test_a_version_whose_statistics_cannot_be_read_leaves_the_old_one_serving(home):
    root = home / "indexes" / "embedded"
    client = _client(home, check_every_s=0)
    _index(root, "v2", TINY_DOCS + MORE_DOCS)
    (root / "v2" / "stats" / "vocab.txt").unlink()
    (root / "v2" / "stats" / "vocab.txt").mkdir()  # unreadable as a file: IsADirectoryError
    for path in ("/_search?q=bone", "/_esrr/health", "/"):
        response = client.get(path)
        assert response.status_code == 200, response.get_json()
    assert client.get("/_esrr/health").get_json()["index"] == "v1"


def test_a_pointer_that_is_not_text_leaves_the_old_version_serving(home):
    client = _client(home, check_every_s=0)
    (home / "indexes" / "embedded" / "CURRENT").write_bytes(b"v\xff1\n")
    assert _ids(client.get("/_search?q=bone")) == ["b", "a"]
    refused = client.post("/_esrr/reload")
    assert refused.status_code == 503 and "it is not text" in refused.get_json()["error"]["reason"]


def test_health_is_a_503_while_the_backend_cannot_answer(home):
    backend = _BackendThatFails(EmbeddedBackend.open_current(home / "indexes" / "embedded"))
    response = _client(home, backend=backend).get("/_esrr/health")
    assert response.status_code == 503 and "check ESRR_ES_URL" in response.get_json()["error"]["reason"]


def test_a_copied_version_is_opened_once(home):
    root = home / "indexes" / "embedded"
    served = ServedSearch(SearchPipeline(EmbeddedBackend.open_current(root), 10), check_every_s=0)
    shutil.copytree(root / "v1", root / "v1-copy")
    (root / "CURRENT").write_text("v1-copy\n")
    served.pipeline()
    backend = served.pipeline().backend
    assert backend.version_dir == root / "v1-copy" and served.pipeline().backend is backend


def test_metrics_count_requests_and_time_each_stage(home):
    client = _client(home)
    client.get("/_search?q=bone")
    client.get("/_search?q=bone&size=-1")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'esrr_http_requests_total{route="/_search",status="200"} 1.0' in text
    assert 'esrr_http_requests_total{route="/_search",status="400"} 1.0' in text
    assert 'esrr_search_stage_seconds_count{stage="retrieve"} 1.0' in text
    assert "esrr_model_fallbacks_total 0.0" in text


def test_info_and_health_name_the_served_index(home):
    client = _client(home)
    info = client.get("/").get_json()
    assert info["esrr"] == {"index": "v1", "documents": 3, "reranks": False, "backend": "embedded", "window": 10}
    assert info["tagline"].endswith(": BM25")  # no model: the tagline does not promise one
    assert client.get("/_esrr/health").get_json()["status"] == "green"


def test_serve_refuses_a_taken_port_with_the_fix(home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(
            main,
            ["serve", "--port", str(taken.getsockname()[1])],
            env={"ESRR_HOME": str(home), "ESRR_GATEWAY_RERANK": "false"},
        )
    assert result.exit_code == 1 and "Address already in use); choose another --port" in result.output


@pytest.mark.parametrize("host", ["999.1.1.1", "nonexistent.invalid"])
def test_serve_refuses_a_host_that_is_no_address_with_the_fix(home, host):
    with socket.socket() as probe:  # a free port: only the host can be wrong
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(
        main,
        ["serve", "--host", host, "--port", str(port)],
        env={"ESRR_HOME": str(home), "ESRR_GATEWAY_RERANK": "false"},
    )
    assert (
        result.exit_code == 1
        and "not an address or a host name that resolves); choose another --port or --host" in result.output
    ), result.output


def test_health_and_the_ranker_say_when_the_votes_belong_to_another_corpus(home):
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    foreign = CorpusIdentity(3633, "0" * 64, "nfcorpus", "b1")  # e.g. NFCorpus votes in front of this index
    for corpus, applied in ((foreign, False), (CorpusIdentity.of(backend.stats), True)):
        votes = JudgedNeighbours({"q1": "vitamin", "q2": "cancer"}, {"q1": {"a": 1}, "q2": {"c": 1}}, corpus=corpus)
        served = ServedSearch(SearchPipeline(backend, 10, neighbours=votes), 5.0)
        client = create_app(served, GatewaySettings(home=home)).test_client()
        health = client.get("/_esrr/health").get_json()
        ranker = client.get("/_search?q=vitamin").get_json()["esrr"]["ranker"]
        if applied:
            assert health["judged_neighbours"] == "applied" and ranker == "BM25 + judged neighbours"
        else:
            assert health["judged_neighbours"].startswith("not applied: built for another corpus (3633 documents")
            assert ranker.startswith("BM25 (judged neighbours not applied: built for another corpus")
