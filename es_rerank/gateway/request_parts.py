"""What the gateway's views read from the Flask request besides its URL: the JSON body and the query id."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from flask import request

from es_rerank.gateway.errors import BadSearchRequest

QUERY_ID_HEADER = "X-Opaque-Id"
_QUERY_ID_KEY = "HTTP_" + QUERY_ID_HEADER.upper().replace(
    "-", "_"
)  # its WSGI environ key, read without the translation
_QUERY_ID = re.compile(r"[\x21-\x7e]{1,64}")  # printable ASCII, no spaces: safe in a log line and a header
# json.loads reads a surrogate from a \uD800-style escape, or from its UTF-8-like bytes (it decodes with surrogatepass).
_MAY_HOLD_A_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidText(BadSearchRequest):
    """JSON that decodes to a string which is not Unicode text (a lone surrogate)."""


def query_id() -> str:
    """The client's ``X-Opaque-Id`` when it is a short printable token, else a new id (16 random hex digits)."""
    given = request.environ.get(_QUERY_ID_KEY, "")
    return given if _QUERY_ID.fullmatch(given) else os.urandom(8).hex()


def json_body() -> Any:
    """The request's JSON body, None when it has none."""
    return read_json(request.get_data(cache=False), "the request body")


def read_json(data: bytes, what: str) -> Any:
    """``data`` decoded as JSON (None when blank); ``BadSearchRequest`` naming ``what`` when it is not JSON, or holds
    a string that is not Unicode text (a lone surrogate, which no index, UTF-8 encoder or tantivy takes)."""
    if not data.strip():
        return None
    try:
        value = json.loads(data)
        if _MAY_HOLD_A_SURROGATE.search(data) and _holds_a_lone_surrogate(value):
            raise InvalidText(
                f"{what} holds a lone UTF-16 surrogate (such as \\ud800), which is no "
                "character; send valid Unicode text (a pair such as \\ud83d\\ude00 is one "
                "character)"
            )
        return value
    except (ValueError, UnicodeDecodeError) as error:
        raise BadSearchRequest(
            f"{what} is not JSON ({error}); send a JSON object such as "
            '{"query": {"match": {"text": "green tea"}}}'
        ) from None
    except RecursionError:
        raise BadSearchRequest(
            f"{what} nests too deeply to read; send a search body such as "
            '{"query": {"match": {"text": "green tea"}}}'
        ) from None


def _holds_a_lone_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value has a string (key or value) holding a surrogate code point."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
