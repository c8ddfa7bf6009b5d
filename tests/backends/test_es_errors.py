"""Elasticsearch answers other than success (401, 403, 400, 5xx, garbage) are ``BackendError``s naming the fix.

Each test talks to a stub server with one canned answer (``es_stub``), so no cluster is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from es_rerank.backends.base import BackendError
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.settings import CommonSettings
from es_rerank.stats import Document
from index_setup.es_index import current_version, delete_old_versions, list_versions, load_index, use_version
from tests.conftest import serve_on_loopback, stop_server

DOCS = [Document("d1", "Vitamin D deficiency", "Vitamin D deficiency causes bone loss.")]
NO_CREDENTIALS = "missing authentication credentials for REST request [/_alias/esrr-docs]"


def es_error(status: int, kind: str, reason: str) -> dict:
    """An Elasticsearch error answer's JSON body."""
    return {
        "error": {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason},
        "status": status,
    }


def _client_and_settings(url: str, home: Path) -> tuple[Elasticsearch, CommonSettings]:
    return Elasticsearch(url, request_timeout=5, max_retries=0), CommonSettings(home=home, es_url=url)


def test_every_command_against_a_secured_cluster_names_the_credentials_fix(
    es_stub: Callable[..., str], tmp_path: Path
) -> None:
    client, settings = _client_and_settings(es_stub(401, es_error(401, "security_exception", NO_CREDENTIALS)), tmp_path)
    calls = [
        lambda: ElasticsearchBackend(client, settings.es_alias, stats_root(settings)),
        lambda: load_index(client, DOCS, settings, progress=False),
        lambda: list_versions(client, settings.es_alias),
        lambda: current_version(client, settings.es_alias),
        lambda: delete_old_versions(client, settings.es_alias, settings=settings),
        lambda: use_version(client, settings, "v1"),
    ]
    for call in calls:
        with pytest.raises(BackendError, match=r"HTTP 401 .*ESRR_ES_URL, e\.g\. https://USER:PASSWORD@HOST:9200"):
            call()
    assert not stats_root(settings).exists() or not any(stats_root(settings).iterdir())


def test_a_refusal_with_a_body_names_its_type_and_reason(es_stub: Callable[..., str], tmp_path: Path) -> None:
    client, settings = _client_and_settings(es_stub(401, es_error(401, "security_exception", NO_CREDENTIALS)), tmp_path)
    with pytest.raises(BackendError) as caught:
        list_versions(client, settings.es_alias)  # a GET: the answer has a body
    assert f"HTTP 401 (security_exception: {NO_CREDENTIALS})" in str(caught.value)


@pytest.mark.parametrize(
    "status, kind, reason, fix",
    [
        (
            403,
            "security_exception",
            "action [indices:admin/aliases/get] is unauthorized for user [reader]",
            "lack privileges on the ESRR_ES_ALIAS alias",
        ),
        (
            400,
            "invalid_index_name_exception",
            "Invalid index name [ESRR], must be lowercase",
            "fix what the reason names",
        ),
        (
            503,
            "cluster_block_exception",
            "blocked by: [SERVICE_UNAVAILABLE/1/state not recovered];",
            "GET _cluster/health",
        ),
        (429, "es_rejected_execution_exception", "rejected execution", "GET _cluster/health"),
    ],
)
def test_other_refusals_name_status_type_reason_and_fix(
    es_stub: Callable[..., str], tmp_path: Path, status: int, kind: str, reason: str, fix: str
) -> None:
    client, settings = _client_and_settings(es_stub(status, es_error(status, kind, reason)), tmp_path)
    with pytest.raises(BackendError) as caught:
        list_versions(client, settings.es_alias)
    message = str(caught.value)
    assert f"HTTP {status} ({kind}: {reason})" in message and fix in message, message


def test_an_answer_that_is_not_json_is_a_backend_error(es_stub: Callable[..., str], tmp_path: Path) -> None:
    client, settings = _client_and_settings(es_stub(200, "<html>a proxy login page</html>"), tmp_path)
    with pytest.raises(BackendError, match=r"SerializationError.*check ESRR_ES_URL"):
        list_versions(client, settings.es_alias)


def test_a_web_server_that_is_not_elasticsearch_is_named_so(tmp_path: Path) -> None:
    class QuietFileServer(SimpleHTTPRequestHandler):  # python -m http.server: 404 to GET/HEAD, 501 to the rest
        def log_message(self, *args) -> None:
            pass

    server = serve_on_loopback(partial(QuietFileServer, directory=str(tmp_path)))
    try:
        client, settings = _client_and_settings(f"http://127.0.0.1:{server.server_port}", tmp_path / "home")
        for call in (
            lambda: ElasticsearchBackend(client, settings.es_alias, stats_root(settings)),
            lambda: load_index(client, DOCS, settings, progress=False),
            lambda: list_versions(client, settings.es_alias),
        ):
            with pytest.raises(BackendError, match=r"it is not Elasticsearch 8 .*X-Elastic-Product.*ESRR_ES_URL"):
                call()
    finally:
        stop_server(server)


def test_a_cluster_that_never_answers_costs_one_timeout_and_says_so(tmp_path: Path) -> None:
    """A timed-out request is not retried (the client's default made it 4 x ESRR_ES_TIMEOUT_S)."""
    import socket

    from es_rerank.backends.es_client import connect

    # Counted, not timed: each try is a new connection to a server that never answers.
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        settings = CommonSettings(home=tmp_path, es_url=f"http://127.0.0.1:{silent.getsockname()[1]}", es_timeout_s=1)
        with pytest.raises(BackendError, match="did not answer within ESRR_ES_TIMEOUT_S.*raise ESRR_ES_TIMEOUT_S"):
            ElasticsearchBackend(connect(settings), settings.es_alias, stats_root(settings))
        silent.setblocking(False)
        tries = []
        while True:
            try:
                tries.append(silent.accept()[0])
            except BlockingIOError:
                break
        for connection in tries:
            connection.close()
        assert len(tries) == 1
