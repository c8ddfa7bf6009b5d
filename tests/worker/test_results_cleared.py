"""Issue 32: a search's result is deleted from the result backend once read, not kept for ``result_expires_s``.

On b2f3ea0 every search left its ``celery-task-meta-<id>`` key in Redis for 600 s (5,270
keys, 34 MB after a short attack). A real worker scores real searches here; the test counts
the keys left under a key prefix of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking.dispatch import WorkerReranker
from es_rerank.ranking.pipeline import SearchPipeline
from tests.artifact_home import home_with_index
from tests.conftest import ranked

QUERIES = ("cancer risk and diet", "vitamin d", "breast cancer", "heart disease", "green tea", "red meat")
SEARCHES = 24
TIMEOUT = 30


@pytest.fixture(scope="module")
def served_home(artifacts, corpus_documents, tmp_path_factory) -> tuple[Path, EmbeddedBackend]:
    return home_with_index(artifacts, corpus_documents, tmp_path_factory.mktemp("results"))


def _result_keys(redis_url: str, prefix: str) -> list[bytes]:
    return list(redis.Redis.from_url(redis_url).scan_iter(match=f"{prefix}celery-task-meta-*", count=1000))


@pytest.mark.broker
def test_searches_leave_no_result_behind(broker, served_home):
    home, backend = served_home
    queue, prefix = f"results-{uuid.uuid4().hex[:6]}", f"esrr-results-{uuid.uuid4().hex[:8]}:"
    client = broker.client(queue, home=home, broker_key_prefix=prefix)
    process = broker.worker(queue, home=home, broker_key_prefix=prefix).start()
    try:
        process.wait_ready(client)
        with WorkerReranker(client, queue, deadline_s=TIMEOUT) as reranker:
            pipeline = SearchPipeline(backend, 20, reranker)
            rankings = [ranked(pipeline, QUERIES[n % len(QUERIES)], 10) for n in range(SEARCHES)]
        assert all(ranking.fallback is None for ranking in rankings), [r.fallback for r in rankings]
        assert _result_keys(broker.redis_url, prefix) == []
    finally:
        process.stop()
        client.close()
        leftovers = list(redis.Redis.from_url(broker.redis_url).scan_iter(match=f"{prefix}*", count=1000))
        if leftovers:
            redis.Redis.from_url(broker.redis_url).delete(*leftovers)
