"""The site page's search, pure: the form's fields -> an Elasticsearch request body; a response -> what the page shows.

No Flask here: ``site.py`` (the views) reads the form, calls ``run_search`` with
``search_body(...)`` and renders ``results_view(...)``. The request is the shared
contract of issue 26: one ``match`` on ``text`` in ``bool.must``, the chosen year range
and publication types as ``bool.filter``, highlighted title and abstract
(``"encoder": "html"``), and ``terms`` aggregations on ``year`` and
``publication_types`` for the filters' counts.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from es_rerank.backends.base import MAX_WINDOW

PAGE_SIZE = 10
MAX_PAGE = MAX_WINDOW // PAGE_SIZE  # the page shows no further than the gateway may rerank
MAX_QUERY_CHARS = 500
MAX_TYPES = 20  # publication types the page asks counts for, and the most that may be chosen
MAX_TYPE_CHARS = 200
MIN_YEAR, MAX_YEAR = 1000, 2999
SHOWN_AUTHORS = 3
SNIPPET_CHARS = 300  # of the abstract's start, shown when no fragment of it is highlighted
SNIPPET_FRAGMENTS = 3  # highlighted fragments of the abstract shown (Elasticsearch sends up to 5)
PUBMED_URL = "https://pubmed.ncbi.nlm.nih.gov/{}/"
_PMID = re.compile(r"[0-9]{1,10}")
# A record's own PubMed address (BEIR's NFCorpus keeps ``metadata.url`` as http://www.ncbi.nlm.nih.gov/pubmed/N).
_PUBMED_ADDRESS = re.compile(
    r"https?://(?:www\.)?(?:ncbi\.nlm\.nih\.gov/pubmed|pubmed\.ncbi\.nlm\.nih\.gov)/"
    r"([0-9]{1,10})/?"
)
_EM_TAG = re.compile(r"(</?em>)")
# Lucene's English stop set (Elasticsearch's ``_english_``): a query's "and" or "of" matches, yet marking every one
# of them in a title and an abstract hides the words that made the hit.
UNMARKED_WORDS = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their "
        "then there these they this to was will with"
    ).split()
)


class SiteQueryError(ValueError):
    """A form field the page cannot search with; the message names the field and what it takes."""


@dataclass(frozen=True)
class SiteQuery:
    """What a person asked for: the words, a page of ten, a year range and publication types."""

    text: str = ""
    page: int = 1
    year_from: int | None = None
    year_to: int | None = None
    types: tuple[str, ...] = ()

    @property
    def offset(self) -> int:
        """The first hit of this page, counted from 0."""
        return (self.page - 1) * PAGE_SIZE

    def link(self, page: int | None = None) -> dict[str, Any]:
        """The form fields of this search, for ``url_for``, on ``page`` (this one if None)."""
        fields: dict[str, Any] = {"q": self.text}
        if self.year_from is not None:
            fields["year_from"] = self.year_from
        if self.year_to is not None:
            fields["year_to"] = self.year_to
        if self.types:
            fields["type"] = list(self.types)
        if (page or self.page) != 1:
            fields["page"] = page or self.page
        return fields


def site_query(
    text: str | None, page: str | None, year_from: str | None, year_to: str | None, types: Sequence[str]
) -> SiteQuery:
    """The form's fields as a ``SiteQuery``; ``SiteQueryError`` names a field out of range."""
    text = " ".join((text or "").split())
    if len(text) > MAX_QUERY_CHARS:
        raise SiteQueryError(f"the search is {len(text)} characters long; use at most {MAX_QUERY_CHARS}")
    chosen = tuple(dict.fromkeys(kind.strip() for kind in types if kind.strip()))
    if len(chosen) > MAX_TYPES:
        raise SiteQueryError(f"{len(chosen)} publication types are chosen; choose at most {MAX_TYPES}")
    if any(len(kind) > MAX_TYPE_CHARS for kind in chosen):
        raise SiteQueryError(
            f"a publication type is longer than {MAX_TYPE_CHARS} characters; choose one of the listed types"
        )
    low = _whole_number("year from", year_from, MIN_YEAR, MAX_YEAR)
    high = _whole_number("year to", year_to, MIN_YEAR, MAX_YEAR)
    if low is not None and high is not None and low > high:
        raise SiteQueryError(f"the year range {low}-{high} is empty; put the earlier year first")
    number = _whole_number("page", page, 1, MAX_PAGE)
    return SiteQuery(text, 1 if number is None else number, low, high, chosen)


def _whole_number(name: str, value: str | None, lowest: int, highest: int) -> int | None:
    """``value`` as a whole number in [lowest, highest], None when the field is empty."""
    if value is None or not value.strip():
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise SiteQueryError(
            f"{name} is {value.strip()[:20]!r}; give a whole number from {lowest} to {highest}"
        ) from None
    if not lowest <= number <= highest:
        raise SiteQueryError(
            f"{name} is {number}; give a whole number from {lowest} to {highest}"
            + (f" (the site shows the first {MAX_WINDOW} hits)" if name == "page" else "")
        )
    return number


def search_body(query: SiteQuery) -> dict[str, Any]:
    """The Elasticsearch ``_search`` body for ``query`` (filters only when chosen)."""
    filters: list[dict[str, Any]] = []
    if query.year_from is not None or query.year_to is not None:
        bounds = {"gte": query.year_from, "lte": query.year_to}
        filters.append({"range": {"year": {key: value for key, value in bounds.items() if value is not None}}})
    if query.types:
        filters.append({"terms": {"publication_types": list(query.types)}})
    condition: dict[str, Any] = {"must": [{"match": {"text": {"query": query.text}}}]}
    if filters:
        condition["filter"] = filters
    return {
        "query": {"bool": condition},
        "from": query.offset,
        "size": PAGE_SIZE,  # the whole title, highlighted
        "highlight": {"encoder": "html", "fields": {"title": {"number_of_fragments": 0}, "abstract": {}}},
        "aggs": {
            "year": {"terms": {"field": "year", "size": 50}},
            "publication_types": {"terms": {"field": "publication_types", "size": MAX_TYPES}},
        },
    }


@dataclass(frozen=True)
class ResultView:
    """One hit as the page shows it."""

    title: Markup
    url: str | None  # PubMed's page: of the id when it is a PMID, else of the record's ``metadata.url``
    doc_id: str
    authors: str
    journal: str
    year: int | None
    publication_types: tuple[str, ...]
    snippet: Markup
    reranked: bool


@dataclass(frozen=True)
class Facet:
    """One filter value and how many of the matching documents have it."""

    value: str
    count: int
    chosen: bool = False


@dataclass(frozen=True)
class ResultsView:
    """A page of results, the filters' counts, the pages around it and what ordered them."""

    results: tuple[ResultView, ...]
    total: int
    total_is_lower_bound: bool
    page: int
    last_page: int
    ranker: str
    notes: tuple[str, ...] = ()  # why the model did not order them, when it did not
    years: tuple[Facet, ...] = ()
    types: tuple[Facet, ...] = field(default_factory=tuple)
    arm: str | None = None  # the interleaving experiment the page took part in (ESRR_EXPERIMENT)
    teams: tuple[str, ...] = ()  # then each result's team, in order

    @property
    def first_shown(self) -> int:
        """The rank of the first result on this page, counted from 1."""
        return (self.page - 1) * PAGE_SIZE + 1


def results_view(response: Mapping[str, Any], query: SiteQuery) -> ResultsView:
    """What the page shows of an Elasticsearch ``_search`` ``response`` to ``query``."""
    hits = response.get("hits", {})
    total = hits.get("total", {"value": len(hits.get("hits", ())), "relation": "eq"})
    count, relation = (total, "eq") if isinstance(total, int) else (int(total.get("value", 0)), total.get("relation"))
    esrr = response.get("esrr", {})
    notes = []
    if esrr.get("skipped"):
        notes.append(f"Reranking was skipped: {esrr['skipped']}")
    if esrr.get("fallback"):
        notes.append(f"Reranking fell back to the search engine's order: {esrr['fallback']}")
    aggregations = response.get("aggregations", {})
    chosen = set(query.types)
    years = sorted(
        (
            Facet(str(bucket["key"]), int(bucket["doc_count"]))
            for bucket in aggregations.get("year", {}).get("buckets", ())
        ),
        key=lambda facet: facet.value,
    )
    types = tuple(
        Facet(str(bucket["key"]), int(bucket["doc_count"]), str(bucket["key"]) in chosen)
        for bucket in aggregations.get("publication_types", {}).get("buckets", ())
    )
    listed = {facet.value for facet in types}
    types += tuple(Facet(kind, 0, True) for kind in query.types if kind not in listed)  # chosen, none left
    last_page = max(1, min(MAX_PAGE, math.ceil(count / PAGE_SIZE)))
    return ResultsView(
        tuple(result_view(hit) for hit in hits.get("hits", ())),
        count,
        relation == "gte",
        query.page,
        last_page,
        str(esrr.get("ranker", "the search engine")),
        tuple(notes),
        tuple(years),
        types,
        *_experiment(esrr.get("experiment")),
    )


def _experiment(experiment: Any) -> tuple[str | None, tuple[str, ...]]:
    """The experiment's name and the results' teams of an answer's ``esrr.experiment`` (none: None and ())."""
    if not isinstance(experiment, dict):
        return None, ()
    return str(experiment.get("name")), tuple(str(team) for team in experiment.get("teams", ()))


def result_view(hit: Mapping[str, Any]) -> ResultView:
    """One ``hits.hits`` entry as the page shows it."""
    source = hit.get("_source") or {}
    doc_id = str(source.get("doc_id", hit.get("_id", "")))
    highlight = hit.get("highlight") or {}
    titles = highlight.get("title") or ()
    title = highlighted(titles[0]) if titles else escape(source.get("title") or doc_id)
    fragments = (highlight.get("abstract") or ())[:SNIPPET_FRAGMENTS]
    if fragments:
        snippet = Markup(" … ").join(highlighted(fragment) for fragment in fragments)
    else:
        snippet = escape(_clipped(source.get("abstract") or "", SNIPPET_CHARS))
    year = source.get("year")
    return ResultView(
        title,
        pubmed_url(doc_id, source.get("metadata")),
        doc_id,
        author_line(source.get("authors") or ()),
        str(source.get("journal") or ""),
        year if isinstance(year, int) else None,
        tuple(source.get("publication_types") or ()),
        snippet,
        bool((hit.get("fields") or {}).get("reranked", [False])[0]),
    )


def pubmed_url(doc_id: str, metadata: Any) -> str | None:
    """The record's PubMed page: its id's when that is a PMID, else the PubMed address in ``metadata.url``; None when
    it has neither (another address is not linked: the page links PubMed only)."""
    if _PMID.fullmatch(doc_id):
        return PUBMED_URL.format(doc_id)
    address = metadata.get("url") if isinstance(metadata, Mapping) else None
    found = _PUBMED_ADDRESS.fullmatch(address.strip()) if isinstance(address, str) else None
    return PUBMED_URL.format(found.group(1)) if found else None


def author_line(authors: Sequence[str]) -> str:
    """The first few authors, then "et al." when there are more."""
    shown = ", ".join(authors[:SHOWN_AUTHORS])
    return f"{shown}, et al." if len(authors) > SHOWN_AUTHORS else shown


def highlighted(fragment: str) -> Markup:
    """A highlight fragment as safe HTML whose only markup is ``<em>``.

    With ``"encoder": "html"`` the backend has escaped the text around the ``<em>`` tags;
    the text is unescaped and escaped again so that a backend that did not escape it
    still cannot inject markup, and unbalanced tags are closed. A mark around a lone stop
    word (``UNMARKED_WORDS``) is dropped. Hand-written rather than an HTML sanitizer: the
    one tag allowed makes it a split on a regular expression.
    """
    parts: list[Markup] = []
    depth = 0
    pieces = _EM_TAG.split(fragment)
    for at, piece in enumerate(pieces):
        if piece in ("<em>", "</em>") and _marks_a_stop_word(pieces, at):
            continue
        if piece == "<em>":
            depth += 1
            parts.append(Markup("<em>"))
        elif piece == "</em>":
            if depth:
                depth -= 1
                parts.append(Markup("</em>"))
        elif piece:
            parts.append(escape(html.unescape(piece)))
    parts.extend(Markup("</em>") for _ in range(depth))
    return Markup("").join(parts)


def _marks_a_stop_word(pieces: list[str], at: int) -> bool:
    """Whether the tag at ``pieces[at]`` opens or closes a mark around nothing but a stop word."""
    opening = pieces[at] == "<em>"
    inner, other = (at + 1, at + 2) if opening else (at - 1, at - 2)
    if not 0 <= other < len(pieces) or pieces[other] != ("</em>" if opening else "<em>"):
        return False
    return html.unescape(pieces[inner]).strip().lower() in UNMARKED_WORDS


def _clipped(text: str, chars: int) -> str:
    """``text`` cut at a word boundary before ``chars`` characters, with an ellipsis when cut."""
    if len(text) <= chars:
        return text
    return text[:chars].rsplit(" ", 1)[0] + " …"
