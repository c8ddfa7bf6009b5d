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

``filter_source`` applies ``_source`` as Elasticsearch reads it: false, a field name or
pattern, a list of them, or ``{"includes", "excludes"}`` (``*`` wildcards).
"""

from __future__ import annotations

import fnmatch
import html
from dataclasses import dataclass
from typing import Any, Mapping

from es_rerank.backends.base import QueryRefused
from es_rerank.text import token_spans

HIGHLIGHTABLE = ("title", "abstract")
FIELD_OPTIONS = ("fragment_size", "number_of_fragments", "no_match_size", "pre_tags", "post_tags", "type",
                 "order", "encoder", "require_field_match")
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
        raise QueryRefused(f"[highlight] must be an object such as {{\"fields\": {{\"abstract\": {{}}}}}}, got "
                           f"{type(spec).__name__}")
    _check_options("highlight", spec, TOP_OPTIONS)
    fields = spec.get("fields")
    if isinstance(fields, list):  # Elasticsearch also takes [{"title": {}}, {"abstract": {}}]
        pairs = [pair for item in fields if isinstance(item, dict) for pair in item.items()]
    elif isinstance(fields, dict):
        pairs = list(fields.items())
    else:
        raise QueryRefused("[highlight] needs [fields], e.g. {\"fields\": {\"title\": {}, \"abstract\": {}}}")
    read = []
    for name, options in pairs:
        names = [field for field in HIGHLIGHTABLE if fnmatch.fnmatchcase(field, name)]
        if not names:
            raise QueryRefused(f"[highlight] of field [{str(name)[:40]}] is not served by the embedded backend, "
                               f"which highlights {', '.join(HIGHLIGHTABLE)}; it is {ON_ELASTICSEARCH}")
        if not isinstance(options, dict):
            raise QueryRefused(f"[highlight] options of [{name}] must be an object")
        _check_options(f"highlight.fields.{name}", options, FIELD_OPTIONS)
        merged = {**spec, **options}
        read.extend(FieldHighlight(field, _count(merged, "fragment_size", 100, 18),
                                   _count(merged, "number_of_fragments", 5, 0), _count(merged, "no_match_size", 0, 0),
                                   _tag(merged, "pre_tags", "<em>"), _tag(merged, "post_tags", "</em>"),
                                   _encoder(merged)) for field in names)
    return tuple(read)


def _check_options(where: str, options: Mapping, allowed: tuple[str, ...]) -> None:
    unknown = next((key for key in options if key not in allowed), None)
    if unknown is not None:
        raise QueryRefused(f"[{where}] option [{str(unknown)[:40]}] is not served by the embedded backend (it reads "
                           f"{', '.join(allowed)}); it is {ON_ELASTICSEARCH}")
    if options.get("type", "unified") not in ("unified", "plain", "fvh"):
        raise QueryRefused(f"[{where}] type must be unified, plain or fvh")
    if options.get("tags_schema") not in (None, "styled") or options.get("order", "none") not in ("none", "score"):
        raise QueryRefused(f"[{where}] tags_schema / order values are not served by the embedded backend; they are "
                           f"{ON_ELASTICSEARCH}")


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
        raise QueryRefused(f"[highlight] {name} must be a list of short strings, as [\"{default}\"]")
    return tags[0]


def _encoder(options: Mapping) -> bool:
    encoder = options.get("encoder", "default")
    if encoder not in ("default", "html"):
        raise QueryRefused(f"[highlight] encoder must be \"default\" or \"html\", got {str(encoder)[:40]}")
    return encoder == "html"


def highlight(text: str, words: frozenset[str], field: FieldHighlight) -> list[str]:
    """The fragments of ``text`` with each run holding a query word wrapped in the field's tags (none: no match)."""
    spans = _word_spans(text, words)
    if not spans:
        if field.no_match_size:
            return [_render(text, 0, _word_end(text, field.no_match_size), [], field)]
        return []
    if field.number_of_fragments == 0:
        return [_render(text, 0, len(text), spans, field)]
    fragments: list[str] = []
    covered = 0
    for start, _ in spans:
        if start < covered:
            continue
        begin = max(_word_start(text, start - field.fragment_size // 4), covered)
        end = _word_end(text, begin + field.fragment_size)
        fragments.append(_render(text, begin, end, [s for s in spans if begin <= s[0] and s[1] <= end], field))
        covered = end
        if len(fragments) == field.number_of_fragments:
            break
    return fragments


def _word_spans(text: str, words: frozenset[str]) -> list[tuple[int, int]]:
    """Where ``text`` holds a token among ``words``: (start, end) of each run of the text that token came from.

    Only the space-delimited chunks around a word's occurrences as a substring are tokenized
    (a whole abstract tokenized for every hit cost 0.4 ms); ``text`` is tokenized whole where
    lower-casing changes its length (offsets would shift). A token written with a space inside
    ("95 %", "$ 20") may be left unmarked (13 of NFCorpus's 3,633 documents, with such words asked).
    """
    lowered = text.lower()
    if len(lowered) != len(text):
        return [(start, end) for start, end, tokens in token_spans(text) if not words.isdisjoint(tokens)]
    chunks = set()
    for word in words:
        needle = word.strip("$%") or word  # a range gives "10%" from "10-58%"
        at = lowered.find(needle)
        while at >= 0:
            end = lowered.find(" ", at + len(needle))
            chunks.add((lowered.rfind(" ", 0, at) + 1, len(text) if end < 0 else end))
            at = lowered.find(needle, at + len(needle))
    return [(begin + start, begin + end) for begin, stop in sorted(chunks)
            for start, end, tokens in token_spans(text[begin:stop]) if not words.isdisjoint(tokens)]


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


def read_source_filter(spec: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``_source`` as (includes, excludes) patterns; None when no source is wanted (``false``)."""
    if spec is None or spec is True:
        return (), ()
    if spec is False:
        return None
    if isinstance(spec, str):
        return (spec,), ()
    if isinstance(spec, list) and all(isinstance(item, str) for item in spec):
        return tuple(spec), ()
    if isinstance(spec, dict) and set(spec) <= {"includes", "excludes", "include", "exclude"}:
        includes = spec.get("includes", spec.get("include", []))
        excludes = spec.get("excludes", spec.get("exclude", []))
        includes, excludes = ([value] if isinstance(value, str) else value for value in (includes, excludes))
        if all(isinstance(value, list) and all(isinstance(item, str) for item in value)
               for value in (includes, excludes)):
            return tuple(includes), tuple(excludes)
    raise QueryRefused("[_source] must be true, false, a field name or pattern, a list of them, or "
                       "{\"includes\": [...], \"excludes\": [...]}")


def filter_source(source: Mapping[str, Any], patterns: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[str, Any]:
    """The top-level fields of ``source`` that the includes (all when empty) and not the excludes name."""
    includes, excludes = patterns
    return {name: value for name, value in source.items()
            if (not includes or any(fnmatch.fnmatchcase(name, pattern) for pattern in includes))
            and not any(fnmatch.fnmatchcase(name, pattern) for pattern in excludes)}
