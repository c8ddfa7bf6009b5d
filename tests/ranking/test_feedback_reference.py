"""Candidate feedback's fast paths against plain references: on random windows (hypothesis) and on real ones.

- ``document_vectors`` against the scipy code it replaced (``reference_document_vectors``), and its compiled form
  (``heaviest_terms``) against the numpy code that one replaced (``reference_numpy_document_vectors``), bit for bit:
  on random windows with tied weights, weights an ulp apart (whose sort keys round to one), documents of more
  terms than are kept, empty documents and repeated terms, and on real windows.
- The cache's matrices against ``document_vectors`` built afresh, bit for bit, through growth, eviction and reuse
  of its table rows.
- The compiled nearest hits against the numpy/scipy code they replaced (``reference_nearest_hits``: the sparse
  product, then k passes of argmax, or one stable argsort above k = 16): the same neighbours in the same order
  and the same cosines, to the bit, on random windows with duplicate rows, empty rows and tied weights, and on
  real windows: BM25's top 500 of NFCorpus dev queries over the whole collection.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams, document_vectors, with_feedback
from es_rerank.ranking.heaviest_terms import heaviest_terms
from es_rerank.ranking.neighbours import standardised
from es_rerank.ranking.similar_hits import nearest_hits
from es_rerank.stats import CorpusStats, DocTerms, Document, build_stats

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


def reference_document_vectors(docs: list[DocTerms], stats: CorpusStats, terms_per_document: int) -> sparse.csr_matrix:
    """``document_vectors`` as scipy built it before (841026a): tf by ``sum_duplicates``, the matrix from COO."""
    n, vocab = len(docs), len(stats.vocab)
    ids = [np.concatenate([d.title_ids, d.abstract_ids]) for d in docs]
    lengths = [len(i) for i in ids]
    counts = sparse.csr_matrix(
        (
            np.ones(sum(lengths)),
            np.concatenate([np.zeros(0, np.int32), *ids]),
            np.concatenate([[0], np.cumsum(lengths)]),
        ),
        shape=(n, vocab),
    )
    counts.sum_duplicates()
    doc, term = np.repeat(np.arange(n), np.diff(counts.indptr)), counts.indices
    weights = (1.0 + np.log(counts.data)) * stats.idf(term)
    span = weights.max() + 1.0 if len(weights) else 1.0
    heaviest_first = np.argsort(doc * span - weights, kind="stable")
    doc, term, weights = doc[heaviest_first], term[heaviest_first], weights[heaviest_first]
    keep = np.arange(len(doc)) - np.searchsorted(doc, doc) < terms_per_document
    doc, term, weights = doc[keep], term[keep], weights[keep]
    norms = np.sqrt(np.bincount(doc, weights * weights, minlength=n))
    weights /= np.where(norms > 0, norms, 1.0)[doc]
    return sparse.csr_matrix((weights, (doc, term)), shape=(n, vocab))


def reference_numpy_document_vectors(
    docs: list[DocTerms], stats: CorpusStats | IdfTable, terms_per_document: int
) -> sparse.csr_matrix:
    """``document_vectors`` as numpy built it before the kernel (89ffa9f): three sorts over the whole window."""
    n, vocab = len(docs), len(stats.vocab)
    lengths = np.fromiter((len(d.title_ids) + len(d.abstract_ids) for d in docs), np.int64, n)
    tokens = np.concatenate([np.zeros(0, np.int64), *(ids for d in docs for ids in (d.title_ids, d.abstract_ids))])
    keys = np.repeat(np.arange(n, dtype=np.int64) * vocab, lengths) + tokens
    keys.sort()
    new_run = np.ones(len(keys), dtype=bool)
    new_run[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(new_run)
    tf = np.diff(np.append(starts, len(keys))).astype(np.float64)
    doc, term = np.divmod(keys[starts], vocab)
    weights = (1.0 + np.log(tf)) * stats.idf(term)
    span = weights.max() + 1.0 if len(weights) else 1.0
    heaviest_first = np.argsort(doc * span - weights, kind="stable")
    doc, term, weights = doc[heaviest_first], term[heaviest_first], weights[heaviest_first]
    rank_in_document = np.arange(len(doc)) - np.searchsorted(doc, doc)
    keep = rank_in_document < terms_per_document
    doc, term, weights = doc[keep], term[keep], weights[keep]
    norms = np.sqrt(np.bincount(doc, weights * weights, minlength=n))
    weights /= np.where(norms > 0, norms, 1.0)[doc]
    by_term = np.argsort(doc * vocab + term)
    indptr = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(doc, minlength=n), out=indptr[1:])
    return sparse.csr_matrix((weights[by_term], term[by_term].astype(np.int32), indptr), shape=(n, vocab))


@dataclass
class IdfTable:
    """The two things the document vectors read of the statistics (the vocabulary's size, each term's idf), with
    idf values chosen by the test: equal ones, and ones an ulp apart, which the corpus statistics rarely give."""

    idf_of_term: np.ndarray
    build_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # a build of its own, as for a new index

    @property
    def vocab(self) -> range:
        return range(len(self.idf_of_term))

    def idf(self, term_ids: np.ndarray) -> np.ndarray:
        return self.idf_of_term[term_ids]


def same_vectors(docs: list[DocTerms], stats: CorpusStats | IdfTable, terms_per_document: int) -> None:
    """The compiled vectors are the numpy code's, to the bit; the cache's, built cold, too."""
    expected = reference_numpy_document_vectors(docs, stats, terms_per_document)
    same_matrix(document_vectors(docs, stats, terms_per_document), expected)  # type: ignore[arg-type]
    cache = DocumentVectorCache(max(len(docs), 1), terms_per_document)
    same_matrix(cache.vectors([f"d{i}" for i in range(len(docs))], docs, stats), expected)  # type: ignore[arg-type]


def same_matrix(got: sparse.csr_matrix, expected: sparse.csr_matrix) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert got.indices.dtype == expected.indices.dtype and got.indptr.dtype == expected.indptr.dtype
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)


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
        same_matrix(got, expected)
        same_matrix(expected, reference_document_vectors(docs, stats, terms_per_document))
        lru_model(used, [corpus[row].doc_id for row in rows], bound)
        assert list(cache._slots) == list(used)  # the least recently used leave first


@st.composite
def token_windows(draw: st.DrawFn) -> tuple[list[DocTerms], IdfTable]:
    """Up to 30 documents of up to 160 tokens over up to 200 terms (often more distinct terms than the 50 kept;
    empty documents; terms repeated, more often the lower ids), and an idf per term from a few values (tied
    weights), from values an ulp or a few apart (different weights whose sort keys round to one), or spread."""
    n, vocab = draw(st.integers(0, 30)), draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def field() -> np.ndarray:
        size = int(rng.integers(0, 80)) if rng.random() < 0.9 else 0
        return np.minimum(rng.geometric(draw_p, size) - 1, vocab - 1).astype(np.int32)

    draw_p = draw(st.sampled_from([0.005, 0.02, 0.1, 0.5]))
    docs = [DocTerms(field(), field(), np.zeros(0, np.int32)) for _ in range(n)]
    kind = draw(st.sampled_from(["few", "ulps", "spread"]))
    if kind == "few":
        idf = rng.choice([0.5, 1.0, 1.5, 3.0], size=vocab)
    elif kind == "ulps":
        idf = np.nextafter(2.0, 3.0) + rng.integers(0, 4, size=vocab) * np.spacing(2.0)
    else:
        idf = rng.uniform(1e-3, 12.0, size=vocab)
    return docs, IdfTable(idf)


@settings(max_examples=300, deadline=None)
@given(window=token_windows(), terms_per_document=st.sampled_from([1, 2, 5, 8, 50, 60]))
def test_the_compiled_vectors_are_the_numpy_ones(window: tuple[list[DocTerms], IdfTable], terms_per_document: int):
    docs, stats = window
    same_vectors(docs, stats, terms_per_document)


def test_weights_whose_keys_round_to_one_keep_the_lower_term_as_numpy_did() -> None:
    """numpy sorted by the float ``document * span - weight``: far from document 0, two weights an ulp apart give
    one key, and its stable sort then kept the lower term id, though lighter. The kernel keeps it too."""
    light, heavy = 2.0, np.nextafter(2.0, 3.0)
    stats = IdfTable(np.array([light, heavy, 30.0]))
    docs = [DocTerms(np.array([2], np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))] * 40
    docs.append(DocTerms(np.array([1, 0], np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32)))
    span = 31.0
    assert 40 * span - heavy == 40 * span - light  # the two keys are one float
    vectors = document_vectors(docs, stats, 1)  # type: ignore[arg-type]
    assert vectors.indices[-1] == 0  # the lighter term, as numpy's stable sort left it
    same_vectors(docs, stats, 1)
    first = [docs[-1]]  # document 0: the keys differ, the heavier is kept
    assert document_vectors(first, stats, 1).indices.tolist() == [1]  # type: ignore[arg-type]
    same_vectors(first, stats, 1)


def test_a_window_too_large_to_pack_is_sorted_by_term_the_slow_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """(document, term, index) packed in one int64 needs n * vocab below 2**(62 - index bits); past that (a window
    no served setting allows), ``np.lexsort`` gives the term order instead, and the vectors are the same."""
    import es_rerank.ranking.heaviest_terms as compiled

    rng = np.random.default_rng(7)
    stats = IdfTable(rng.choice([0.5, 1.0, 2.5], size=90))
    docs = [
        DocTerms(rng.integers(0, 90, 60).astype(np.int32), rng.integers(0, 30, 40).astype(np.int32), np.zeros(0))
        for _ in range(12)
    ]
    monkeypatch.setattr(compiled, "_PACKED_BITS", 0)
    for terms_per_document in (3, 50):
        same_vectors(docs, stats, terms_per_document)


def test_term_ids_outside_the_vocabulary_are_refused_by_the_vectors() -> None:
    stats = IdfTable(np.ones(3))
    for bad in ([0, 3], [-1, 2]):
        docs = [DocTerms(np.array(bad, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))]
        with pytest.raises(ValueError, match=r"term ids must lie in \[0, 3\)"):
            heaviest_terms(docs, stats, 50)  # type: ignore[arg-type]


def reference_nearest_hits(vectors: sparse.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``nearest_hits`` as numpy and scipy computed it before the kernel (841026a)."""
    n = vectors.shape[0]
    if n < 2:
        return np.zeros((n, 0), dtype=np.intp), np.zeros((n, 0))
    similarity = (vectors @ vectors.T).toarray()
    np.fill_diagonal(similarity, -np.inf)
    k = min(k, n - 1)
    if k > 16:
        nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
        return nearest, np.maximum(np.take_along_axis(similarity, nearest, axis=1), 0.0)
    rows = np.arange(n)
    nearest, cosines = np.empty((n, k), dtype=np.intp), np.empty((n, k))
    for rank in range(k):
        best = similarity.argmax(axis=1)  # the first of the row's largest
        nearest[:, rank], cosines[:, rank] = best, similarity[rows, best]
        similarity[rows, best] = -np.inf
    return nearest, np.maximum(cosines, 0.0)


def reference_with_feedback(scores: np.ndarray, vectors: sparse.csr_matrix, params: FeedbackParams) -> np.ndarray:
    """``with_feedback`` over ``reference_nearest_hits``."""
    nearest, cosines = reference_nearest_hits(vectors, params.k)
    z = standardised(scores)
    votes = (cosines * z[nearest]).sum(axis=1) / np.maximum(cosines.sum(axis=1), 1e-12)
    return (z + params.weight * standardised(votes)).astype(np.float32)


def same_nearest(vectors: sparse.csr_matrix, k: int) -> None:
    nearest, cosines = nearest_hits(vectors, k)
    expected_nearest, expected_cosines = reference_nearest_hits(vectors, k)
    assert nearest.dtype == expected_nearest.dtype and cosines.dtype == expected_cosines.dtype
    np.testing.assert_array_equal(nearest, expected_nearest)
    np.testing.assert_array_equal(cosines, expected_cosines)


@st.composite
def windows(draw: st.DrawFn) -> sparse.csr_matrix:
    """Up to 40 hits over up to 30 terms: weights from a few values (ties), some rows empty, some duplicated,
    unit rows as ``document_vectors`` gives, or raw weights; entries in a row's stored order, sorted or not."""
    n, vocab = draw(st.integers(0, 40)), draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dense = rng.choice([0.25, 0.5, 1.0, 2.0], size=(n, vocab)) * (rng.random((n, vocab)) < draw(st.floats(0, 0.6)))
    if n > 1 and draw(st.booleans()):
        dense[rng.integers(0, n, size=n // 3)] = dense[rng.integers(0, n)]  # duplicate documents
    if draw(st.booleans()):
        norms = np.linalg.norm(dense, axis=1, keepdims=True)
        dense = dense / np.where(norms > 0, norms, 1.0)
    matrix = sparse.csr_matrix(dense)
    if draw(st.booleans()):  # each row's entries in a shuffled order: both sum in the stored order
        for row in range(n):
            span = slice(matrix.indptr[row], matrix.indptr[row + 1])
            order = rng.permutation(span.stop - span.start)
            matrix.indices[span], matrix.data[span] = matrix.indices[span][order], matrix.data[span][order]
        matrix.has_sorted_indices = False
    return matrix


@settings(max_examples=200, deadline=None)
@given(vectors=windows(), k=st.integers(1, 45))
def test_the_kernel_finds_the_neighbours_the_numpy_code_found(vectors: sparse.csr_matrix, k: int) -> None:
    same_nearest(vectors, k)


def test_term_ids_outside_the_vocabulary_are_refused() -> None:
    bad = sparse.csr_matrix((np.ones(2), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"term ids must lie in \[0, 3\), got 0 to 7"):
        nearest_hits(bad, 1)


@pytest.fixture(scope="module")
def real_windows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[sparse.csr_matrix, np.ndarray]]:
    """The feedback vectors and BM25 scores of the windows of 500 of the first 40 NFCorpus dev queries, over the
    whole collection (the fallback documents where the data is not there); the vectors checked against the
    reference's on the way."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.settings import DEFAULT_NFCORPUS, CommonSettings
    from index_setup.embedded_index import build_embedded_index
    from tests.artifact_home import read_documents

    directory = tmp_path_factory.mktemp("nfcorpus") / "embedded"
    build_embedded_index(read_documents(10**6), directory, version="all", progress=False)
    backend = EmbeddedBackend.open_current(directory)
    texts = (
        dev_query_texts(None, CommonSettings(), 40)
        if DEFAULT_NFCORPUS.is_dir()
        else ["cancer", "risk", "disease", "breast cancer recurrence"]
    )
    hits = [text_hits(backend, text, 500) for text in texts]
    windows = []
    for window in (window for window in hits if len(window) > 1):
        docs = [hit.terms for hit in window]
        vectors = document_vectors(docs, backend.stats)
        same_matrix(vectors, reference_document_vectors(docs, backend.stats, 50))
        same_vectors(docs, backend.stats, 50)
        same_vectors(docs, backend.stats, 7)
        windows.append((vectors, np.array([hit.score for hit in window])))
    return windows


def test_real_windows_get_the_same_neighbours_and_scores(real_windows) -> None:
    assert len(real_windows) >= 3
    for vectors, scores in real_windows:
        for k in (5, 1, 17):
            same_nearest(vectors, k)
        params = FeedbackParams(k=5, weight=0.5)
        np.testing.assert_array_equal(
            with_feedback(scores, vectors, params), reference_with_feedback(scores, vectors, params)
        )


def test_windows_fed_at_once_get_their_own_neighbours(real_windows) -> None:
    """The kernel runs without the GIL and shares its term tables through a pool: threads must not mix them."""
    from concurrent.futures import ThreadPoolExecutor

    work = [vectors for vectors, _ in real_windows] * 4
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda vectors: nearest_hits(vectors, 5), work))
    for vectors, (nearest, cosines) in zip(work, got):
        expected_nearest, expected_cosines = reference_nearest_hits(vectors, 5)
        np.testing.assert_array_equal(nearest, expected_nearest)
        np.testing.assert_array_equal(cosines, expected_cosines)


def test_a_larger_vocabulary_gets_a_larger_term_table() -> None:
    """A table kept from a smaller vocabulary (statistics before a reindex) is not indexed past its end."""
    small = sparse.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]]))
    large = sparse.csr_matrix((np.ones(4), np.array([0, 900, 5, 900]), np.array([0, 2, 4])), shape=(2, 1000))
    for vectors in (small, large, small, large):
        same_nearest(vectors, 1)
