"""What the gateway's views read from the Flask request besides its URL: the JSON body and the query id."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from flask import request

from es_rerank.gateway.errors import BadSearchRequest

QUERY_ID_HEADER = "X-Opaque-Id"
_QUERY_ID = re.compile(r"[\x21-\x7e]{1,64}")  # printable ASCII, no spaces: safe in a log line and a header


def query_id() -> str:
    """The client's ``X-Opaque-Id`` when it is a short printable token, else a new id."""
    given = request.headers.get(QUERY_ID_HEADER, "")
    return given if _QUERY_ID.fullmatch(given) else uuid.uuid4().hex[:16]


def json_body() -> Any:
    """The request's JSON body, None when it has none."""
    return read_json(request.get_data(cache=False), "the request body")


def read_json(data: bytes, what: str) -> Any:
    """``data`` decoded as JSON (None when blank); ``BadSearchRequest`` naming ``what`` when it is not JSON."""
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadSearchRequest(f"{what} is not JSON ({error}); send a JSON object such as "
                               '{"query": {"match": {"text": "green tea"}}}') from None
    except RecursionError:
        raise BadSearchRequest(f"{what} nests too deeply to read; send a search body such as "
                               '{"query": {"match": {"text": "green tea"}}}') from None
