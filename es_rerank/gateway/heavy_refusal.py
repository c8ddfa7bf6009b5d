"""A heavy search seen before is refused before it is read again while the heavy lane is full (a cheap 429).

Whether a search is heavy is known only once its request is parsed and weighed (luqum,
the cost model: ~5 ms of CPU for a query at the word limit). A client that repeats a
heavy search in a loop against a full lane got its 429 after that work every time: 1,500
refusals in 10 s, a core's worth, spent on the interpreter lock the light searches need
(`esrr bench attack`, the "heaviest" row). So the exact bytes of each ``_search`` found
heavy (method, path, query string and body, hashed) are remembered, ``REMEMBERED`` at
most; while the lane is full, the same bytes get the lane's 429 before Flask reads them.
The answer is the one they would get after the work: a lane full is a 429 at once, and
what makes a search heavy is read from the request alone. Anything else, or the lane
with room, goes the usual way.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from http import HTTPStatus
from typing import Any, Protocol

from es_rerank.gateway.errors import PRODUCT_HEADER, GatewayError, error_body

REMEMBERED = 4096  # request digests kept (16 bytes each), the least recently seen forgotten first
MAX_HASHED_BYTES = 1 << 20  # the gateway's largest body (app.MAX_BODY_BYTES): larger ones are refused anyway

_WEIGHED: ContextVar[list[bool] | None] = ContextVar("esrr_weighed_heavy", default=None)


def weighed_heavy() -> None:
    """Note that the request being served holds a search weighed heavy (the heavy lane calls it)."""
    cell = _WEIGHED.get()
    if cell is not None:
        cell[0] = True


class FullLane(Protocol):
    """What the refusal needs of the heavy lane."""

    @property
    def full(self) -> bool: ...

    def refusal_when_full(self) -> GatewayError: ...


class RefuseKnownHeavy:
    """WSGI middleware: a ``_search`` whose bytes were weighed heavy before is the lane's 429 while ``lane`` is full,
    before the app reads it; ``on_refused`` is called for each (the metrics)."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], lane: FullLane, on_refused: Callable[[], None] = lambda: None
    ) -> None:
        self._app, self._lane, self._on_refused = app, lane, on_refused
        self._known: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        key = self._key(environ)
        if key is None:
            return self._app(environ, start_response)
        if self._lane.full and self._seen(key):
            self._on_refused()
            return self._refuse(start_response)
        cell = [False]
        token = _WEIGHED.set(cell)
        try:
            return self._app(environ, start_response)
        finally:
            _WEIGHED.reset(token)
            if cell[0]:
                self._remember(key)

    def _key(self, environ: dict[str, Any]) -> bytes | None:
        """The digest of a ``_search`` request's method, path, query string and body (which is read and put back);
        None for any other request."""
        path = environ.get("PATH_INFO", "")
        if not (path == "/_search" or path.endswith("/_search")):
            return None
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return None
        if length > MAX_HASHED_BYTES:
            return None
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        digest = hashlib.blake2b(digest_size=16)
        for part in (environ.get("REQUEST_METHOD", ""), path, environ.get("QUERY_STRING", "")):
            digest.update(part.encode("latin-1", "replace") + b"\0")
        digest.update(body)
        return digest.digest()

    def _seen(self, key: bytes) -> bool:
        with self._lock:
            if key not in self._known:
                return False
            self._known.move_to_end(key)
            return True

    def _remember(self, key: bytes) -> None:
        with self._lock:
            self._known[key] = None
            self._known.move_to_end(key)
            while len(self._known) > REMEMBERED:
                self._known.popitem(last=False)

    def _refuse(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        error = self._lane.refusal_when_full()
        body = json.dumps(error_body(error.error_type, error.reason, error.status)).encode()
        start_response(
            f"{error.status} {HTTPStatus(error.status).phrase}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), PRODUCT_HEADER],
        )
        return [body]
