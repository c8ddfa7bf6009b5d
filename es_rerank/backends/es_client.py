"""The client to an Elasticsearch (or OpenSearch) cluster, and its errors as ``BackendError``s that name the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from elasticsearch import (
    ApiError,
    ConnectionTimeout,
    Elasticsearch,
    SSLError,
    TransportError,
    UnsupportedProductError,
)
from elasticsearch import ConnectionError as ESConnectionError

from es_rerank.backends.base import BackendError
from es_rerank.backends.es_server import ServerTooOld, VersionedTransport

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings


def connect(settings: CommonSettings) -> Elasticsearch:
    """A client for ``ESRR_ES_URL`` with the configured timeout, API key and CA certificates: the official
    Elasticsearch client, or for ``ESRR_BACKEND=opensearch`` opensearch-py in its shape (``opensearch_client.py``)."""
    if settings.backend == "opensearch":
        from es_rerank.backends.opensearch_client import connect_opensearch

        return connect_opensearch(settings)  # type: ignore[return-value]  # the same calls, see its docstring
    security: dict[str, Any] = {}  # api_key: the encoded key or an (id, key) pair
    if settings.es_api_key is not None:
        key = settings.es_api_key.get_secret_value()  # checked and normalised by the settings
        # The 'encoded' form is base64, which has no ':'; ID:API_KEY is the pair it encodes.
        security["api_key"] = tuple(key.split(":", 1)) if ":" in key else key
    if settings.es_ca_certs is not None:
        security["ca_certs"] = str(settings.es_ca_certs)
    # A request that timed out is not retried: the client's 3 retries made one hung cluster cost
    # 4 x ESRR_ES_TIMEOUT_S per call (refused connections are still retried, at no cost).
    # VersionedTransport: a cluster too old for the 8.x client (before 7.14) is refused naming its version.
    return Elasticsearch(
        settings.es_url,
        request_timeout=settings.es_timeout_s,
        retry_on_timeout=False,
        transport_class=VersionedTransport,
        **security,
    )


def product(client: Elasticsearch) -> str:
    """The engine a client talks to, as messages name it: Elasticsearch, or what the client says (OpenSearch)."""
    return getattr(client, "product", "Elasticsearch")


def cluster_url(client: Elasticsearch) -> str:
    """The node URL(s) a client talks to, for error messages."""
    own = getattr(client, "cluster_url", None)  # the OpenSearch client names its own
    if isinstance(own, str):
        return own
    try:
        return ", ".join(str(node.base_url) for node in client.transport.node_pool.all())
    except AttributeError:  # a client without the usual transport (a stub in tests)
        return "the configured URL"


def api_problem(exc: ApiError) -> str:
    """``HTTP <status> (<error type>: <reason>)`` of an Elasticsearch error answer, as far as it tells."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else exc.body
    if isinstance(error, dict):
        kind, reason = error.get("type"), error.get("reason")
    else:  # a HEAD request's answer has no body; a proxy may answer plain text
        kind, reason = None, str(error)[:300] if error else None
    if not kind and exc.message not in (None, "None"):
        kind = exc.message
    detail = ": ".join(str(part) for part in (kind, reason) if part) or "no reason given"
    return f"HTTP {exc.meta.status} ({detail})"


NOT_ELASTICSEARCH_FIX = (
    "it is not Elasticsearch 8 (its answers lack the X-Elastic-Product header); set ESRR_ES_URL "
    "to the cluster's address, or check that no proxy answers in its place (for an OpenSearch "
    "cluster set ESRR_BACKEND=opensearch)"
)


# Answers that Elasticsearch always sends with its product header; others may lack it (401 to an
# unauthenticated request, 413, or a 502/503 from a proxy in front of a healthy cluster).
_ALWAYS_LABELLED = (404, 405, 501)


def not_elasticsearch(status: int, headers: Any) -> bool:
    """Whether an answer that Elasticsearch would label (``_ALWAYS_LABELLED``) lacks its X-Elastic-Product header.

    The client checks the header on successful answers only, so a web server that answers
    404 to everything would otherwise read as a cluster without the alias (elastic/elasticsearch#73434).
    """
    return status in _ALWAYS_LABELLED and not (headers and headers.get("x-elastic-product") == "Elasticsearch")


def _api_fix(exc: ApiError, engine: str = "Elasticsearch") -> str:
    """What to do about one Elasticsearch (or OpenSearch) error answer, by its HTTP status."""
    status = exc.meta.status
    if engine == "Elasticsearch" and not_elasticsearch(status, exc.meta.headers):
        return NOT_ELASTICSEARCH_FIX
    if status == 401:
        return (
            "the cluster has security on: put a user and password it accepts in ESRR_ES_URL, e.g. "
            "https://USER:PASSWORD@HOST:9200, or an API key in ESRR_ES_API_KEY"
        )
    if status == 403:
        return (
            "the credentials (ESRR_ES_URL's user or ESRR_ES_API_KEY) lack privileges on the ESRR_ES_ALIAS "
            "alias and its indices (<alias>-*); grant them (e.g. a role with all on those names) or use others"
        )
    if status == 429 or status >= 500:
        return "the cluster is overloaded or failing; check GET _cluster/health and its logs, then retry"
    return "fix what the reason names (index names come from ESRR_ES_ALIAS) and retry"


def _tls_fix(exc: SSLError) -> str:
    """What to do about a failed TLS handshake, by what OpenSSL reported."""
    # A plain-HTTP server answers a TLS hello with HTTP bytes (WRONG_VERSION_NUMBER, or "record layer
    # failure" in newer OpenSSL) or by hanging up (UNEXPECTED_EOF); a CA mismatch is a verify failure.
    if any(sign in str(exc) for sign in ("WRONG_VERSION_NUMBER", "record layer failure", "UNEXPECTED_EOF")):
        return (
            "the server there does not complete a TLS handshake; if it serves plain HTTP, use http:// in "
            "ESRR_ES_URL, else check the host and port"
        )
    return (
        "ESRR_ES_CA_CERTS must name the PEM file of the CA that signed the cluster's certificate "
        "(Elasticsearch 8: config/certs/http_ca.crt); set it, or check that the file it names is that CA "
        "and that ESRR_ES_URL's host is one the certificate names"
    )


@contextmanager
def translate_errors(client: Elasticsearch, passing: tuple[type[ApiError], ...] = ()) -> Iterator[None]:
    """Turn Elasticsearch client errors (other than ``passing``) into a ``BackendError`` that names the fix."""
    try:
        yield
    except passing:
        raise
    except SSLError as exc:  # before ConnectionError, of which it is a kind
        raise BackendError(
            f"the TLS handshake with {product(client)} at {cluster_url(client)} failed; {_tls_fix(exc)} ({exc})"
        ) from exc
    except ConnectionTimeout as exc:
        raise BackendError(
            f"{product(client)} at {cluster_url(client)} did not answer within ESRR_ES_TIMEOUT_S; "
            f"check the cluster (GET _cluster/health, its logs) or raise ESRR_ES_TIMEOUT_S "
            f"({exc})"
        ) from exc
    except ESConnectionError as exc:
        raise BackendError(
            f"cannot reach {product(client)} at {cluster_url(client)}; start it or set "
            f"ESRR_ES_URL ({type(exc).__name__}: {exc})"
        ) from exc
    except UnsupportedProductError as exc:
        raise BackendError(
            f"{cluster_url(client)} does not answer as Elasticsearch 8; set ESRR_ES_URL to an "
            f"Elasticsearch cluster, or ESRR_BACKEND=opensearch for an OpenSearch one ({exc})"
        ) from exc
    except ServerTooOld as exc:
        raise BackendError(f"{product(client)} at {cluster_url(client)}: {exc.message}") from exc
    except ApiError as exc:
        raise BackendError(
            f"{product(client)} at {cluster_url(client)} refused a request with "
            f"{api_problem(exc)}; {_api_fix(exc, product(client))}"
        ) from exc
    except TransportError as exc:
        raise BackendError(
            f"the request to {product(client)} at {cluster_url(client)} failed "
            f"({type(exc).__name__}: {exc}); check ESRR_ES_URL and the cluster logs, "
            "then retry"
        ) from exc
