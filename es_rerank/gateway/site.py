"""The site search page for people: server-rendered HTML at ``GET /`` for browsers, JSON there for everyone else.

Where it is served (content negotiation): ``GET /`` answers a browser with the page
and every other client with Elasticsearch's cluster info, as before. A request gets
the page when ``text/html`` is the best match of its ``Accept`` header against
``application/json`` and ``text/html`` (browsers send ``text/html,...,*/*;q=0.8``); a
tie (``*/*``, curl's default), no header, or Elasticsearch's own
``application/vnd.elasticsearch+json`` gets the JSON, so no Elasticsearch client
changes. Responses to ``/`` say ``Vary: Accept`` so that a cache keeps both. Chosen
over a ``/search`` path because every other one-segment path is an index name to an
Elasticsearch client (``GET /search`` would shadow an index called ``search``), while
``/`` is the one address a person types. ``ESRR_GATEWAY_SITE=false`` turns the page
off (``/`` is then JSON for everyone).

The form is a plain GET form (``q``, ``year_from``, ``year_to``, ``type``, ``page``),
so it works without JavaScript and every result page is a link. The views are thin:
``site_search`` turns the form into the request body and the response into what the
page shows; ``searching.run_search`` answers it as ``_search`` would. Errors become a
message on the page with the error's status, never a 500.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, render_template, request

from es_rerank.backends.base import BackendError
from es_rerank.gateway.errors import GatewayError, public_reason
from es_rerank.gateway.events import PAGE_SCRIPT_SOURCE
from es_rerank.gateway.searching import run_search
from es_rerank.gateway.site_search import (
    MAX_QUERY_CHARS,
    ResultsView,
    SiteQuery,
    SiteQueryError,
    results_view,
    search_body,
    site_query,
)
from es_rerank.payload import PayloadError, WorkerSetupError

site = Blueprint("site", __name__, template_folder="templates")
log = logging.getLogger(__name__)
PAGE_PATH = "/"
_OFFERED = ("application/json", "text/html")  # JSON first: it wins a tie
# Scripts: only the events report (events.py), by its hash; its beacons go to this gateway only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; "
    f"frame-ancestors 'none'; script-src {PAGE_SCRIPT_SOURCE}; connect-src 'self'"
)


def wants_page() -> bool:
    """Whether this request is a browser's ``GET /``: ``text/html`` is its best match of ``_OFFERED``."""
    return (
        request.method in ("GET", "HEAD")
        and request.path == PAGE_PATH
        and request.accept_mimetypes.best_match(_OFFERED) == "text/html"
    )


@site.before_app_request
def _page_for_browsers() -> Response | None:
    # A hook rather than a second rule for "/": the JSON info route stays as it is, for everyone else.
    return search_page() if wants_page() else None


@site.after_app_request
def _vary_on_accept(response: Response) -> Response:
    if request.path == PAGE_PATH:
        response.vary.add("Accept")
    return response


def search_page() -> Response:
    """The page: the form, and when it has words, a page of reranked results with the filters' counts."""
    args = request.args
    try:
        query = site_query(
            args.get("q"), args.get("page"), args.get("year_from"), args.get("year_to"), args.getlist("type")
        )
    except SiteQueryError as error:
        return _page(SiteQuery(" ".join((args.get("q") or "").split())[:MAX_QUERY_CHARS]), error=str(error), status=400)
    if not query.text:
        return _page(query)
    try:
        response = run_search(None, {}, search_body(query), f"site-{uuid.uuid4().hex[:11]}")
    except GatewayError as error:
        return _page(query, error=error.reason, status=error.status)
    except BackendError as error:
        log.error("search backend failed: %s", error)
        return _page(query, error=f"The search engine cannot answer right now: {public_reason(str(error))}", status=503)
    except (WorkerSetupError, PayloadError) as error:
        log.error("the scoring worker refused the request: %s", error)
        return _page(query, error=f"The scoring worker refused the search: {public_reason(str(error))}", status=503)
    return _page(query, view=results_view(response, query))


def _page(query: SiteQuery, view: ResultsView | None = None, error: str | None = None, status: int = 200) -> Response:
    page = render_template(
        "site/search.html", query=query, view=view, error=error, link=lambda number: _link(query, number)
    )
    response = Response(page, status, mimetype="text/html")
    # Nothing but this page's own form and inline style: a snippet that slipped past the escaping runs nothing.
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _link(query: SiteQuery, page: int) -> str:
    """A relative link to ``page`` of ``query``'s results."""
    fields: dict[str, Any] = query.link(page)
    return f"{PAGE_PATH}?{urlencode(fields, doseq=True)}"
