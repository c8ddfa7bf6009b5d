"""The gateway's errors, each rendered as an Elasticsearch error body by one handler.

An ES client reads ``{"error": {"root_cause": [...], "type": ..., "reason": ...},
"status": N}`` from any failed request, so ours have that shape too. ``reason`` says
what was wrong and how to fix it; ``type`` is the ES type a client may branch on.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """A request the gateway cannot answer; ``status`` and ``error_type`` as Elasticsearch would give them."""

    status = 500
    error_type = "exception"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BadSearchRequest(GatewayError):
    """The request body or parameters cannot be read as a search this gateway serves."""

    status = 400
    error_type = "parsing_exception"


class IndexNotFound(GatewayError):
    """The request names an index this gateway does not serve."""

    status = 404
    error_type = "index_not_found_exception"


class ServiceUnavailable(GatewayError):
    """The search backend or the scoring workers cannot answer; the reason names the fix."""

    status = 503
    error_type = "search_phase_execution_exception"


def error_body(error_type: str, reason: str, status: int) -> dict[str, Any]:
    """An Elasticsearch error response body."""
    cause = {"type": error_type, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}
