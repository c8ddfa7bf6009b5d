"""``ESRR_BACKEND=opensearch``: what is OpenSearch's own (the whole backend suite also runs on it, ``es_url[os2]``).

The commands and ``open_backend`` pick the OpenSearch client by the setting; a server that
is not OpenSearch, an API key, an unreachable node are refused with the fix; the point in
time and the scroll answer in Elasticsearch's shape through the gateway.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import elasticsearch
import elasticsearch.helpers
import opensearchpy
import pytest
from click.testing import CliRunner
from opensearchpy import helpers as opensearch_helpers
from pydantic import ValidationError

from es_rerank.backends import open_backend
from es_rerank.backends.base import BackendError
from es_rerank.backends.es_layout import stats_root
from es_rerank.backends.opensearch import OpenSearchBackend, OpenSearchClient
from es_rerank.backends.opensearch_client import as_elasticsearch_error
from es_rerank.cli import main
from es_rerank.settings import CommonSettings
from index_setup.es_index import load_index
from tests.gateway.test_query_dsl import DOCS

pytestmark = pytest.mark.es
# Only the real OpenSearch of the session (not Elasticsearch 7.17, not noida-db).
on_opensearch = pytest.mark.parametrize("es_url", ["os2"], indirect=True)
needs_started_engines = pytest.mark.skipif(
    bool(os.environ.get("ESRR_TEST_ES_URL")),
    reason="ESRR_TEST_ES_URL names one cluster; these need the OpenSearch node the session starts",
)


def _corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for doc in DOCS:
            out.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.abstract}) + "\n")
    return path


@needs_started_engines
@on_opensearch
def test_the_commands_build_list_and_prune_an_opensearch_index_and_open_backend_serves_it(
    es_url: str, es_alias: str, tmp_path: Path
) -> None:
    env = {
        "ESRR_HOME": str(tmp_path / "home"),
        "ESRR_BACKEND": "opensearch",
        "ESRR_ES_URL": es_url,
        "ESRR_ES_ALIAS": es_alias,
        "ESRR_ES_REPLICAS": "0",
    }
    corpus = _corpus(tmp_path / "data")
    runner = CliRunner()
    for version in ("v1", "v2"):
        built = runner.invoke(main, ["index", "build", "--data", str(corpus), "--version", version], env=env)
        assert built.exit_code == 0, built.output
        assert "into the opensearch backend" in built.output
    listed = runner.invoke(main, ["index", "versions"], env=env)
    assert listed.exit_code == 0 and "v1" in listed.output and "v2" in listed.output, listed.output
    pruned = runner.invoke(main, ["index", "prune", "--keep", "1"], env=env)
    assert pruned.exit_code == 0 and "v1" in pruned.output, pruned.output
    backend = open_backend(
        CommonSettings(home=tmp_path / "home", backend="opensearch", es_url=es_url, es_alias=es_alias)
    )
    assert isinstance(backend, OpenSearchBackend) and backend.engine == "opensearch"
    assert isinstance(backend.client, OpenSearchClient) and backend.version == "v2"
    first = backend.first_stage(backend.prepare({"query": {"match": {"text": "green tea"}}}), 3)
    green_tea = {doc.doc_id for doc in DOCS if "green tea" in f"{doc.title} {doc.abstract}".lower()}
    assert first.hits and {hit.doc_id for hit in first.hits[: len(green_tea)]} == green_tea


@needs_started_engines
@on_opensearch
def test_a_point_in_time_opens_pages_and_closes_in_elasticsearchs_shape(gateway) -> None:
    client, alias, index = gateway
    pit = client.open_point_in_time(index=alias, keep_alive="1m").body
    assert set(pit) >= {"id"}
    try:
        page = client.search(pit={"id": pit["id"], "keep_alive": "1m"}, sort=[{"doc_id": "asc"}], size=2).body
        assert [hit["_id"] for hit in page["hits"]["hits"]] == sorted(doc.doc_id for doc in DOCS)[:2]
        assert all("title_ids" not in hit["_source"] for hit in page["hits"]["hits"])
    finally:
        closed = client.close_point_in_time(id=pit["id"]).body
    assert closed == {"succeeded": True, "num_freed": 1}


def test_the_opensearch_backend_refuses_an_elasticsearch_naming_the_setting(
    es_stub: Callable[..., str], tmp_path: Path
) -> None:
    url = es_stub(200, {"name": "es", "version": {"number": "8.19.3"}, "tagline": "You Know, for Search"})
    settings = CommonSettings(home=tmp_path, backend="opensearch", es_url=url)
    with pytest.raises(
        BackendError,
        match=r"OpenSearch at .*: the server is Elasticsearch 8\.19\.3, not OpenSearch; "
        r"set ESRR_BACKEND=elasticsearch",
    ):
        open_backend(settings)


def test_an_unreachable_opensearch_names_it_and_the_setting(tmp_path: Path, free_port: Callable[[], int]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = CommonSettings(home=tmp_path, backend="opensearch", es_url=url, es_timeout_s=2)
    with pytest.raises(BackendError, match=f"cannot reach OpenSearch at {url}; start it or set ESRR_ES_URL"):
        open_backend(settings)


def test_an_api_key_is_refused_for_opensearch_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="OpenSearch has no API keys; put a user and password in ESRR_ES_URL"):
        CommonSettings(home=tmp_path, backend="opensearch", es_api_key="id:key")


@needs_started_engines
@on_opensearch
def test_the_elasticsearch_backend_pointed_at_opensearch_names_esrr_backend(
    es_url: str, es_alias: str, tmp_path: Path
) -> None:
    settings = CommonSettings(home=tmp_path, backend="elasticsearch", es_url=es_url, es_alias=es_alias)
    with pytest.raises(BackendError, match="not Elasticsearch 8.*ESRR_BACKEND=opensearch"):
        open_backend(settings)


@pytest.mark.parametrize(
    "error, kind, status",
    [
        (
            opensearchpy.NotFoundError(
                404, "index_not_found_exception", {"error": {"type": "index_not_found_exception"}}
            ),
            elasticsearch.NotFoundError,
            404,
        ),
        (
            opensearchpy.RequestError(400, "parsing_exception", {"error": {"type": "parsing_exception"}}),
            elasticsearch.BadRequestError,
            400,
        ),
        (
            opensearchpy.TransportError(429, "rejected_execution_exception", {"status": 429}),
            elasticsearch.ApiError,
            429,
        ),
        (opensearchpy.ConnectionTimeout("TIMEOUT", "timed out", None), elasticsearch.ConnectionTimeout, None),
        (opensearchpy.ConnectionError("N/A", "refused", ConnectionRefusedError()), elasticsearch.ConnectionError, None),
        (
            opensearch_helpers.BulkIndexError("1 document(s) failed to index.", [{"index": {"status": 429}}]),
            elasticsearch.helpers.BulkIndexError,
            None,
        ),
    ],
)
def test_opensearch_py_errors_become_the_elasticsearch_clients_with_their_status_and_body(error, kind, status):
    """What ``translate_errors`` and the index build catch: the same kind, HTTP status, body and refused items."""
    translated = as_elasticsearch_error(error, OpenSearchClient("http://127.0.0.1:9"))
    assert type(translated) is kind
    if status is not None:
        assert translated.meta.status == status and translated.body == error.info
    if isinstance(error, opensearch_helpers.BulkIndexError):
        assert translated.errors == error.errors


class _SearchRacingADelete:
    """The session's client, except that its first search of ``index`` fails as a search racing that index's
    deletion failed on OpenSearch 2.19.3 (HTTP 503, all shards failed: about 1 search in 50 of
    ``test_searches_running_through_a_reindex_and_a_prune_all_succeed``, not on demand)."""

    def __init__(self, client: OpenSearchClient, index: str) -> None:
        self._client, self._index, self.raced = client, index, 0

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def search(self, index: str | None = None, **kwargs):
        if index == self._index and not self.raced:
            self.raced += 1
            answer = {
                "error": {"type": "search_phase_execution_exception", "reason": "all shards failed"},
                "status": 503,
            }
            raise as_elasticsearch_error(
                opensearchpy.TransportError(503, "search_phase_execution_exception", answer), self._client
            )
        return self._client.search(index=index, **kwargs)


@needs_started_engines
@on_opensearch
def test_a_search_failing_as_its_index_is_pruned_follows_the_alias_and_only_then(es_client, es_settings) -> None:
    load_index(es_client, DOCS, es_settings, version="v1", progress=False)
    backend = OpenSearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    old = backend.index
    query = backend.prepare({"query": {"match": {"text": "green tea"}}})
    backend.client = _SearchRacingADelete(es_client, old)
    with pytest.raises(BackendError, match=r"HTTP 503 \(search_phase_execution_exception: all shards failed\)"):
        backend.first_stage(query, 3)  # the alias has not moved: the cluster's own error
    new = load_index(es_client, DOCS, es_settings, version="v2", progress=False).index
    backend.client = _SearchRacingADelete(es_client, old)
    assert backend.first_stage(query, 3).hits and backend.index == new != old
    assert backend.client.raced == 1
