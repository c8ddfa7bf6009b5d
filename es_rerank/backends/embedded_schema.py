"""The embedded index's layout: the tantivy schema, one corpus record as a tantivy document, and the mapping
``_mapping`` reports for it in Elasticsearch's terms.

Documents are indexed pre-tokenized by ``es_rerank.text.tokenize`` (joined by spaces and
split again by tantivy's whitespace tokenizer), so BM25 sees exactly our tokens. ``text``
(title and abstract together) and ``title`` and ``abstract`` each alone are indexed with
positions (phrases), the metadata filters are raw-tokenized keyword fields
and an integer ``year`` (indexed and fast: ranges and aggregations), and each document's
whole ``_source`` is one stored JSON field, read only for the page shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import tantivy

from es_rerank.backends.analysis import ANALYZER
from es_rerank.backends.query_tree import AGGREGATABLE, TEXT_FIELDS

TOKENIZER = "esrr_pretokenized"
KEYWORD_FIELDS = ("journal", "mesh", "publication_types", "doi")  # filters, beside doc_id
ALONE_FIELDS = ("title", "abstract")  # searched alone too, in versions built since they are indexed (schema end)
_SEARCHED = {"type": "text", "index_options": "positions", "analyzer": ANALYZER}


def mapping_properties(searched: tuple[str, ...]) -> dict[str, Any]:
    """What an index of ``searched`` text fields serves, in Elasticsearch's terms: ``text`` (title and abstract)
    and, where indexed, ``title`` and ``abstract`` alone are searched, the keywords and ``year`` filter, and every
    field of a document's ``_source`` is returned whether or not it is indexed."""
    return {
        "doc_id": {"type": "keyword"},
        "text": dict(_SEARCHED),
        **{
            name: {**_SEARCHED, "copy_to": "text"}
            if name in searched
            else {"type": "text", "index": False, "copy_to": "text"}
            for name in ALONE_FIELDS
        },
        **{name: {"type": "keyword"} for name in KEYWORD_FIELDS},
        "year": {"type": "integer"},
        "authors": {"type": "keyword", "index": False},
        "metadata": {"type": "object", "enabled": False},
    }


def searched_fields(schema: tantivy.Schema) -> tuple[str, ...]:
    """The text fields an index's own ``schema`` holds: ``text`` always, ``title`` and ``abstract`` in versions
    built since they are indexed alone."""
    held = []
    for name in TEXT_FIELDS:
        try:
            tantivy.Query.term_query(schema, name, "")
        except ValueError:  # "Field `title` is not defined in the schema": an older build
            continue
        held.append(name)
    return tuple(held)


def whitespace_analyzer() -> tantivy.TextAnalyzer:
    """Tantivy analyzer that splits our pre-tokenized text on spaces only."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


def index_schema() -> tantivy.Schema:
    """The BM25 field ``text`` (title + abstract tokens, with positions), the stats row, the metadata filters, the
    stored ``_source``, and ``title`` and ``abstract`` alone (last: an index built before them keeps its field ids)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False, tokenizer_name=TOKENIZER, index_option="position")
    builder.add_integer_field("row", stored=False, indexed=False, fast=True)
    builder.add_text_field("doc_id", stored=False, tokenizer_name="raw", index_option="basic")
    for name in KEYWORD_FIELDS:
        builder.add_text_field(
            name, stored=False, fast=name in AGGREGATABLE, tokenizer_name="raw", index_option="basic"
        )
    builder.add_integer_field("year", stored=False, indexed=True, fast=True)
    builder.add_bytes_field("source", stored=True, indexed=False, fast=False)
    for name in ALONE_FIELDS:
        builder.add_text_field(name, stored=False, tokenizer_name=TOKENIZER, index_option="position")
    return builder.build()


def index_document(row: int, text: str, source: Mapping[str, Any], title_length: int) -> tantivy.Document:
    """The tantivy document of one corpus record: its tokens (``text``, the first ``title_length`` of them the
    title's), statistics row, filters and ``_source``."""
    document = tantivy.Document(
        text=text, row=row, doc_id=source["doc_id"], source=json.dumps(source, ensure_ascii=False).encode("utf-8")
    )
    tokens = text.split(" ") if text else []
    for name, part in zip(ALONE_FIELDS, (tokens[:title_length], tokens[title_length:])):
        if part:
            document.add_text(name, " ".join(part))
    if isinstance(source.get("journal"), str):  # "" too: Elasticsearch indexes an empty keyword, and a term finds it
        document.add_text("journal", source["journal"])
    for name in ("mesh", "publication_types"):
        for value in source.get(name, ()):
            document.add_text(name, value)
    if source.get("doi"):
        document.add_text("doi", source["doi"])
    if source.get("year") is not None:
        document.add_integer("year", int(source["year"]))
    return document
