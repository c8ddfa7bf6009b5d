"""Candidate feedback's fast paths against plain references: on random windows (hypothesis) and on real ones.

The cache's matrices against ``document_vectors`` built afresh, bit for bit, through growth, eviction and reuse of
its table rows.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from es_rerank.ranking.feedback import DocumentVectorCache, document_vectors
from es_rerank.stats import Document, build_stats

WORDS = [f"w{i}" for i in range(40)]


def lru_model(used: OrderedDict[str, None], window: list[str], bound: int) -> None:
    """What the cache holds after a window, least recently used first: the window's known documents move to the
    end in window order, then its new ones join in window order, each pushing out the oldest when full."""
    new = [doc_id for doc_id in window if doc_id not in used]
    for doc_id in window:
        if doc_id in used:
            used.move_to_end(doc_id)
    for doc_id in new:
        if doc_id not in used:
            if len(used) >= bound:
                used.popitem(last=False)
            used[doc_id] = None


@st.composite
def corpora(draw: st.DrawFn) -> list[Document]:
    """Up to 60 documents of a few words from a small vocabulary: shared terms, repeated words, empty documents."""
    n = draw(st.integers(1, 60))
    text = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)
    return [Document(f"d{i}", draw(text), draw(text)) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(
    corpus=corpora(),
    bound=st.integers(1, 80),
    terms_per_document=st.integers(1, 8),
    picks=st.lists(st.lists(st.integers(0, 10**6), max_size=70), min_size=1, max_size=8),
)
def test_the_cache_matches_document_vectors_through_growth_and_eviction(
    corpus: list[Document], bound: int, terms_per_document: int, picks: list[list[int]]
) -> None:
    stats = build_stats("v1", corpus)
    cache = DocumentVectorCache(bound, terms_per_document)
    used: OrderedDict[str, None] = OrderedDict()
    for pick in picks:  # windows of documents drawn with repeats, longer than the bound or not
        rows = [p % len(corpus) for p in pick]
        docs = [stats.doc_terms(row) for row in rows]
        got = cache.vectors([corpus[row].doc_id for row in rows], docs, stats)
        expected = document_vectors(docs, stats, terms_per_document)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(got.indptr, expected.indptr)
        np.testing.assert_array_equal(got.indices, expected.indices)
        np.testing.assert_array_equal(got.data, expected.data)
        lru_model(used, [corpus[row].doc_id for row in rows], bound)
        assert list(cache._slots) == list(used)  # the least recently used leave first
