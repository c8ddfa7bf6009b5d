"""A real Elasticsearch 7.17 node stopped under the gateway, then started again on the same port and data: the
gateway answers 503s that say the cluster cannot be reached and ``_cluster/health`` is red while it is away, and it
serves again, green, without a restart once the node is back (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_client import connect
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.settings import CommonSettings
from index_setup.es_index import load_index
from tests.engines import engine_for_tests
from tests.gateway.test_query_dsl import DOCS

pytestmark = pytest.mark.es

QUERY = {"query": {"match": {"text": "vitamin"}}}


def test_a_node_stopped_under_the_gateway_is_a_503_and_red_and_serves_again_when_it_returns(tmp_path: Path) -> None:
    data = tmp_path / "data"  # kept across the two starts
    node = engine_for_tests("elasticsearch", tmp_path, "--data", str(data))
    port = node.url.rsplit(":", 1)[1]
    try:
        settings = CommonSettings(
            home=tmp_path / "home", backend="elasticsearch", es_url=node.url, es_alias="esrr-outage", es_timeout_s=5
        )
        load_index(connect(settings), DOCS, settings, progress=False)
        served = ServedSearch(SearchPipeline(ElasticsearchBackend.from_settings(settings), 10), 3600)
        gateway = create_app(served, GatewaySettings(**settings.model_dump())).test_client()
        before = gateway.post("/esrr-outage/_search", json=QUERY)
        assert before.status_code == 200, before.get_json()
        assert gateway.get("/_cluster/health").get_json()["status"] == "green"

        node.stop()
        down = gateway.post("/esrr-outage/_search", json=QUERY)
        assert down.status_code == 503
        assert down.get_json()["error"]["type"] == "search_phase_execution_exception"
        assert f"cannot reach Elasticsearch at {node.url}" in down.get_json()["error"]["reason"]
        health = gateway.get("/_cluster/health")
        assert health.get_json()["status"] == "red", health.get_json()

        (tmp_path / "again").mkdir()
        node = engine_for_tests("elasticsearch", tmp_path / "again", "--data", str(data), "--http-port", port)
        connect(settings).cluster.health(index="esrr-outage", wait_for_status="green", timeout="30s")
        after = gateway.post("/esrr-outage/_search", json=QUERY)
        assert after.status_code == 200, after.get_json()
        assert after.get_json()["hits"]["hits"] == before.get_json()["hits"]["hits"]
        assert gateway.get("/_cluster/health").get_json()["status"] == "green"
    finally:
        node.stop()
