"""A two-node Elasticsearch 7.17 cluster (``scripts/engine.sh elasticsearch --nodes 2``): a load with replicas
waits for them, every shard's copies land on both nodes, the cluster is green and the index answers (issue 36:
the tests that need shards on more than one node)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from es_rerank.backends.base import text_hits
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_client import connect
from es_rerank.settings import CommonSettings
from index_setup.es_index import load_index
from index_setup.readers import read_beir_corpus
from tests.engines import engine_for_tests

pytestmark = pytest.mark.es

NFCORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nfcorpus" / "corpus.jsonl.gz"


def test_a_load_with_replicas_places_each_shards_copies_on_both_nodes_and_is_green(tmp_path: Path) -> None:
    cluster = engine_for_tests("elasticsearch", tmp_path, "--nodes", "2")
    try:
        settings = CommonSettings(
            home=tmp_path / "home",
            backend="elasticsearch",
            es_url=cluster.url,
            es_alias="esrr-two-nodes",
            es_shards=2,
            es_replicas=1,
            es_replica_wait_s=30,
        )
        client = connect(settings)
        assert client.cluster.health().body["number_of_nodes"] == 2
        corpus = list(itertools.islice(read_beir_corpus(NFCORPUS), 100))
        result = load_index(client, corpus, settings, progress=False)
        health = client.cluster.health(index=result.index).body
        assert (health["status"], health["active_shards"], health["unassigned_shards"]) == ("green", 4, 0)
        shards = client.cat.shards(index=result.index, format="json", h="shard,prirep,node").body
        nodes_of = {shard: {row["node"] for row in shards if row["shard"] == shard} for shard in ("0", "1")}
        assert nodes_of == {"0": {"esrr-node-1", "esrr-node-2"}, "1": {"esrr-node-1", "esrr-node-2"}}
        hits = text_hits(ElasticsearchBackend.from_settings(settings), corpus[0].title, 1)
        assert [hit.doc_id for hit in hits] == [corpus[0].doc_id]
    finally:
        cluster.stop()
    assert cluster.process.returncode == 0 and not cluster.home.exists()
