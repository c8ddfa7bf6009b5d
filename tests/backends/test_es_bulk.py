"""Bulk loading at scale: several ``_bulk`` loops over one stream, back-pressure (429), replicas and refresh.

The 429s come from a real HTTP proxy in front of the noida-db server (it answers some
``_bulk`` requests itself, the way a cluster with a full write queue does, and passes
everything else on); every document still lands in the real server.
"""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import threading
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_rerank.backends.base import BackendError
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.stats import DocTerms, Document
from index_setup.es_index import index_name, load_index
from index_setup.readers import read_beir_corpus
from tests.backends.conftest import engine_client
from tests.conftest import QuietElasticsearchHandler, serve_on_loopback, stop_server

pytestmark = pytest.mark.es

NFCORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nfcorpus" / "corpus.jsonl.gz"


@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    return list(itertools.islice(read_beir_corpus(NFCORPUS), 90))


class BusyProxy:
    """A proxy to ``upstream`` that answers the ``_bulk`` requests ``reject(n, body)`` picks (n counts from 1)
    with a 429: ``"request"`` for the whole request, ``"items"`` for each document in a 200 answer (a full
    write queue)."""

    def __init__(self, upstream: str, reject) -> None:
        self.bulk_requests = 0
        self.rejected = 0
        self.lock = threading.Lock()
        target = urlsplit(upstream)
        proxy = self

        class Handler(QuietElasticsearchHandler):
            def answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command in ("POST", "PUT") and self.path.split("?")[0].endswith("/_bulk"):
                    with proxy.lock:
                        proxy.bulk_requests += 1
                        how = reject(proxy.bulk_requests, body)
                        proxy.rejected += how is not None
                    if how == "request":
                        return self.reply(
                            429,
                            json.dumps(
                                {
                                    "error": {
                                        "type": "es_rejected_execution_exception",
                                        "reason": "rejected (busy proxy)",
                                    },
                                    "status": 429,
                                }
                            ).encode(),
                        )
                    if how == "items":
                        return self.reply(200, _rejected_items(body))
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
                    upstream_conn.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream_conn.getresponse()
                    payload = response.read()
                    self.reply(
                        response.status,
                        payload,
                        {"Content-Type": response.getheader("Content-Type", "application/json")},
                    )
                finally:
                    upstream_conn.close()

        self.server = serve_on_loopback(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"


def _rejected_items(ndjson: bytes) -> bytes:
    """A ``_bulk`` answer rejecting every document of the request with 429."""
    items = []
    lines = [json.loads(line) for line in ndjson.splitlines() if line.strip()]
    for header in lines[::2]:  # action line, then its document
        ((action, meta),) = header.items()
        items.append(
            {
                action: {
                    "_index": meta.get("_index"),
                    "_id": meta.get("_id"),
                    "status": 429,
                    "error": {
                        "type": "es_rejected_execution_exception",
                        "reason": "rejected execution (write queue full)",
                    },
                }
            }
        )
    return json.dumps({"took": 0, "errors": True, "items": items}).encode()


@pytest.fixture
def busy_proxy(es_url):
    proxies: list[BusyProxy] = []

    def start(reject) -> BusyProxy:
        proxies.append(BusyProxy(es_url, reject))
        return proxies[-1]

    yield start
    for proxy in proxies:
        stop_server(proxy.server)


def _stored_terms(client: Elasticsearch, index: str, n: int) -> dict[str, DocTerms]:
    hits = client.search(index=index, size=n, query={"match_all": {}})["hits"]["hits"]
    return {hit["_source"]["doc_id"]: DocTerms.from_json(hit["_source"]) for hit in hits}


def test_several_bulk_loops_load_every_document_with_the_ids_of_the_statistics(es_client, es_settings, corpus):
    settings = es_settings.model_copy(update={"es_bulk_threads": 4, "es_bulk_chunk_size": 7})
    result = load_index(es_client, corpus, settings, version="v1", progress=False)
    assert result.n_docs == len(corpus) == es_client.count(index=result.index)["count"]
    stats = ElasticsearchBackend(es_client, settings.es_alias, stats_root(settings)).stats
    stored = _stored_terms(es_client, result.index, len(corpus))
    assert sorted(stored) == sorted(d.doc_id for d in corpus)
    for doc in corpus:
        expected = stats.doc_terms(stats.row(doc.doc_id))
        for name in ("title_ids", "abstract_ids", "first_ids"):
            np.testing.assert_array_equal(getattr(stored[doc.doc_id], name), getattr(expected, name))
    assert list(stats.doc_ids) == [d.doc_id for d in corpus]  # rows in corpus order, whichever loop sent them


def test_a_busy_cluster_slows_the_load_and_every_document_arrives(es_url, es_backend, es_settings, busy_proxy, corpus):
    """Two whole requests and one request's every document answered 429: each is sent again after a wait."""
    proxy = busy_proxy(lambda n, _body: {1: "request", 2: "items", 4: "request"}.get(n))
    settings = es_settings.model_copy(
        update={
            "es_url": proxy.url,
            "es_bulk_threads": 2,
            "es_bulk_chunk_size": 20,
            "es_bulk_max_retries": 3,
            "es_bulk_initial_backoff_s": 0.05,
        }
    )
    with engine_client(proxy.url, es_backend) as client:
        result = load_index(client, corpus, settings, version="v1", progress=False)
    assert proxy.rejected == 3
    assert proxy.bulk_requests >= 3 + 5  # 90 documents in chunks of at most 20, three requests sent again
    with engine_client(es_url, es_backend) as direct:
        assert direct.count(index=result.index)["count"] == len(corpus)
        assert direct.indices.get_alias(name=settings.es_alias).body.keys() == {result.index}


@pytest.mark.parametrize("how", ["request", "items"])
def test_a_cluster_that_stays_busy_fails_the_load_and_the_served_index_stays(
    es_url, es_backend, es_settings, busy_proxy, corpus, how
):
    proxy = busy_proxy(lambda _n, body: how if b"-v2" in body else None)  # v1 loads, v2 meets a full queue
    settings = es_settings.model_copy(
        update={"es_url": proxy.url, "es_bulk_max_retries": 2, "es_bulk_initial_backoff_s": 0.02}
    )
    with engine_client(proxy.url, es_backend) as client:
        first = load_index(client, corpus[:30], settings, version="v1", progress=False)
        with pytest.raises(BackendError, match="429|rejected") as caught:
            load_index(client, corpus, settings, version="v2", progress=False)
    if how == "items":  # the fix names the settings that give a busy cluster more time
        assert (
            "write queue stayed full through ESRR_ES_BULK_MAX_RETRIES=2 retries (waits up to "
            "ESRR_ES_BULK_MAX_BACKOFF_S="
        ) in str(caught.value)
    assert proxy.rejected >= 3  # the first rejected request and its two retries
    with engine_client(es_url, es_backend) as direct:
        assert direct.indices.get_alias(name=settings.es_alias).body.keys() == {first.index}
        assert not direct.indices.exists(index=index_name(settings.es_alias, "v2"))
    assert not (stats_root(settings) / "v2").exists()


def test_a_load_writes_without_replicas_or_refresh_and_restores_both_before_the_swap(
    es_client, es_settings, corpus, caplog
):
    settings = es_settings.model_copy(update={"es_replicas": 1, "es_replica_wait_s": 0.2})
    index = index_name(settings.es_alias, "v1")
    during = []

    def documents():
        for i, doc in enumerate(corpus):
            if i == 50:  # two chunks of 20 are in the index by now
                during.append(es_client.indices.get_settings(index=index)[index]["settings"]["index"])
                during.append(es_client.indices.exists_alias(name=settings.es_alias).body)
            yield doc

    with caplog.at_level(logging.WARNING, logger="index_setup.es_index"):
        result = load_index(es_client, documents(), settings, version="v1", progress=False)
    loading, alias_while_loading = during
    assert (loading["number_of_replicas"], loading["refresh_interval"]) == ("0", "-1")
    assert not alias_while_loading
    serving = es_client.indices.get_settings(index=result.index)[result.index]["settings"]["index"]
    assert serving["number_of_replicas"] == "1"
    assert "refresh_interval" not in serving  # the cluster's default again
    # one node cannot place a replica: the load says so and swaps anyway (the primary serves)
    assert any("replicas" in r.getMessage() and "ESRR_ES_REPLICAS=0" in r.getMessage() for r in caplog.records)
    assert es_client.indices.get_alias(name=settings.es_alias).body.keys() == {result.index}
