"""Elasticsearch's ``highlight`` and ``_source`` filtering, for a backend that reads stored documents itself (pure).

Written here because tantivy's snippet generator highlights the indexed field, which in
the embedded index is the pre-tokenized lower-case text, not the title and abstract a
person reads. ``highlight`` wraps each run of the stored text whose tokens (by
``es_rerank.text.tokenize``, the index's own tokenizer) are query words in
``pre_tags``/``post_tags`` (``<em>``/``</em>``); with ``"encoder": "html"`` the rest is
HTML-escaped, as Elasticsearch does. Fragments are cut at word boundaries near
``fragment_size`` characters (100), at most ``number_of_fragments`` (5) per field,
in text order; ``number_of_fragments: 0`` returns the whole field; a field without a
query word is left out (unless ``no_match_size``). Only title and abstract are
highlighted (the stored text); other options are refused.

A field named twice (in the list form, or by two patterns such as ``abs*`` and ``abstract``)
is highlighted once with the options named last, as Elasticsearch keeps one highlighter per
field: a body listing ``abstract`` 1,000 times cost 136 s of CPU at size 1,000 when each
was highlighted.

``filter_source`` applies ``_source`` as Elasticsearch reads it: false, a field name or
pattern, a list of them, or ``{"includes", "excludes"}`` (``*`` wildcards). The patterns are
compiled once per request (``SourceFilter``), and each field name is matched once, not once
per hit: 2,000 patterns at size 1,000 cost 8 s of CPU when every hit matched every pattern.
"""

from __future__ import annotations

import fnmatch
import heapq
import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from es_rerank.backends.base import QueryRefused
from es_rerank.text import token_spans

HIGHLIGHTABLE = ("title", "abstract")
FIELD_OPTIONS = (
    "fragment_size",
    "number_of_fragments",
    "no_match_size",
    "pre_tags",
    "post_tags",
    "type",
    "order",
    "encoder",
    "require_field_match",
)
TOP_OPTIONS = ("fields", *FIELD_OPTIONS, "tags_schema")
ON_ELASTICSEARCH = "served by the Elasticsearch backend (ESRR_BACKEND=elasticsearch)"


@dataclass(frozen=True)
class FieldHighlight:
    """How one field is highlighted."""

    name: str
    fragment_size: int = 100
    number_of_fragments: int = 5
    no_match_size: int = 0
    pre_tag: str = "<em>"
    post_tag: str = "</em>"
    html: bool = False


def read_highlight(spec: Any) -> tuple[FieldHighlight, ...]:
    """The fields a ``highlight`` object asks for, or ``QueryRefused`` naming what is not served."""
    if not isinstance(spec, dict):
        raise QueryRefused(
            f'[highlight] must be an object such as {{"fields": {{"abstract": {{}}}}}}, got {type(spec).__name__}'
        )
    _check_options("highlight", spec, TOP_OPTIONS)
    fields = spec.get("fields")
    if isinstance(fields, list):  # Elasticsearch also takes [{"title": {}}, {"abstract": {}}]
        pairs = [pair for item in fields if isinstance(item, dict) for pair in item.items()]
    elif isinstance(fields, dict):
        pairs = list(fields.items())
    else:
        raise QueryRefused('[highlight] needs [fields], e.g. {"fields": {"title": {}, "abstract": {}}}')
    read: dict[str, FieldHighlight] = {}  # one per field, as Elasticsearch keeps one highlighter per field
    for name, options in pairs:
        names = [field for field in HIGHLIGHTABLE if fnmatch.fnmatchcase(field, name)]
        if not names:
            raise QueryRefused(
                f"[highlight] of field [{str(name)[:40]}] is not served by the embedded backend, "
                f"which highlights {', '.join(HIGHLIGHTABLE)}; it is {ON_ELASTICSEARCH}"
            )
        if not isinstance(options, dict):
            raise QueryRefused(f"[highlight] options of [{name}] must be an object")
        _check_options(f"highlight.fields.{name}", options, FIELD_OPTIONS)
        merged = {**spec, **options}
        read.update(
            (
                field,
                FieldHighlight(
                    field,
                    _count(merged, "fragment_size", 100, 18),
                    _count(merged, "number_of_fragments", 5, 0),
                    _count(merged, "no_match_size", 0, 0),
                    _tag(merged, "pre_tags", "<em>"),
                    _tag(merged, "post_tags", "</em>"),
                    _encoder(merged),
                ),
            )
            for field in names
        )
    return tuple(read.values())


def _check_options(where: str, options: Mapping, allowed: tuple[str, ...]) -> None:
    unknown = next((key for key in options if key not in allowed), None)
    if unknown is not None:
        raise QueryRefused(
            f"[{where}] option [{str(unknown)[:40]}] is not served by the embedded backend (it reads "
            f"{', '.join(allowed)}); it is {ON_ELASTICSEARCH}"
        )
    if options.get("type", "unified") not in ("unified", "plain", "fvh"):
        raise QueryRefused(f"[{where}] type must be unified, plain or fvh")
    if options.get("tags_schema") not in (None, "styled") or options.get("order", "none") not in ("none", "score"):
        raise QueryRefused(
            f"[{where}] tags_schema / order values are not served by the embedded backend; they are {ON_ELASTICSEARCH}"
        )


def _count(options: Mapping, name: str, default: int, least: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 10_000:
        raise QueryRefused(f"[highlight] {name} must be a whole number from {least} to 10000, got {str(value)[:40]}")
    return value


def _tag(options: Mapping, name: str, default: str) -> str:
    tags = options.get(name, [default])
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list) or not tags or not all(isinstance(tag, str) and len(tag) <= 100 for tag in tags):
        raise QueryRefused(f'[highlight] {name} must be a list of short strings, as ["{default}"]')
    return tags[0]


def _encoder(options: Mapping) -> bool:
    encoder = options.get("encoder", "default")
    if encoder not in ("default", "html"):
        raise QueryRefused(f'[highlight] encoder must be "default" or "html", got {str(encoder)[:40]}')
    return encoder == "html"


def highlight(text: str, words: frozenset[str], field: FieldHighlight) -> list[str]:
    """The fragments of ``text`` with each run holding a query word wrapped in the field's tags (none: no match)."""
    spans = _word_spans(text, words)
    pending = next(spans, None)
    if pending is None:
        if field.no_match_size:
            return [_render(text, 0, _word_end(text, field.no_match_size), [], field)]
        return []
    if field.number_of_fragments == 0:
        return [_render(text, 0, len(text), [pending, *spans], field)]
    fragments: list[str] = []
    covered = 0
    # The spans come in text order and are read only as far as the last fragment shown needs.
    while pending is not None and len(fragments) < field.number_of_fragments:
        begin = max(_word_start(text, pending[0] - field.fragment_size // 4), covered)
        end = _word_end(text, begin + field.fragment_size)
        inside = [pending] if pending[1] <= end else []  # the span that opened the fragment is read either way
        pending = next(spans, None)
        while pending is not None and pending[0] < end:  # a span across the fragment's end is left out
            if pending[1] <= end:
                inside.append(pending)
            pending = next(spans, None)
        fragments.append(_render(text, begin, end, inside, field))
        covered = end
    return fragments


def _word_spans(text: str, words: frozenset[str]) -> Iterator[tuple[int, int]]:
    """Where ``text`` holds a token among ``words``, in text order: (start, end) of each run of the text that token
    came from.

    Only the space-delimited chunks around a word's occurrences as a substring are tokenized
    (a whole abstract tokenized for every hit cost 0.4 ms), as far as the caller reads; ``text``
    is tokenized whole where lower-casing changes its length (offsets would shift). A token
    written with a space inside ("95 %", "$ 20") may be left unmarked (13 of NFCorpus's 3,633
    documents, with such words asked).
    """
    lowered = text.lower()
    if len(lowered) != len(text):
        yield from ((start, end) for start, end, tokens in token_spans(text) if not words.isdisjoint(tokens))
        return
    # Each word's next occurrence, nearest first: a chunk is tokenized once, and each word's search goes on
    # from the end of the chunk last read.
    needles = {word.strip("$%") or word for word in words}  # a range gives "10%" from "10-58%"
    upcoming = [(at, needle) for needle in needles if (at := lowered.find(needle)) >= 0]
    heapq.heapify(upcoming)
    read_to = 0
    while upcoming:
        at, needle = upcoming[0]
        if at < read_to:
            at = lowered.find(needle, read_to)
            if at < 0:
                heapq.heappop(upcoming)
            else:
                heapq.heapreplace(upcoming, (at, needle))
            continue
        stop = lowered.find(" ", at + len(needle))
        begin, read_to = lowered.rfind(" ", 0, at) + 1, len(text) if stop < 0 else stop
        yield from (
            (begin + start, begin + end)
            for start, end, tokens in token_spans(text[begin:read_to])
            if not words.isdisjoint(tokens)
        )


def _word_start(text: str, at: int) -> int:
    """``at`` moved back to the start of the word it falls in (0 when before the text)."""
    if at <= 0:
        return 0
    space = text.rfind(" ", 0, at)
    return space + 1


def _word_end(text: str, at: int) -> int:
    """``at`` moved on to the end of the word it falls in."""
    if at >= len(text):
        return len(text)
    space = text.find(" ", at)
    return len(text) if space < 0 else space


def _render(text: str, begin: int, end: int, spans: list[tuple[int, int]], field: FieldHighlight) -> str:
    escape = html.escape if field.html else (lambda part: part)
    parts, at = [], begin
    for start, stop in spans:
        parts += [escape(text[at:start]), field.pre_tag, escape(text[start:stop]), field.post_tag]
        at = stop
    parts.append(escape(text[at:end]))
    return "".join(parts).strip()


class _Patterns(NamedTuple):
    includes: tuple[str, ...]
    excludes: tuple[str, ...]


class SourceFilter(_Patterns):
    """``_source`` includes and excludes (``*`` wildcards), compiled once and each field name matched once."""

    @property
    def patterns(self) -> int:
        """How many patterns the filter holds (``ESRR_GATEWAY_MAX_SOURCE_PATTERNS`` bounds them on ``_search``)."""
        return len(self.includes) + len(self.excludes)

    def keeps(self, name: str) -> bool:
        """Whether the field ``name`` is shown: named by the includes (all when empty) and not by the excludes."""
        kept = self._seen.get(name)
        if kept is None:
            includes, excludes = self._compiled
            kept = (not self.includes or includes.match(name)) and not excludes.match(name)
            if len(self._seen) < 4096:  # a source's top-level names are few; bound the memo all the same
                self._seen[name] = kept
        return kept

    @cached_property
    def _compiled(self) -> tuple[_Compiled, _Compiled]:
        return _compile(self.includes), _compile(self.excludes)

    @cached_property
    def _seen(self) -> dict[str, bool]:
        return {}


def read_source_filter(spec: Any) -> SourceFilter | None:
    """``_source`` as (includes, excludes) patterns; None when no source is wanted (``false``)."""
    if spec is None or spec is True:
        return SourceFilter((), ())
    if spec is False:
        return None
    if isinstance(spec, str):
        return SourceFilter((spec,), ())
    if isinstance(spec, list) and all(isinstance(item, str) for item in spec):
        return SourceFilter(tuple(spec), ())
    # exclude_vectors (Elasticsearch 9; elasticsearch-dsl 9 sends false): the index holds no vector field, so
    # either value leaves the _source as it is.
    if (
        isinstance(spec, dict)
        and isinstance(spec.get("exclude_vectors", False), bool)
        and set(spec) <= {"includes", "excludes", "include", "exclude", "exclude_vectors"}
    ):
        includes = spec.get("includes", spec.get("include", []))
        excludes = spec.get("excludes", spec.get("exclude", []))
        lists: list[Any] = [[value] if isinstance(value, str) else value for value in (includes, excludes)]
        if all(isinstance(value, list) and all(isinstance(item, str) for item in value) for value in lists):
            return SourceFilter(tuple(lists[0]), tuple(lists[1]))
    raise QueryRefused(
        "[_source] must be true, false, a field name or pattern, a list of them, or "
        '{"includes": [...], "excludes": [...], "exclude_vectors": true|false}'
    )


def source_patterns(spec: Any) -> int:
    """How many patterns a ``_source`` value lists, counted before it is read (0 for true, false or a malformed one)."""
    if isinstance(spec, str):
        return 1
    if isinstance(spec, list):
        return len(spec)
    if isinstance(spec, dict):
        return sum(source_patterns(value) for value in spec.values())
    return 0


SEARCHED_TEXT = "text"  # the field a match on the searched text names; stored as title and abstract


def with_searched_text(source: Mapping[str, Any], patterns: SourceFilter) -> Mapping[str, Any]:
    """``source`` with the searched ``text`` (the title, a blank line, the abstract) when ``_source`` names ``text``
    among its includes: RAG libraries read the field they searched from ``_source`` (LangChain's
    ``ElasticsearchStore`` asks for ``["text", "metadata"]``), and a default ``_source`` stays as stored."""
    if SEARCHED_TEXT in source or SEARCHED_TEXT not in patterns.includes:
        return source
    parts = [str(source.get(name) or "") for name in ("title", "abstract")]
    return {**source, SEARCHED_TEXT: "\n\n".join(part for part in parts if part)}


def filter_source(source: Mapping[str, Any], patterns: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[str, Any]:
    """The top-level fields of ``source`` that the includes (all when empty) and not the excludes name."""
    if not patterns[0] and not patterns[1]:
        return dict(source)
    wanted = patterns if isinstance(patterns, SourceFilter) else SourceFilter(*patterns)
    return {name: value for name, value in source.items() if wanted.keeps(name)}


@dataclass(frozen=True)
class _Compiled:
    """Patterns split once: exact names in a set, each wildcard pattern as its literal parts."""

    names: frozenset[str]
    wildcards: tuple[tuple[str, ...], ...]

    def match(self, name: str) -> bool:
        return name in self.names or any(_star_match(name, parts) for parts in self.wildcards)


def _compile(patterns: tuple[str, ...]) -> _Compiled:
    names = frozenset(pattern for pattern in patterns if "*" not in pattern)
    wildcards = {tuple(pattern.split("*")) for pattern in patterns if "*" in pattern}
    return _Compiled(names, tuple(wildcards))


def _star_match(name: str, parts: tuple[str, ...]) -> bool:
    """Whether ``name`` matches the pattern whose ``*``-separated literal ``parts`` these are (Elasticsearch's
    simple match: ``*`` is any run of characters, nothing else is special)."""
    first, *middle, last = parts
    if len(name) < len(first) + len(last) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for part in middle:
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True
