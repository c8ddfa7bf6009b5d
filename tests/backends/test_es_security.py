"""A cluster with security on: HTTPS signed by its own CA, and an API key (``ESRR_ES_CA_CERTS``, ``ESRR_ES_API_KEY``).

noida-db speaks plain HTTP without authentication, so ``secured_es`` puts a TLS
front in front of it: a loopback HTTPS server whose certificate comes from a
throw-away CA (trustme), which answers 401 as Elasticsearch 8 does unless the
request carries ``Authorization: ApiKey <key>``, and forwards everything else.
The client, its TLS verification and the backend are the real ones.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from es_rerank.backends.base import BackendError, text_hits
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_client import connect
from es_rerank.settings import CommonSettings
from es_rerank.stats import Document
from index_setup.es_index import load_index
from tests.conftest import QuietElasticsearchHandler, serve_on_loopback, stop_server

pytestmark = pytest.mark.es

API_KEY = "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="  # the shape ES returns as "encoded"
API_KEY_PAIR = "VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw"  # the ID:API_KEY that API_KEY encodes
DOCS = [
    Document("d1", "Vitamin D deficiency", "Vitamin D deficiency causes bone loss."),
    Document("d2", "Green tea", "Green tea and breast cancer risk."),
]


@dataclass(frozen=True)
class SecuredCluster:
    """The HTTPS URL of the secured front and the PEM file of the CA that signed its certificate."""

    url: str
    ca_pem: Path


def _forwarding_handler(upstream: str) -> type[QuietElasticsearchHandler]:
    target = urlsplit(upstream)

    class Forward(QuietElasticsearchHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Authorization") != f"ApiKey {API_KEY}":
                reason = "missing authentication credentials for REST request"
                self.reply(
                    401,
                    json.dumps({"error": {"type": "security_exception", "reason": reason}, "status": 401}).encode(),
                    {"WWW-Authenticate": 'ApiKey, Basic realm="security"'},
                )
                return
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            forwarded = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
            connection.request(self.command, self.path, body=body or None, headers=forwarded)
            response = connection.getresponse()
            status, payload = response.status, response.read()
            # Title case, so that Elasticsearch 7's lower-case content-type replaces reply's Content-Type.
            headers = {
                k.title(): v
                for k, v in response.getheaders()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")
            }
            connection.close()
            self.reply(status, payload, headers)

    return Forward


@pytest.fixture(scope="module")
def secured_es(es_url: str, tmp_path_factory: pytest.TempPathFactory):
    """An HTTPS front with API-key authentication before the session's Elasticsearch-API server."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server = serve_on_loopback(_forwarding_handler(es_url), tls=context)
    ca_pem = tmp_path_factory.mktemp("ca") / "http_ca.crt"
    ca.cert_pem.write_to_path(str(ca_pem))
    try:
        yield SecuredCluster(f"https://127.0.0.1:{server.server_port}", ca_pem)
    finally:
        stop_server(server)


def _settings(cluster: SecuredCluster, home: Path, alias: str, **security: object) -> CommonSettings:
    return CommonSettings(
        home=home, backend="elasticsearch", es_url=cluster.url, es_alias=alias, es_timeout_s=10, **security
    )


def _needs_api_keys(backend: str) -> None:
    if backend == "opensearch":
        pytest.skip("OpenSearch has no API keys (ESRR_ES_API_KEY is refused for it, test_opensearch.py)")


def test_the_ca_file_and_the_api_key_reach_a_secured_cluster(
    secured_es: SecuredCluster, es_alias: str, tmp_path: Path, es_backend: str
) -> None:
    _needs_api_keys(es_backend)
    settings = _settings(secured_es, tmp_path, es_alias, es_api_key=API_KEY, es_ca_certs=secured_es.ca_pem)
    load_index(connect(settings), DOCS, settings, progress=False)
    hits = text_hits(ElasticsearchBackend.from_settings(settings), "green tea", 5)
    assert [hit.doc_id for hit in hits] == ["d2"]


def test_the_api_key_may_be_given_as_its_id_and_key(
    secured_es: SecuredCluster, es_alias: str, tmp_path: Path, es_backend: str
) -> None:
    _needs_api_keys(es_backend)
    settings = _settings(secured_es, tmp_path, es_alias, es_api_key=API_KEY_PAIR, es_ca_certs=secured_es.ca_pem)
    load_index(connect(settings), DOCS, settings, progress=False)
    assert [hit.doc_id for hit in text_hits(ElasticsearchBackend.from_settings(settings), "vitamin", 5)] == ["d1"]


def test_without_the_ca_file_the_error_names_esrr_es_ca_certs(
    secured_es: SecuredCluster, es_alias: str, tmp_path: Path
) -> None:
    settings = _settings(secured_es, tmp_path, es_alias, es_api_key=API_KEY)
    with pytest.raises(BackendError, match=r"TLS handshake .* failed; ESRR_ES_CA_CERTS must name the PEM file"):
        ElasticsearchBackend.from_settings(settings)


def test_another_clusters_ca_is_a_failed_handshake_naming_the_setting(
    secured_es: SecuredCluster, es_alias: str, tmp_path: Path
) -> None:
    other_ca = tmp_path / "other_ca.crt"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    settings = _settings(secured_es, tmp_path, es_alias, es_api_key=API_KEY, es_ca_certs=other_ca)
    with pytest.raises(BackendError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed") as caught:
        ElasticsearchBackend.from_settings(settings)
    assert "check that the file it names is that CA" in str(caught.value)


def test_https_to_a_plain_http_cluster_says_to_use_http(es_url: str, es_alias: str, tmp_path: Path) -> None:
    if not es_url.startswith("http://"):
        pytest.skip("ESRR_TEST_ES_URL is not a plain-HTTP cluster")
    settings = CommonSettings(
        home=tmp_path,
        backend="elasticsearch",
        es_url=es_url.replace("http://", "https://"),
        es_alias=es_alias,
        es_timeout_s=10,
    )
    with pytest.raises(
        BackendError,
        match=r"TLS handshake .* failed; the server there does not complete a TLS "
        r"handshake; if it serves plain HTTP, use http:// in ESRR_ES_URL",
    ):
        ElasticsearchBackend.from_settings(settings)


def test_without_the_api_key_the_error_names_esrr_es_api_key(
    secured_es: SecuredCluster, es_alias: str, tmp_path: Path
) -> None:
    settings = _settings(secured_es, tmp_path, es_alias, es_ca_certs=secured_es.ca_pem)
    with pytest.raises(BackendError, match=r"HTTP 401 .*or an API key in ESRR_ES_API_KEY"):
        ElasticsearchBackend.from_settings(settings)


def test_a_wrong_api_key_is_refused_and_never_echoed(secured_es: SecuredCluster, es_alias: str, tmp_path: Path) -> None:
    settings = _settings(secured_es, tmp_path, es_alias, es_api_key="not-the-key", es_ca_certs=secured_es.ca_pem)
    with pytest.raises(BackendError, match="HTTP 401") as caught:
        ElasticsearchBackend.from_settings(settings)
    assert "not-the-key" not in str(caught.value) and "not-the-key" not in repr(settings)
