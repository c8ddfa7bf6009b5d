"""Which requests write to or administer an index, which the read-only gateway refuses with a 403 (pure).

Told by Elasticsearch's REST API: a ``PUT``, ``PATCH`` or ``DELETE`` of an index or of a
path the gateway does not route (every such call of Elasticsearch's writes, creates or
deletes), and any write method on an endpoint that writes or administers (``_doc``,
``_bulk``, ``_update``, ``_mapping``, ``_refresh``...). Other ``POST``s are reads the
gateway does not serve (``_search/scroll``, ``_pit``, ``_field_caps``, ``_explain``), and so
are the ``DELETE``s that release a scroll or a point in time: a 404 naming what is served,
not a refusal that calls them writes. A wrong method on one of the gateway's own APIs
(``PUT /_search``) stays a 405.
"""

from __future__ import annotations

WRITE_METHODS = ("PUT", "POST", "DELETE", "PATCH")
WRITE_APIS = frozenset(
    {
        "_doc",
        "_create",
        "_update",
        "_bulk",
        "_delete_by_query",
        "_update_by_query",
        "_reindex",
        "_mapping",
        "_mappings",
        "_settings",
        "_alias",
        "_aliases",
        "_refresh",
        "_flush",
        "_forcemerge",
        "_open",
        "_close",
        "_rollover",
        "_shrink",
        "_split",
        "_clone",
        "_block",
        "_cache",
        "_snapshot",
        "_ingest",
        "_security",
        "_index_template",
        "_component_template",
        "_template",
        "_ilm",
        "_data_stream",
        "_cluster",
        "_license",
    }
)
RELEASES = ("_pit", "scroll")  # DELETE /_pit, DELETE /_search/scroll: a search context let go, nothing written


def is_write(method: str, path: str, routed: bool) -> bool:
    """Whether ``method`` on ``path`` writes to or administers an index; ``routed``: some route takes the path
    with another method (a 405 rather than a 404)."""
    if method not in WRITE_METHODS:
        return False
    segments = [segment for segment in path.split("/") if segment]
    if any(segment in WRITE_APIS for segment in segments):
        return True
    if method == "POST":
        return False
    if method == "DELETE" and any(segment in RELEASES for segment in segments):
        return False
    names_an_index = len(segments) == 1 and not segments[0].startswith("_")
    return names_an_index or not routed
