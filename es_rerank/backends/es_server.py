"""The Elasticsearch server's version, read once per client, and the media types that version accepts.

The official client (8.x) sends every JSON body and asks every answer as
``application/vnd.elasticsearch+json; compatible-with=8`` (``x-ndjson`` for bulk and
msearch). Elasticsearch 8 and 9 take that; Elasticsearch 7 refuses it with a 400
(``media_type_header_exception``: compatible-with must be 7). ``VersionedTransport`` reads
``GET /`` before the client's first request, and for a 7.x server sends the plain types
(``application/json``, ``application/x-ndjson``), which every 7.x answers in its own
format. A server older than ``OLDEST`` is refused with ``ServerTooOld``, which names its
version: before 7.14 Elasticsearch does not send the ``X-Elastic-Product`` header that the
8.x client requires, and before 7.10 it has no point in time.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Mapping

from elastic_transport import ApiResponseMeta, TransportError, Transport
from elastic_transport.client_utils import DEFAULT

OLDEST = (7, 14)
_COMPAT = re.compile(r"application/vnd\.elasticsearch\+([\w-]+)\s*;\s*compatible-with=\d+")
_VERSION = re.compile(r"(\d+)\.(\d+)")


class ServerTooOld(TransportError):
    """The server is an Elasticsearch older than ``OLDEST``, or announces no version esrr can read."""


def server_version(body: Any) -> tuple[int, int] | None:
    """(major, minor) from a ``GET /`` answer's ``version.number``; None when it has none."""
    version = body.get("version") if isinstance(body, dict) else None
    number = version.get("number") if isinstance(version, dict) else None
    match = _VERSION.match(number) if isinstance(number, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def headers_for(major: int, headers: Mapping[str, Any]) -> dict[str, Any]:
    """``headers`` with the versioned media types made plain when the server is a 7.x; as they are otherwise."""
    if major != 7:
        return dict(headers)
    return {name: _COMPAT.sub(r"application/\1", value) if isinstance(value, str) else value
            for name, value in headers.items()}


class VersionedTransport(Transport):
    """A transport that learns the server's major version on its first request and sends headers that version takes.

    Pass it as ``Elasticsearch(..., transport_class=VersionedTransport)``. A first request that
    cannot reach the server, or is refused (401 without credentials), is sent as the client
    made it and the version is read again on the next one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._version_lock = threading.Lock()
        self._major: int | None = None

    @property
    def server_major(self) -> int | None:
        """The server's major version, once a request has read it."""
        return self._major

    def perform_request(self, method: str, target: str, *, headers: Any = DEFAULT, **kwargs: Any) -> Any:
        major = self._read_major(headers, kwargs)
        if major is not None and headers is not DEFAULT:
            headers = headers_for(major, headers)
        return super().perform_request(method, target, headers=headers, **kwargs)

    def _read_major(self, headers: Any, kwargs: dict[str, Any]) -> int | None:
        if self._major is not None:
            return self._major
        with self._version_lock:
            if self._major is None:
                probe = {"accept": "application/json"}
                if headers is not DEFAULT:  # the caller's credentials (api key, basic auth) go with the probe
                    probe.update({name: value for name, value in headers.items()
                                  if name.lower() in ("authorization", "cookie")})
                options = {key: kwargs[key] for key in ("request_timeout", "client_meta", "max_retries")
                           if key in kwargs}
                meta, body = super().perform_request("GET", "/", headers=probe, **options)
                self._major = _checked_major(meta, body)
        return self._major


def _checked_major(meta: ApiResponseMeta, body: Any) -> int | None:
    """The major version of a ``GET /`` answer; None when it did not say (not a 200); ``ServerTooOld`` when too old."""
    if meta.status != 200:
        return None
    version = server_version(body)
    if version is None:
        # No version at all: the client's own product check (X-Elastic-Product) says what it is.
        return None
    if isinstance(body, dict) and body.get("version", {}).get("distribution") == "opensearch":
        return None  # not Elasticsearch: the client's product check refuses it with its own message
    if version < OLDEST:
        raise ServerTooOld(
            f"the server is Elasticsearch {body['version']['number']}, older than {OLDEST[0]}.{OLDEST[1]}, the "
            f"oldest esrr talks to (its 8.x client needs the X-Elastic-Product header {OLDEST[0]}.{OLDEST[1]} "
            "introduced); upgrade the cluster to 7.17 or 8.x, or set ESRR_ES_URL to a newer one")
    return version[0]
