"""``title`` and ``abstract`` searched alone on the embedded backend: scored by BM25 over that field's own statistics
(as Elasticsearch scores a field), reported as indexed by ``_mapping``; a version built before they were indexed
alone still serves ``text`` and refuses them with the rebuild that adds them."""

from __future__ import annotations

import math

import pytest

from es_rerank.backends import embedded_schema
from es_rerank.backends.base import QueryRefused
from es_rerank.backends.embedded import EmbeddedBackend
from index_setup.embedded_index import build_embedded_index
from tests.backends.test_query_semantics import CORPUS, tokens


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    root = tmp_path_factory.mktemp("fields")
    build_embedded_index(CORPUS, root, progress=False)
    return EmbeddedBackend.open_current(root)


def bm25(field: list[list[str]], doc: list[str], word: str) -> float:
    """Lucene's BM25 (k1 1.2, b 0.75) of ``word`` in ``doc`` among the documents' ``field`` token lists."""
    df = sum(word in tokens_ for tokens_ in field)
    idf = math.log(1 + (len(field) - df + 0.5) / (df + 0.5))
    mean = sum(len(tokens_) for tokens_ in field) / len(field)
    tf = doc.count(word)
    return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(doc) / mean))


@pytest.mark.parametrize("field", ["title", "abstract", "text"])
def test_a_field_alone_is_scored_by_its_own_statistics(embedded, field):
    of = {
        "title": lambda d: d.title.split(),
        "abstract": lambda d: d.abstract.split(),
        "text": tokens,
    }[field]
    column = [of(doc) for doc in CORPUS]
    hits = embedded.first_stage(embedded.prepare({"query": {"match": {field: "coffee"}}}), 100).hits
    by_id = {doc.doc_id: of(doc) for doc in CORPUS}
    assert {hit.doc_id for hit in hits} == {doc_id for doc_id, words in by_id.items() if "coffee" in words}
    for hit in hits:  # title lengths are few tokens: tantivy's field norms hold them exactly
        assert hit.score == pytest.approx(bm25(column, by_id[hit.doc_id], "coffee"), rel=1e-3)


def test_the_mapping_reports_title_and_abstract_as_searched(embedded):
    properties = embedded.description()["mappings"]["properties"]
    for name in ("title", "abstract"):
        assert properties[name]["index_options"] == "positions" and properties[name].get("index", True) is True
    assert embedded.searched == ("text", "title", "abstract")


def test_a_version_built_before_keeps_serving_text_and_names_the_rebuild(tmp_path, monkeypatch):
    # The layout before title and abstract were indexed alone: the same schema without its last two fields.
    monkeypatch.setattr(embedded_schema, "ALONE_FIELDS", ())
    build_embedded_index(CORPUS, tmp_path, progress=False)
    monkeypatch.undo()
    old = EmbeddedBackend.open_current(tmp_path)
    assert old.searched == ("text",)
    served = old.first_stage(old.prepare({"query": {"match": {"text": "coffee"}}}), 100).hits
    assert {hit.doc_id for hit in served} == {doc.doc_id for doc in CORPUS if "coffee" in tokens(doc)}
    for query in (
        {"match": {"title": "coffee"}},
        {"bool": {"filter": [{"match_phrase": {"abstract": "green tea"}}]}},
        {"query_string": {"query": "title:coffee"}},
    ):
        with pytest.raises(QueryRefused, match=r"rebuild the index \(`esrr index build`\)"):
            old.prepare({"query": query})
    assert old.description()["mappings"]["properties"]["title"]["index"] is False
