"""The ``_source`` layout a known document store reads its documents from, for the answers the gateway sends it.

elasticsearch-haystack's ``ElasticsearchDocumentStore`` (which sends ``User-Agent: haystack-py-ds/<version>``)
builds each Haystack ``Document`` from a hit's ``_source`` alone: its ``id`` and ``content`` keys, every other key
as metadata. The served records keep their text as ``title`` and ``abstract`` and their id as ``doc_id``, so its
``ElasticsearchBM25Retriever`` would return documents whose content is None and whose id is a hash of nothing. For
that client only, each hit's ``_source`` carries ``id`` (the hit's ``_id``) and ``content`` (the searched text: the
title, a blank line, the abstract, as ``text`` reads them); the abstract moves into ``content`` rather than being
sent twice, so a page of 10,000 (Haystack's ``filter_documents``) weighs what it weighed. Other clients get the
records as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, request

HAYSTACK_AGENT = "haystack-py-ds/"  # elasticsearch-haystack's document store (integrations/elasticsearch)


def haystack_source(hit_id: str, source: Mapping[str, Any]) -> dict[str, Any]:
    """``source`` as a Haystack ``Document`` reads it: ``id`` and ``content`` set, the abstract inside ``content``."""
    if "content" in source or not ({"title", "abstract"} & source.keys()):
        return dict(source)
    parts = [str(source.get(name) or "") for name in ("title", "abstract")]
    laid = {"id": hit_id} if "id" not in source else {}
    laid.update((name, value) for name, value in source.items() if name != "abstract")
    laid["content"] = "\n\n".join(part for part in parts if part)
    return laid


def install_client_layouts(app: Flask) -> None:
    """Lay out the hits of ``app``'s answers to Haystack's document store as it reads them (``haystack_source``).

    Installed after the app's other ``after_request`` functions, so that it runs before them (Flask runs them in
    reverse): ``filter_path`` and the answer's byte cap then apply to what is sent.
    """

    @app.after_request
    def _haystack_layout(response: Response) -> Response:
        if not request.environ.get("HTTP_USER_AGENT", "").startswith(HAYSTACK_AGENT):  # the header, read directly
            return response
        if response.status_code != 200 or response.is_streamed or not response.is_json:
            return response
        body = response.get_json(silent=True)
        hits = body.get("hits", {}).get("hits") if isinstance(body, dict) else None
        if not isinstance(hits, list) or not hits:
            return response
        for hit in hits:
            if isinstance(hit, dict) and isinstance(hit.get("_source"), dict):
                hit["_source"] = haystack_source(str(hit.get("_id", "")), hit["_source"])
        response.set_data(app.json.dumps(body))
        return response
