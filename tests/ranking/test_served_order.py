"""The served order is the same after the BM25-path speed-ups of issue 25: NFCorpus dev queries, before and after.

"Before" is the code as it was (commit 67d301e), kept here as reference functions: the
embedded backend looked each hit's id up one by one (twice) and its data row by row,
the feedback negated the similarities into a copy, and the merge sorted the whole
window before the search cut it to the hits shown. The pipeline is the BM25-only one
that a fallback answer runs (BM25 top-500, candidate feedback with its vector cache);
each query's hits, scores and order must be equal, not close.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tantivy

from es_rerank.backends.base import Hit, check_k
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking import feedback, pipeline
from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams
from es_rerank.ranking.merge import RankedHit
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.settings import DEFAULT_NFCORPUS, CommonSettings
from es_rerank.text import tokenize
from index_setup.embedded_index import build_embedded_index
from index_setup.nfcorpus import NFCorpus
from index_setup.readers import read_beir_corpus

QUERIES = 120  # the first dev queries by id
WINDOW = 500

real_data = pytest.mark.skipif(not (DEFAULT_NFCORPUS / "queries.jsonl").is_file(),
                               reason=f"NFCorpus is not at {DEFAULT_NFCORPUS}")


def search_before(backend: EmbeddedBackend, query: str, k: int) -> list[Hit]:
    """``EmbeddedBackend.search`` as it was: ids and data looked up hit by hit."""
    check_k(k)
    stats, searcher = backend.stats, backend._searcher
    terms = sorted(set(tokenize(query)))
    if not terms:
        return []
    bm25 = tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(backend._schema, "text", t)) for t in terms])
    limit = min(k + 64, stats.n_docs)
    while True:
        scored = searcher.search(bm25, limit, count=False).hits
        if len(scored) < limit or limit >= stats.n_docs or scored[min(k, len(scored)) - 1][0] > scored[-1][0]:
            break
        limit *= 2
    rows = searcher.fast_field_values("row", [address for _, address in scored])
    doc_ids = stats.doc_ids
    ranked = sorted(zip(scored, rows), key=lambda item: (-item[0][0], doc_ids[item[1]]))[:k]
    return [Hit(doc_ids[row], float(score), searcher.doc(address)["title"][0], stats.doc_terms(row))
            for (score, address), row in ranked]


def nearest_hits_before(vectors, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``feedback.nearest_hits`` as it was."""
    n = vectors.shape[0]
    if n < 2:
        return np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0))
    similarity = (vectors @ vectors.T).toarray()
    np.fill_diagonal(similarity, -np.inf)
    k = min(k, n - 1)
    nearest = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
    return nearest, np.maximum(np.take_along_axis(similarity, nearest, axis=1), 0.0)


def merge_before(hits, scores, window: int, k: int) -> list[RankedHit]:
    """``merge`` as it was, then cut to ``k`` by the caller, as ``rank`` did."""
    if scores is None:
        return [RankedHit(h, h.score, False) for h in hits][:k]
    window = min(window, len(hits))
    head = sorted(zip(hits[:window], map(float, scores)), key=lambda pair: (-pair[1], pair[0].doc_id))
    return ([RankedHit(h, s, True) for h, s in head] + [RankedHit(h, h.score, False) for h in hits[window:]])[:k]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    root = tmp_path_factory.mktemp("nfcorpus-index") / "embedded"
    build_embedded_index(read_beir_corpus(DEFAULT_NFCORPUS / "corpus.jsonl.gz"), root, version="v1", progress=False)
    return EmbeddedBackend.open_current(root)


def served(backend: EmbeddedBackend) -> SearchPipeline:
    """The gateway's pipeline without the model (a fallback's stages): feedback with its vector cache."""
    settings = CommonSettings(home=Path("unused"))
    return SearchPipeline(backend, WINDOW, None, FeedbackParams.from_settings(settings),
                          feedback_vectors=DocumentVectorCache(settings.feedback_cache_documents))


def orderings(search: SearchPipeline, queries: list[str], k: int) -> list[list[tuple[str, float, str, bool]]]:
    return [[(item.hit.doc_id, item.score, item.hit.title, item.reranked) for item in search.rank(query, k).ranked]
            for query in queries]


@real_data
@pytest.mark.parametrize("k", [10, 600])  # a page of a search, and more than the window (the BM25 tail too)
def test_nfcorpus_orderings_are_those_of_the_code_before(backend, k, monkeypatch):
    queries = [text for _, text in sorted(NFCorpus.locate(DEFAULT_NFCORPUS).queries("dev").items())][:QUERIES]
    after = orderings(served(backend), queries, k)
    hits_after = [backend.search(query, WINDOW) for query in queries[:20]]

    monkeypatch.setattr(EmbeddedBackend, "search", lambda self, query, depth: search_before(self, query, depth))
    monkeypatch.setattr(feedback, "nearest_hits", nearest_hits_before)
    monkeypatch.setattr(pipeline, "merge", merge_before)
    before = orderings(served(backend), queries, k)

    assert sum(len(ranked) == k for ranked in after) >= QUERIES // 10  # pages as long as asked, some past the window
    assert after == before
    for query, hits in zip(queries, hits_after):  # the hits' data too, not only their order
        for new, old in zip(hits, search_before(backend, query, WINDOW), strict=True):
            assert (new.doc_id, new.score, new.title) == (old.doc_id, old.score, old.title)
            assert all(np.array_equal(a, b) for a, b in zip(
                (new.terms.title_ids, new.terms.abstract_ids, new.terms.first_ids),
                (old.terms.title_ids, old.terms.abstract_ids, old.terms.first_ids)))
