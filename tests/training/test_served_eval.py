"""``esrr eval``'s runner of the served stages against ``esrr serve`` scored by a real worker through Redis.

The rows ``esrr eval`` reports as "served" must be the rankings the gateway answers, hit for hit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from elasticsearch import Elasticsearch

from tests.artifact_home import home_with_index
from tests.gateway.test_gateway_worker import QUERIES, TIMEOUT, _env, _ids, _serving


@pytest.fixture(scope="module")
def served_home(artifacts, corpus_documents, tmp_path_factory) -> Path:
    """A copy of the artifacts' home with an embedded index of 30 documents."""
    return home_with_index(artifacts, corpus_documents, tmp_path_factory.mktemp("served-eval"))[0]


@pytest.fixture(scope="module")
def served_queue(broker, served_home) -> Iterator[str]:
    """A queue that a worker serving ``served_home`` consumes."""
    with broker.serving("served-eval", home=served_home) as (name, _):
        yield name


@pytest.mark.broker
def test_esrr_evals_runner_ranks_what_the_gateway_serves_hit_for_hit(
    broker, served_home, served_queue, corpus_documents, free_port, monkeypatch
):
    from es_rerank.backends.base import text_body
    from es_rerank.backends.embedded import EmbeddedBackend
    from training.commands.evaluate import served_rows
    from training.served_eval import DEFAULT_PREFIX

    titles = [doc.title for doc in corpus_documents[:30:6]]  # words every index of the module holds
    queries = {f"q{n}": text for n, text in enumerate([*QUERIES, *titles])}
    env = _env(broker, served_queue, served_home)
    for name, value in env.items():  # esrr eval's settings: the same home, model and stages as the gateway's
        monkeypatch.setenv(name, value)
    backend = EmbeddedBackend.open_current(served_home / "indexes" / "embedded")
    # esrr eval's runner over the served index (it reads the workspace's backend alone), scoring in this process.
    served = served_rows(SimpleNamespace(backend=backend), queries, 500, with_votes=False)
    with _serving(env, free_port()) as url:
        client = Elasticsearch(url, request_timeout=TIMEOUT)
        # The site page's query (q= would read a title's "Survival: A" as Lucene's field syntax); size 10, as eval.
        answers = {query_id: client.search(**text_body(text)).body for query_id, text in queries.items()}
    assert served.default == DEFAULT_PREFIX + "delta-32-lex3 + BM25 guard + candidate feedback"
    for query_id, body in answers.items():
        assert body["esrr"]["ranker"] == served.default.removeprefix(DEFAULT_PREFIX) and "fallback" not in body["esrr"]
        assert _ids(body) == [doc_id for doc_id, _ in served.pages[query_id]], queries[query_id]
        assert [hit["_score"] for hit in body["hits"]["hits"]] == pytest.approx(
            [score for _, score in served.pages[query_id]], abs=1e-4
        )
    assert sum(len(page) for page in served.pages.values()) >= 5 * len(queries)  # queries with hits to compare
