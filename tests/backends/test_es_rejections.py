"""Real back-pressure: an Elasticsearch 7.17 node with one write thread and a write queue of one rejects ``_bulk``
work with 429s while a load runs several bulk loops; the load sends each rejected request or document again
until every one is in (issue 36: 0 documents lost).

``test_es_bulk.py`` forces 429s at chosen requests through a proxy; here the node makes them itself.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from es_rerank.backends.es_client import connect
from es_rerank.settings import CommonSettings
from index_setup.es_index import load_index
from index_setup.readers import read_beir_corpus
from tests.engines import engine_for_tests, report

pytestmark = pytest.mark.es

NFCORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nfcorpus" / "corpus.jsonl.gz"
N_DOCS = 800


@pytest.fixture(scope="module")
def tiny_write_queue(tmp_path_factory: pytest.TempPathFactory):
    """URL of an Elasticsearch 7.17 node whose write pool has one thread and room for one waiting task."""
    engine = engine_for_tests(
        "elasticsearch",
        tmp_path_factory.mktemp("tiny-write-queue"),
        "--setting",
        "thread_pool.write.size=1",
        "--setting",
        "thread_pool.write.queue_size=1",
    )
    try:
        yield engine.url
    finally:
        engine.stop()


def _write_rejections(client) -> int:
    nodes = client.nodes.stats(metric="thread_pool").body["nodes"].values()
    return sum(node["thread_pool"]["write"]["rejected"] for node in nodes)


def test_a_full_write_queue_rejects_bulk_work_and_the_load_loses_no_document(
    tiny_write_queue: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    corpus = list(itertools.islice(read_beir_corpus(NFCORPUS), N_DOCS))
    settings = CommonSettings(
        home=tmp_path,
        backend="elasticsearch",
        es_url=tiny_write_queue,
        es_alias="esrr-busy",
        es_shards=2,
        es_bulk_threads=4,
        es_bulk_chunk_size=10,
        es_bulk_max_retries=30,
        es_bulk_initial_backoff_s=0.05,
        es_bulk_max_backoff_s=1.0,
    )
    client = connect(settings)
    before = _write_rejections(client)
    result = load_index(client, corpus, settings, progress=False)
    rejected = _write_rejections(client) - before
    report(
        request.config,
        f"a write queue of one rejected {rejected} shard writes; {result.n_docs} of {len(corpus)} documents loaded",
    )
    assert rejected > 0, "the node rejected nothing: the test did not meet a full write queue"
    assert result.n_docs == len(corpus)
    assert client.count(index=settings.es_alias).body["count"] == len(corpus)
