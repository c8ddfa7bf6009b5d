"""Checks of single setting values, and the messages that name a bad setting and its fix.

Shared by the settings classes of every process; none echoes a value (a URL or a key may carry
a secret).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import ValidationError

# The concrete indices are named <alias>-<version>: Elasticsearch allows 255 bytes, a version 128 characters.
MAX_ALIAS_BYTES = 255 - 1 - 128
ALIAS_FORBIDDEN = '\\/*?"<>|,#: '
SSL_CERT_REQS = ("required", "optional", "none", "CERT_REQUIRED", "CERT_OPTIONAL", "CERT_NONE")


def alias_problem(alias: str) -> str | None:
    """Which Elasticsearch index-name rule ``alias`` breaks (None: it is usable as alias and name prefix)."""
    if not alias:
        return "is empty"
    if alias != alias.lower():
        return "has upper-case letters; Elasticsearch index names are lower case"
    bad = [char for char in ALIAS_FORBIDDEN if char in alias]
    if bad:
        named = ", ".join("a space" if char == " " else char for char in bad)
        return f'contains {named}; Elasticsearch index names have none of \\ / * ? " < > | , # : or space'
    if alias[0] in "-_+":
        return "starts with '-', '_' or '+', which Elasticsearch does not allow"
    if alias in (".", ".."):
        return "is '.' or '..', which Elasticsearch does not allow"
    if len(alias.encode()) > MAX_ALIAS_BYTES:
        return (
            f"is {len(alias.encode())} bytes long; at most {MAX_ALIAS_BYTES} leave room for the "
            "'-<version>' of the index names within Elasticsearch's 255 bytes"
        )
    return None


def not_empty_path(value: Any, default: str) -> Any:
    """``value`` unless it is an empty or blank string, which would be Path(""), the current directory."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(
            f"is empty, which would mean the current directory; unset it for the default "
            f"({default}) or name a directory"
        )
    return value


def require_port_number(variable: str, url: str, example: str) -> None:
    """``ValueError`` naming ``variable`` when ``url``'s port is not a number in 1-65535 (the URL is not echoed)."""
    try:
        port = urlsplit(url).port  # None without one; urllib raises on a port that is not a number in 0-65535
    except ValueError:  # its text holds the URL, which may carry a password: not chained
        port = 0
    if port == 0:
        raise ValueError(f"{variable}: the port must be a number in 1-65535, as in {example}")


def check_redis_url(variable: str, url: str) -> None:
    """``ValueError`` naming ``variable`` for a Redis URL that would fail only when the first task is sent.

    The message never echoes the URL (it may carry a password). ``rediss://`` must say
    how to check the server's certificate: Celery's result backend refuses it without,
    and kombu, as broker, would fall back to no check at all.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return
    if not re.fullmatch(r"/?\d*", parts.path):
        raise ValueError(f"{variable}: a Redis URL ends in a database number, as in redis://HOST:6379/0")
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError as error:  # redis' text names the parameter or the part, not the URL
        raise ValueError(f"{variable}: {error} Fix the URL, as in redis://HOST:6379/0?socket_timeout=5") from None
    cert_reqs = parse_qs(parts.query).get("ssl_cert_reqs", [None])[-1]
    if parts.scheme == "rediss" and cert_reqs not in SSL_CERT_REQS:
        raise ValueError(
            f"{variable}: a rediss:// URL needs ssl_cert_reqs=required (or optional, or none), "
            "as in rediss://HOST:6380/0?ssl_cert_reqs=required"
        )


def missing_from_home(missing: str, make: str) -> str:
    """A message for something missing under ESRR_HOME: what and where (``missing``), both fixes, and ``make``.

    ESRR_HOME defaults to ./artifacts of the current folder, so a command run from another
    folder looks in the wrong place; ``missing`` should name the folder looked in, absolute.
    """
    return (
        f"{missing}. ESRR_HOME defaults to ./artifacts of the current folder: cd to the es-rerank folder "
        f"or set ESRR_HOME=/path/to/artifacts; or {make}"
    )


def settings_problems(error: ValidationError) -> str:
    """A ``ValidationError`` of settings as one line per problem, named by its variable, values left out."""
    problems = "\n".join(
        f"  {'ESRR_' + '_'.join(map(str, e['loc'])).upper() + ': ' if e['loc'] else ''}{e['msg']}"
        for e in error.errors()
    )
    return f"invalid settings (ESRR_* environment):\n{problems}"
