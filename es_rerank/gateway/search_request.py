"""What one ``_search`` request asks for, read from its URL parameters and JSON body (pure).

The gateway answers keyword searches over title + abstract, the field it calls ``text``:
the query's words are searched with BM25 and the top window is reranked. So it reads the
query forms that carry such words (``match``, ``multi_match``, ``query_string``,
``simple_query_string``, or ``q=`` in the URL) and refuses the rest with a
``BadSearchRequest`` that says what to send instead, as Elasticsearch refuses what it
cannot parse. Operators inside the text (AND, quotes, fields) are not parsed: the words
are what is searched.

Every request's cost is bounded before the search: a query longer than ``max_words``
words (``ESRR_GATEWAY_MAX_QUERY_WORDS``) is a 400 naming the limit, not cut short, since
a cut query would be answered as if it were another one; its characters are counted
before it is tokenized, so a megabyte of text costs no tokenizing. Error messages show
at most a short excerpt of what was sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qsl

from es_rerank.backends.base import MAX_K
from es_rerank.gateway.errors import BadSearchRequest, clipped, excerpt
from es_rerank.text import tokenize

SEARCHED_FIELD = "text"
FIELDS_OF_TEXT = frozenset({"title", "abstract"})  # `text` is these two together
BODY_KEYS = ("query", "size", "from", "track_total_hits")  # track_total_hits: the total is always a lower bound
# URL parameters; the last three change only how Elasticsearch formats a response, which this one keeps as is.
URL_PARAMETERS = ("q", "size", "from", "track_total_hits", "pretty", "human", "error_trace")
TEXT_QUERIES = ("match", "multi_match", "query_string", "simple_query_string")
DEFAULT_SIZE = 10
DEFAULT_MAX_WORDS = 256
CHARS_PER_WORD = 32  # a query of n words may hold 32 n characters (biomedical words are long, not that long)
EXAMPLE = '{"query": {"match": {"text": "green tea and breast cancer"}}, "size": 10}'


@dataclass(frozen=True)
class SearchRequest:
    """A keyword search: the text, and which of its ranked hits to return."""

    text: str
    size: int = DEFAULT_SIZE
    offset: int = 0  # Elasticsearch's `from`

    @property
    def depth(self) -> int:
        """Hits to rank for this page (at least one, so that a size-0 request still counts)."""
        return max(self.offset + self.size, 1)


def url_parameters(query_string: bytes) -> dict[str, str]:
    """The URL's parameters, each name's first value; ``BadSearchRequest`` when they are not UTF-8.

    werkzeug's ``request.args`` would keep undecodable bytes as text (``q=%fe`` searched
    for "fe"); a body that is not UTF-8 is refused, so a URL is too.
    """
    try:
        pairs = parse_qsl(query_string.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise BadSearchRequest("the URL's parameters are not UTF-8 (after %-decoding); percent-encode the search "
                               "text's UTF-8 bytes, as in q=caf%C3%A9") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        params.setdefault(name, value)
    return params


def parse_search(params: Mapping[str, str], body: Any, max_words: int = DEFAULT_MAX_WORDS) -> SearchRequest:
    """The search that URL ``params`` and a decoded JSON ``body`` (None when empty) ask for, of at most
    ``max_words`` words."""
    unknown = next((name for name in params if name not in URL_PARAMETERS), None)
    if unknown is not None:
        raise BadSearchRequest(f"request [/_search] contains unrecognized parameter: [{clipped(unknown)}]; this "
                               f"gateway reads {', '.join(URL_PARAMETERS)}")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadSearchRequest(f"the request body is a JSON {type(body).__name__}, not an object; send {EXAMPLE}")
    unknown = next((key for key in body if key not in BODY_KEYS), None)
    if unknown is not None:
        raise BadSearchRequest(f"unknown key [{clipped(unknown)}] in the search body; this gateway reads "
                               f"{', '.join(BODY_KEYS)}, as in {EXAMPLE}")
    size = _count("size", params.get("size", body.get("size", DEFAULT_SIZE)))
    offset = _count("from", params.get("from", body.get("from", 0)))
    if offset + size > MAX_K:
        raise BadSearchRequest(f"Result window is too large, from + size must be less than or equal to: [{MAX_K}] "
                               f"but was [{offset + size}]; page within the first {MAX_K} hits")
    if "q" in params and "query" in body:
        raise BadSearchRequest("the search text is given twice, as q= in the URL and as query in the body; "
                               "send one of them")
    text = params["q"] if "q" in params else _query_text(body.get("query"))
    _check_length(text, max_words)
    return SearchRequest(text, size, offset)


def _check_length(text: str, max_words: int) -> None:
    """``BadSearchRequest`` unless ``text`` has 1 to ``max_words`` words; long text is refused before tokenizing."""
    max_chars = max_words * CHARS_PER_WORD
    fix = f"this gateway searches at most {max_words} words ({max_chars} characters) per query; shorten it"
    if len(text) > max_chars:
        raise BadSearchRequest(f"the query is {len(text)} characters long; {fix}")
    words = len(tokenize(text))
    if words > max_words:
        raise BadSearchRequest(f"the query has {words} words; {fix}")
    if not words:
        raise BadSearchRequest(f"the query {excerpt(text)} has no words to search for (only spaces or "
                               "punctuation); give it at least one word")


def _count(name: str, value: Any) -> int:
    """``size`` or ``from`` as a whole number in [0, MAX_K] (URL parameters arrive as strings)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,7}", value.strip()):  # ASCII digits, int() takes
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadSearchRequest(f"[{name}] must be a whole number of at least 0, got {excerpt(value)}")
    if value > MAX_K:
        raise BadSearchRequest(f"[{name}] is {excerpt(value)}; this gateway ranks at most {MAX_K} hits per query")
    return value


def _query_text(query: Any) -> str:
    """The words of a body's ``query`` clause, or ``BadSearchRequest`` naming what to send."""
    if query is None:
        raise BadSearchRequest(f"no search text: send q= in the URL or a query in the body, as in {EXAMPLE}")
    if not isinstance(query, dict) or len(query) != 1:
        raise BadSearchRequest(f"[query] must be an object with one clause ({', '.join(TEXT_QUERIES)}), "
                               f"as in {EXAMPLE}")
    kind, clause = next(iter(query.items()))
    if kind not in TEXT_QUERIES:
        raise BadSearchRequest(f"[{clipped(kind)}] queries are not served: this gateway reranks keyword searches; "
                               f"send one of {', '.join(TEXT_QUERIES)}, as in {EXAMPLE}")
    if not isinstance(clause, dict):
        raise BadSearchRequest(f"[{kind}] must be an object, as in {EXAMPLE}")
    if kind == "match":
        return _match_text(clause)
    _check_fields(kind, clause.get("fields", clause.get("default_field")))
    return _text(kind, clause.get("query"))


def _match_text(clause: dict) -> str:
    """The text of ``{"match": {field: text | {"query": text}}}``."""
    if len(clause) != 1:
        raise BadSearchRequest(f"[match] takes one field, got {len(clause)}; send {EXAMPLE}")
    field, value = next(iter(clause.items()))
    _check_fields("match", field)
    return _text("match", value.get("query") if isinstance(value, dict) else value)


def _check_fields(kind: str, fields: Any) -> None:
    """Refuse a field list other than ``text`` or title and abstract together: only their union is indexed."""
    if fields is None:
        return
    listed = [fields] if isinstance(fields, str) else fields if isinstance(fields, list) else None
    if listed is None or not all(isinstance(name, str) for name in listed):
        raise BadSearchRequest(f"[{kind}] fields must be a field name or a list of them, got {excerpt(fields)}")
    names = {name.split("^")[0] for name in listed}  # a boost ("title^2") does not change what is searched
    if names not in ({SEARCHED_FIELD}, set(FIELDS_OF_TEXT), {"*"}, {"_all"}):
        raise BadSearchRequest(f"[{kind}] on {excerpt(sorted(names))}: this gateway searches title and abstract "
                               "together, "
                               f"as the field '{SEARCHED_FIELD}'; name that field (or title and abstract both)")


def _text(kind: str, text: Any) -> str:
    """``text`` if it is a string, else ``BadSearchRequest``."""
    if not isinstance(text, str):
        raise BadSearchRequest(f"[{kind}] needs the search text as a string, got {excerpt(text)}; send {EXAMPLE}")
    return text
