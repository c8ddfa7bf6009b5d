"""What one ``_search`` request asks for, read from its URL parameters and JSON body (pure).

The body is Elasticsearch's: its ``query`` (any Query DSL), ``post_filter``, ``aggs``,
``highlight``, ``_source`` and the rest form the first stage, which the backend checks
and answers (``SearchBackend.prepare``: the Elasticsearch backend passes it through, the
embedded one serves the subset in ``es_rerank.backends.query_dsl`` and refuses the rest);
``size`` and ``from`` page through the reranked window, and the ``ext.esrr`` section
holds the reranking options, as Elasticsearch's ``rescore`` would:
``{"window_size": 500, "query_text": "...", "score_mode": "replace|total|multiply",
"query_weight": 1, "rerank_weight": 1, "explain": false}``, the defaults being the
gateway's window and the model's score alone. ``q=`` in the URL is Lucene's query
syntax, as in Elasticsearch (plain words are a ``match`` on ``text``).

The model reads ``ext.esrr.query_text``, else the text of the query's text clauses
(``query_dsl.query_text``: never filter values). Reranking is skipped on purpose, with
the reason in ``esrr.skipped``, when the request sorts by something other than
``_score``, scrolls or pages a point in time (as Elasticsearch refuses ``rescore`` with
a sort), or has no words for the model (filters only).

Every request's cost is bounded before the search: the model's text is at most
``max_words`` words (``ESRR_GATEWAY_MAX_QUERY_WORDS``), a 400 naming the limit, not cut
short, since a cut query would be answered as if it were another one; the strings of
``query`` and ``post_filter`` together hold at most ``max_words x CHARS_PER_WORD``
characters, counted on the raw body before anything is tokenized or parsed (a 477 KB
query string once cost 39 s of parsing before its 400). Error messages show at most a
short excerpt of what was sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from es_rerank.backends.base import MAX_K, MAX_WINDOW
from es_rerank.backends.query_dsl import MAX_DEPTH, query_text
from es_rerank.gateway.errors import BadSearchRequest, clipped, excerpt
from es_rerank.gateway.url_options import (
    FORMAT_PARAMETERS,
    SHAPING_PARAMETERS,
    UNCHANGING_PARAMETERS,
    check_time_value,
    check_url_options,
    flag,
)
from es_rerank.ranking.merge import SCORE_MODES, Combination
from es_rerank.ranking.request import DEFAULT_SIZE, NO_WORDS_SKIPPED, SearchRequest, Skipped, SkipReason, by_score
from es_rerank.text import tokenize

SEARCHED_FIELD = "text"
# URL parameters; pretty, human and error_trace change only how Elasticsearch formats a response, which this one
# keeps as is; filter_path is applied to every answer by the app (response_filter). The others of url_options are
# checked there: they shape the answer (typed_keys, rest_total_hits_as_int) or change nothing on one index.
COUNT_PARAMETERS = (
    "q",
    "df",
    "default_operator",
    "ignore_unavailable",
    "allow_no_indices",
    "expand_wildcards",
    "preference",
    "routing",
) + FORMAT_PARAMETERS
URL_PARAMETERS = (
    (
        "q",
        "df",
        "default_operator",
        "size",
        "from",
        "track_total_hits",
        "sort",
        "scroll",
        "_source",
        "_source_includes",
        "_source_excludes",
    )
    + UNCHANGING_PARAMETERS
    + SHAPING_PARAMETERS
    + FORMAT_PARAMETERS
)
PAGING_KEYS = ("size", "from", "ext")  # read here; the rest of the body is the first stage's
EXT_OPTIONS = ("window_size", "query_text", "score_mode", "query_weight", "rerank_weight", "explain")
DEFAULT_MAX_WORDS = 256
CHARS_PER_WORD = 32  # a query of n words may hold 32 n characters (biomedical words are long, not that long)
EXAMPLE = '{"query": {"match": {"text": "green tea and breast cancer"}}, "size": 10}'
# Lucene's operators: a sign at the start of a word, quotes, groups, field names, wildcards, AND / OR / NOT.
_LUCENE_SYNTAX = re.compile(r'(?:^|\s)[-+!]|["()\[\]{}~^*?\\/]|\w:|&&|\|\||\b(?:AND|OR|NOT)\b')


def url_parameters(query_string: bytes) -> dict[str, str]:
    """The URL's parameters, each name's first value; ``BadSearchRequest`` when they are not UTF-8.

    werkzeug's ``request.args`` would keep undecodable bytes as text (``q=%fe`` searched
    for "fe"); a body that is not UTF-8 is refused, so a URL is too.
    """
    try:
        pairs = parse_qsl(query_string.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise BadSearchRequest(
            "the URL's parameters are not UTF-8 (after %-decoding); percent-encode the search "
            "text's UTF-8 bytes, as in q=caf%C3%A9"
        ) from None
    params: dict[str, str] = {}
    for name, value in pairs:
        params.setdefault(name, value)
    return params


def parse_search(
    params: Mapping[str, str], body: Any, max_words: int = DEFAULT_MAX_WORDS, max_window: int = MAX_WINDOW
) -> SearchRequest:
    """The search that URL ``params`` and a decoded JSON ``body`` (None when empty) ask for; the model's text of at
    most ``max_words`` words, a window of at most ``max_window`` hits."""
    body = _body_object("/_search", params, URL_PARAMETERS, body, EXAMPLE)
    check_url_options(params)
    if "timeout" in body:
        check_time_value("timeout", body["timeout"])
    size, offset = _page(params, body)
    first_stage = _first_stage(params, body, offset)
    options = _esrr_options(body.get("ext"), max_window)
    _check_text_size(first_stage, max_words)  # on the raw body, before query_text parses a query string
    text = options.get("query_text")
    if text is None:
        text = query_text(first_stage.get("query"))
    _check_length(text, max_words)
    skipped = _skipped(params, first_stage)
    if skipped is None and not tokenize(text):
        skipped = NO_WORDS_SKIPPED
    return SearchRequest(
        text,
        size,
        offset,
        first_stage,
        window=options.get("window_size"),
        combination=Combination(
            options.get("score_mode", "replace"), options.get("query_weight", 1.0), options.get("rerank_weight", 1.0)
        ),
        explain=bool(options.get("explain", False)),
        skipped=skipped,
        passthrough={"scroll": params["scroll"]} if "scroll" in params else {},
    )


def _page(params: Mapping[str, str], body: Mapping[str, Any]) -> tuple[int, int]:
    """``size`` and ``from``, the URL's over the body's, within Elasticsearch's result window."""
    size = _count("size", params.get("size", body.get("size", DEFAULT_SIZE)))
    offset = _count("from", params.get("from", body.get("from", 0)))
    if offset + size > MAX_K:
        raise BadSearchRequest(
            f"Result window is too large, from + size must be less than or equal to: [{MAX_K}] "
            f"but was [{offset + size}]. See the scroll api for a more efficient way to request "
            "large data sets (Elasticsearch's index.max_result_window, which this gateway keeps): "
            f"page within the first {MAX_K} hits, or scroll or search_after past them"
        )
    return size, offset


def _first_stage(params: Mapping[str, str], body: Mapping[str, Any], offset: int) -> dict[str, Any]:
    """The first stage's body: the request's body less the paging, with the URL's query, total, sort and
    ``_source``."""
    if "q" in params and "query" in body:
        raise BadSearchRequest(
            "the search text is given twice, as q= in the URL and as query in the body; send one of them"
        )
    first_stage = {key: value for key, value in body.items() if key not in PAGING_KEYS}
    if "search_after" in first_stage and offset:
        raise BadSearchRequest(
            f"[from] parameter must be set to 0 when [search_after] is used, got {offset}; the "
            "next page starts after the last hit's sort values"
        )
    if "q" in params:
        first_stage["query"] = url_query(params)
    if "query" in first_stage and not isinstance(first_stage["query"], dict):
        raise BadSearchRequest(f"[query] must be an object with one clause, as in {EXAMPLE}")
    _read_total_hits(params, first_stage)
    if "sort" in params:
        first_stage["sort"] = _url_sort(params["sort"])
    source = url_source(params)
    if source is not None:
        first_stage["_source"] = source
    return first_stage


def _url_sort(sort: str) -> list[Any]:
    """The URL's ``sort``, "year:desc,_score", as the body's ``[{"year": "desc"}, "_score"]``."""
    parts = (part.strip().partition(":") for part in sort.split(",") if part.strip())
    return [{name: order} if order else name for name, _, order in parts]


def _read_total_hits(params: Mapping[str, str], first_stage: dict[str, Any]) -> None:
    """``track_total_hits`` of the URL into ``first_stage``, checked against ``rest_total_hits_as_int``."""
    if "track_total_hits" in params:
        first_stage["track_total_hits"] = _boolean_or_count("track_total_hits", params["track_total_hits"])
    if flag(params, "rest_total_hits_as_int"):  # a number answers an exact count only, as in Elasticsearch
        tracked = first_stage.setdefault("track_total_hits", True)
        if not isinstance(tracked, bool):
            raise BadSearchRequest(
                f"[rest_total_hits_as_int] cannot be used if the tracking of total hits is not "
                f"accurate, got {excerpt(tracked)}; send track_total_hits true or false"
            )


def parse_count(params: Mapping[str, str], body: Any, max_words: int = DEFAULT_MAX_WORDS) -> dict[str, Any]:
    """The first-stage body of a ``_count``: its ``query`` (the body's, or ``q=``'s), checked and bounded as a
    search's is; ``{}`` counts every document."""
    body = _body_object("/_count", params, COUNT_PARAMETERS, body, '{"query": {"match": {"text": "green tea"}}}')
    check_url_options(params)
    extra = next((key for key in body if key != "query"), None)
    if extra is not None:
        raise BadSearchRequest(f"request does not support [{clipped(str(extra))}]: a _count body holds a query only")
    if "q" in params and "query" in body:
        raise BadSearchRequest("the query is given twice, as q= in the URL and as query in the body; send one of them")
    query = url_query(params) if "q" in params else body.get("query")
    if query is None:
        return {}
    if not isinstance(query, dict):
        raise BadSearchRequest('[query] must be an object with one clause, as in {"match": {"text": "green tea"}}')
    _check_text_size({"query": query}, max_words)
    return {"query": query}


def check_parameters(route: str, params: Mapping[str, str], read: tuple[str, ...]) -> None:
    """A 400 naming the first of the URL's ``params`` that ``route`` does not read, and those it does."""
    unknown = next((name for name in params if name not in read), None)
    if unknown is not None:
        raise BadSearchRequest(
            f"request [{route}] contains unrecognized parameter: [{clipped(unknown)}]; it reads {', '.join(read)}"
        )


def _body_object(
    route: str, params: Mapping[str, str], read: tuple[str, ...], body: Any, example: str
) -> dict[str, Any]:
    """``body`` as an object (``{}`` when there is none), once ``params`` are known to hold only names ``read``."""
    check_parameters(route, params, read)
    return body_object(body, example)


def body_object(body: Any, example: str) -> dict[str, Any]:
    """A decoded JSON body as an object, ``{}`` when there is none; a 400 showing ``example`` when it is no object."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise BadSearchRequest(f"the request body is a JSON {type(body).__name__}, not an object; send {example}")
    return body


def url_query(params: Mapping[str, str]) -> dict[str, Any]:
    """``q=`` as Elasticsearch reads it: Lucene's syntax on ``df`` (default ``text``); plain words a ``match``."""
    text, field_name = params["q"], params.get("df", SEARCHED_FIELD)
    operator = params.get("default_operator", "OR").upper()
    if operator not in ("OR", "AND"):
        raise BadSearchRequest(f"[default_operator] must be OR or AND, got {excerpt(params['default_operator'])}")
    if len(text) > MAX_WINDOW * CHARS_PER_WORD:
        raise BadSearchRequest(f"the query is {len(text)} characters long; shorten it")
    if _LUCENE_SYNTAX.search(text) is None:  # plain words: the keyword search
        match: dict[str, Any] = {"query": text}
        if operator == "AND":
            match["operator"] = "and"
        return {"match": {field_name: match}}
    return {"query_string": {"query": text, "default_field": field_name, "default_operator": operator}}


def url_source(params: Mapping[str, str]) -> Any:
    """``_source``, ``_source_includes`` and ``_source_excludes`` URL parameters as a body's ``_source``."""
    if "_source" in params and params["_source"].lower() in ("false", "true"):
        return params["_source"].lower() == "true"
    includes = [name for name in params.get("_source_includes", params.get("_source", "")).split(",") if name]
    excludes = [name for name in params.get("_source_excludes", "").split(",") if name]
    if not includes and not excludes:
        return None
    return {"includes": includes, "excludes": excludes}


def _boolean_or_count(name: str, value: str) -> bool | int:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return _count(name, value, limit=2**31 - 1)


def _skipped(params: Mapping[str, str], body: Mapping[str, Any]) -> Skipped | None:
    """Why the request is answered in Elasticsearch's order rather than reranked (None: it is reranked)."""
    sort = params.get("sort", body.get("sort"))
    if sort is not None and not by_score(sort):
        return Skipped(
            SkipReason.SORT,
            f"the request sorts by {excerpt(sort)}, not by _score; like Elasticsearch's rescore, reranking "
            "applies to a score order only, so the hits are in the order the sort gives",
        )
    if "scroll" in params:
        return Skipped(SkipReason.SCROLL, "the request scrolls; scrolled pages are Elasticsearch's order, not reranked")
    if "pit" in body:
        return Skipped(
            SkipReason.POINT_IN_TIME,
            "the request pages a point in time; such pages are Elasticsearch's order, not reranked",
        )
    if "search_after" in body:
        return Skipped(
            SkipReason.SEARCH_AFTER,
            "the request pages with search_after; such pages are in the sort's order (by _score: the first "
            "stage's), not reranked",
        )
    return None


def _esrr_options(ext: Any, max_window: int) -> dict[str, Any]:
    """``ext.esrr`` read and checked (``ext`` holds no other section: no other plugin answers here)."""
    if ext is None:
        return {}
    if not isinstance(ext, dict) or set(ext) - {"esrr"}:
        raise BadSearchRequest(
            f"[ext] holds only the section [esrr] here, got {excerpt(ext)}; send "
            '{"ext": {"esrr": {"window_size": 100, "score_mode": "total"}}}'
        )
    options = ext.get("esrr") or {}
    if not isinstance(options, dict):
        raise BadSearchRequest(f"[ext.esrr] must be an object, got {excerpt(options)}")
    unknown = next((key for key in options if key not in EXT_OPTIONS), None)
    if unknown is not None:
        raise BadSearchRequest(
            f"unknown option [{clipped(str(unknown))}] in [ext.esrr]; it reads {', '.join(EXT_OPTIONS)}"
        )
    read: dict[str, Any] = {}
    if "window_size" in options:
        read["window_size"] = _window_size(options["window_size"], max_window)
    if "query_text" in options:
        if not isinstance(options["query_text"], str):
            raise BadSearchRequest(f"[ext.esrr.query_text] must be a string, got {excerpt(options['query_text'])}")
        read["query_text"] = options["query_text"]
    read.update(_combination(options))
    if "explain" in options:
        if not isinstance(options["explain"], bool):
            raise BadSearchRequest(f"[ext.esrr.explain] must be true or false, got {excerpt(options['explain'])}")
        read["explain"] = options["explain"]
    return read


def _window_size(window: Any, max_window: int) -> int:
    """``ext.esrr.window_size``, a whole number from 0 to ``max_window``."""
    if isinstance(window, bool) or not isinstance(window, int) or not 0 <= window <= max_window:
        raise BadSearchRequest(
            f"[ext.esrr.window_size] must be a whole number from 0 to {max_window} (the "
            f"gateway's window, ESRR_GATEWAY_WINDOW), got {excerpt(window)}"
        )
    return window


def _combination(options: Mapping[str, Any]) -> dict[str, Any]:
    """``ext.esrr.score_mode``, ``query_weight`` and ``rerank_weight`` where given: a mode of ``SCORE_MODES``,
    finite numbers."""
    read: dict[str, Any] = {}
    if "score_mode" in options:
        if options["score_mode"] not in SCORE_MODES:
            raise BadSearchRequest(
                f"[ext.esrr.score_mode] must be one of {', '.join(SCORE_MODES)}, got {excerpt(options['score_mode'])}"
            )
        read["score_mode"] = options["score_mode"]
    for name in ("query_weight", "rerank_weight"):
        if name in options:
            value = options[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise BadSearchRequest(f"[ext.esrr.{name}] must be a number, got {excerpt(value)}")
            read[name] = float(value)
    return read


def _check_text_size(body: Mapping[str, Any], max_words: int) -> None:
    """``BadSearchRequest`` when the strings of ``query`` and ``post_filter`` hold more than the characters of
    ``max_words`` words, or nest deeper than Elasticsearch reads; counted before anything parses them."""
    max_chars = max_words * CHARS_PER_WORD
    total = 0
    stack = [(body.get("query"), 0), (body.get("post_filter"), 0)]
    while stack:
        value, depth = stack.pop()
        if depth > 4 * MAX_DEPTH:
            raise BadSearchRequest(f"the query nests more than {4 * MAX_DEPTH} levels deep; flatten it")
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
        if total > max_chars:
            # Counting stops here: the text is this long or longer.
            raise BadSearchRequest(
                f"the query's text is {total} characters long (at least); this gateway searches "
                f"at most {max_words} words ({max_chars} characters) per query "
                "(ESRR_GATEWAY_MAX_QUERY_WORDS); shorten it"
            )


def _check_length(text: str, max_words: int) -> None:
    """``BadSearchRequest`` unless ``text`` has at most ``max_words`` words; long text is refused before tokenizing."""
    max_chars = max_words * CHARS_PER_WORD
    fix = (
        f"this gateway searches at most {max_words} words ({max_chars} characters) per query "
        "(ESRR_GATEWAY_MAX_QUERY_WORDS); shorten it"
    )
    if len(text) > max_chars:
        raise BadSearchRequest(f"the query is {len(text)} characters long; {fix}")
    words = len(tokenize(text))
    if words > max_words:
        raise BadSearchRequest(f"the query has {words} words; {fix}")


def _count(name: str, value: Any, limit: int = MAX_K) -> int:
    """``size`` or ``from`` as a whole number in [0, MAX_K] (URL parameters arrive as strings)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,10}", value.strip()):  # ASCII digits, int() takes
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadSearchRequest(f"[{name}] must be a whole number of at least 0, got {excerpt(value)}")
    if value > limit:
        raise BadSearchRequest(
            f"[{name}] is {excerpt(value)}; this gateway pages through at most {MAX_K} hits per "
            "query (Elasticsearch's index.max_result_window)"
        )
    return value
