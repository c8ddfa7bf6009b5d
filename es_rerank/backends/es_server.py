"""The Elasticsearch server's version, read once per client, and a clear refusal of a server too old for the client.

The official client (8.x) sends its requests as ``application/vnd.elasticsearch+json;
compatible-with=8`` (``x-ndjson`` for bulk and msearch) and checks each successful answer for
the ``X-Elastic-Product: Elasticsearch`` header. Elasticsearch 7.15.2 and 7.17.28, started by
``scripts/engine.sh``, answer those media types as they answer ``application/json`` (they
ignore the version in them: 5, 8 and 9 all got a 200), so nothing is rewritten for a 7.x;
the whole backend suite runs on 7.17 with the client's own headers. A server before 7.14
sends no product header, and the client's refusal then says "not Elasticsearch" without
saying why. ``VersionedTransport`` reads ``GET /`` before the client's first request and
refuses such a server with ``ServerTooOld``, which names its version and the fix.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from elastic_transport import ApiResponseMeta, Transport, TransportError
from elastic_transport.client_utils import DEFAULT

OLDEST = (7, 14)
_VERSION = re.compile(r"(\d+)\.(\d+)")


class ServerTooOld(TransportError):
    """The server is an Elasticsearch older than ``OLDEST``."""


def server_version(body: Any) -> tuple[int, int] | None:
    """(major, minor) from a ``GET /`` answer's ``version.number``; None when it has none."""
    version = body.get("version") if isinstance(body, dict) else None
    number = version.get("number") if isinstance(version, dict) else None
    match = _VERSION.match(number) if isinstance(number, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


class VersionedTransport(Transport):
    """A transport that reads the server's version on its first request and refuses an Elasticsearch before 7.14.

    Pass it as ``Elasticsearch(..., transport_class=VersionedTransport)``. A first request that
    cannot reach the server, or whose ``GET /`` is refused (401 without credentials, 403 without
    the ``monitor`` privilege), goes out as the client made it and the version is read again on
    the next one.
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
        if self._major is None:
            self._read_major(headers, kwargs)
        return super().perform_request(method, target, headers=headers, **kwargs)

    def _read_major(self, headers: Any, kwargs: dict[str, Any]) -> None:
        with self._version_lock:
            if self._major is None:
                probe = {"accept": "application/json"}
                if headers is not DEFAULT:  # the caller's credentials (api key, basic auth) go with the probe
                    probe.update(
                        {name: value for name, value in headers.items() if name.lower() in ("authorization", "cookie")}
                    )
                options = {
                    key: kwargs[key] for key in ("request_timeout", "client_meta", "max_retries") if key in kwargs
                }
                meta, body = super().perform_request("GET", "/", headers=probe, **options)
                self._major = _checked_major(meta, body)


def _checked_major(meta: ApiResponseMeta, body: Any) -> int | None:
    """The major version of a ``GET /`` answer; None when it did not say; ``ServerTooOld`` when too old."""
    version = server_version(body) if meta.status == 200 else None
    if version is None:
        return None  # no version: the client's own product check says what the server is
    if isinstance(body, dict) and body.get("version", {}).get("distribution") == "opensearch":
        return None  # not Elasticsearch: the client's product check refuses it with its own message
    if version < OLDEST:
        raise ServerTooOld(
            f"the server is Elasticsearch {body['version']['number']}, older than {OLDEST[0]}.{OLDEST[1]}, the "
            f"oldest esrr talks to (its 8.x client needs the X-Elastic-Product header {OLDEST[0]}.{OLDEST[1]} "
            "introduced); upgrade the cluster to 7.17 or 8.x, or set ESRR_ES_URL to a newer one"
        )
    return version[0]
