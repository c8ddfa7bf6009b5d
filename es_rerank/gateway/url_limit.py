"""A WSGI middleware that refuses a URL longer than the gateway reads, before Flask routes or parses it.

A 200 KB index name cost seconds in ``fnmatch`` and, short of that, tens of
milliseconds in routing and decoding; Elasticsearch itself refuses a request line over
4 KB (``http.max_initial_line_length``), so no client of it sends one. The answer is
Elasticsearch's error shape with status 414.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from es_rerank.gateway.errors import PRODUCT_HEADER, RequestTooLong, error_body


class UrlLengthLimit:
    """Wraps a WSGI app: a path plus query string over ``max_bytes`` is a 414, counted by ``on_refused``."""

    def __init__(self, app: Callable, max_bytes: int, on_refused: Callable[[], None] = lambda: None) -> None:
        self.app, self.max_bytes, self.on_refused = app, max_bytes, on_refused

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        # WSGI strings are the request's bytes as latin-1: their length is the bytes' (after %-decoding the path).
        length = sum(len(environ.get(key, "")) for key in ("SCRIPT_NAME", "PATH_INFO", "QUERY_STRING"))
        if length <= self.max_bytes:
            return self.app(environ, start_response)
        self.on_refused()
        reason = (
            f"the URL is {length} bytes long, over the {self.max_bytes} this gateway reads "
            "(ESRR_GATEWAY_MAX_URL_BYTES); send the search text in a JSON body instead of q=, "
            "and name one index"
        )
        body = json.dumps(error_body(RequestTooLong.error_type, reason, RequestTooLong.status)).encode()
        start_response(
            "414 URI Too Long",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), PRODUCT_HEADER],
        )
        return [body]
