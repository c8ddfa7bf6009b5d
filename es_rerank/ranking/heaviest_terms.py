"""The candidate feedback's document vectors, compiled: each document's heaviest terms, unit length, as CSR arrays.

What ``feedback.document_vectors`` returns, and what the vector cache builds for documents it does not hold: at 1M
documents nearly every hit of every window (500 documents, about 86k tokens, 64k distinct (document, term) pairs).
numpy built it by three sorts over the whole window (the tokens' (document, term) keys for tf; a stable argsort of
the float key ``document * span - weight``, span the largest weight plus 1, to keep each document's heaviest terms;
an argsort back into term order), with a log and an idf per pair: 12 ms a window on 2 cores, half of it the two
argsorts (``reports/profile/cold-vectors.txt``). Here: each document's terms counted through a vocabulary-long
table (no sort of the tokens); each weight one product of two tables' entries; two sorts of values, which numpy
does with SIMD several times faster than an argsort (the keys, which give each document's kept-th smallest key,
and each entry's (document, term) with its index in the low bits, which gives term order); then one pass per
document in term order keeps the entries numpy's stable argsort put first, and a few dozen are sorted by key.

The same arrays to the bit:

- ``1 + log tf`` and the idf are numpy's, computed by numpy on tables (tf 1 to the window's largest; every term of
  the statistics, once per build: 11 MB and about 0.1 s at 1.4M terms, on the first window of a build) instead of
  on the window's pairs: the same function of the same values (numpy's SIMD log need not match the C library's in
  the last bit, so the kernel takes no log of its own);
- the kernels do only what IEEE rounds exactly (products, differences, sums in the same order, a square root, a
  quotient). Each key is numpy's float, ``float(document) * span - weight``. numpy's stable argsort, whose input
  had a document's terms ascending, put first the keys below the kept-th smallest, then those equal to it in term
  order, even where rounding merged two different weights into one key (the lower term is then kept, though
  lighter): so are they chosen here. Keys of different documents never meet: document d's lie in
  ``((d - 1) * span + 1, d * span)``, and rounding moves them by less than 1/4 while ``d * span`` stays below 2**50;
- the norm sums the kept weights' squares by key, equal keys in term order (an insertion sort, stable), the
  order ``np.bincount`` summed them in.

``tests/ranking/test_feedback_reference.py`` checks all this against the numpy code, kept there.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numba
import numpy as np

from es_rerank.ranking.term_tables import blank_table, give_back
from es_rerank.stats import CorpusStats, DocTerms

# Every term's idf, of the last statistics builds used (a reload's new build replaces the oldest).
_IDF_TABLES: dict[str, np.ndarray] = {}
_IDF_BUILDS_KEPT = 2
_IDF_LOCK = threading.Lock()
_PACKED_BITS = 62  # an entry's (document, term) and index packed in one int64 for numpy's sort of values


def heaviest_terms(
    docs: Sequence[DocTerms], stats: CorpusStats, terms_per_document: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int32 indptr, int32 term ids and float weights of the documents' unit (1 + log tf) * idf vectors of title +
    abstract, each keeping its ``terms_per_document`` heaviest terms (of equal weights the lower term), ascending."""
    n, vocab = len(docs), len(stats.vocab)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter((len(d.title_ids) + len(d.abstract_ids) for d in docs), np.int64, n), out=offsets[1:])
    pieces = (ids for d in docs for ids in (d.title_ids, d.abstract_ids))
    tokens = np.concatenate([np.zeros(0, np.int32), *pieces]).astype(np.int32, copy=False)
    table = blank_table(vocab)
    terms, counts, starts, outside = _term_counts(tokens, offsets, table, vocab)
    give_back(table)  # only once the kernel has set it back to all -1
    if outside:
        raise ValueError(f"term ids must lie in [0, {vocab}), got {tokens.min()} to {tokens.max()}")
    largest = int(counts.max()) if len(counts) else 0
    one_plus_log = 1.0 + np.log(np.arange(1, largest + 1, dtype=np.float64))  # of tf 1, 2, ...: numpy's, as before
    shift = max(len(terms), 1).bit_length()
    weights, keys, packed = _weights_and_keys(terms, counts, starts, (one_plus_log, _idf_table(stats)), vocab, shift)
    # numpy's sorts of values (SIMD, several times faster than an argsort): each document's keys ascending (their
    # documents apart), and its entries by term, an entry's (document, term) above its index in the low bits.
    keys_ascending = np.sort(keys)
    if n * vocab < 2 ** (_PACKED_BITS - shift):
        packed.sort()
        by_term = packed & ((1 << shift) - 1)
    else:  # a window too large to pack: the slower sort
        by_term = np.lexsort((terms, np.repeat(np.arange(n), np.diff(starts))))
    return _keep_heaviest(terms, weights, (keys, keys_ascending), by_term, starts, terms_per_document)


def fill_rows(built: tuple[np.ndarray, np.ndarray, np.ndarray], rows: np.ndarray, tables: tuple) -> None:
    """Write ``heaviest_terms``'s vectors (indptr, terms, weights) into rows ``rows`` of padded tables (terms
    [m, k], weights [m, k], lengths [m]), each vector at the start of its row."""
    _fill_rows(built[0], built[1], built[2], rows, tables)


def warm_up() -> None:
    """Compile the kernels now (or load them from numba's cache beside this file), not on the first search."""
    place = np.full(3, -1, np.int32)
    terms, counts, starts, _ = _term_counts(np.array([2, 0, 2], np.int32), np.array([0, 1, 3]), place, 3)
    weights, keys, by_term = _weights_and_keys(terms, counts, starts, (np.array([1.0, 1.5]), np.ones(3)), 3, 2)
    indptr, kept_terms, kept_weights = _keep_heaviest(terms, weights, (keys, np.sort(keys)), by_term & 3, starts, 1)
    fill_rows(
        (indptr, kept_terms, kept_weights),
        np.arange(2),
        (np.zeros((2, 1), np.int32), np.zeros((2, 1)), np.zeros(2, np.intp)),
    )


def _idf_table(stats: CorpusStats) -> np.ndarray:
    """``stats.idf`` of every term of the vocabulary, computed once per statistics build."""
    table = _IDF_TABLES.get(stats.build_id)
    if table is None or len(table) != len(stats.vocab):
        table = stats.idf(np.arange(len(stats.vocab)))  # outside the lock: two windows may both build it
        with _IDF_LOCK:
            while len(_IDF_TABLES) >= _IDF_BUILDS_KEPT:
                del _IDF_TABLES[next(iter(_IDF_TABLES))]
            _IDF_TABLES[stats.build_id] = table
    return table


@numba.njit(cache=True, nogil=True)
def _term_counts(tokens: np.ndarray, offsets: np.ndarray, place: np.ndarray, vocab: int) -> tuple:
    """Each document's distinct terms in the order they first occur and their counts, concatenated; where each
    document's begin; and whether a term id lies outside [0, vocab). ``place`` (all -1 for at least ``vocab``
    terms) is all -1 again on return."""
    terms, counts = np.empty(len(tokens), np.int32), np.zeros(len(tokens), np.int32)
    starts = np.zeros(len(offsets), np.int64)
    distinct, outside = 0, False
    for doc in range(len(offsets) - 1):
        for at in range(offsets[doc], offsets[doc + 1]):
            term = tokens[at]
            if term < 0 or term >= vocab:
                outside = True
                break
            if place[term] < 0:
                place[term], terms[distinct] = distinct, term
                distinct += 1
            counts[place[term]] += 1
        for entry in range(starts[doc], distinct):
            place[terms[entry]] = -1
        starts[doc + 1] = distinct
        if outside:
            break
    return terms[:distinct], counts[:distinct], starts, outside


@numba.njit(cache=True, nogil=True)
def _weights_and_keys(
    terms: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    tables: tuple,
    vocab: int,
    shift: int,
) -> tuple:
    """Each entry's weight (``tables``: ``1 + log tf`` by tf, and idf by term), its key ``document * span - weight``
    (span the largest weight plus 1), and its (document, term) shifted left by ``shift``, its index in the low bits."""
    one_plus_log, idf = tables
    weights = np.empty(len(terms))
    for entry in range(len(terms)):
        weights[entry] = one_plus_log[counts[entry] - 1] * idf[terms[entry]]
    span = weights.max() + 1.0 if len(weights) else 1.0
    keys, packed = np.empty(len(terms)), np.empty(len(terms), np.int64)
    for doc in range(len(starts) - 1):
        for entry in range(starts[doc], starts[doc + 1]):
            keys[entry] = doc * span - weights[entry]  # the float key numpy sorted by, rounded alike
            packed[entry] = ((doc * vocab + terms[entry]) << shift) | entry
    return weights, keys, packed


@numba.njit(cache=True, nogil=True)
def _keep_heaviest(
    terms: np.ndarray,
    weights: np.ndarray,
    sorted_keys: tuple,
    by_term: np.ndarray,
    starts: np.ndarray,
    keep: int,
) -> tuple:
    """``heaviest_terms`` from the entries' weights, their keys and the keys sorted, and the entries in term order."""
    keys, keys_ascending = sorted_keys
    n = len(starts) - 1
    indptr = np.zeros(n + 1, np.int32)
    indices, data = np.empty(len(terms), np.int32), np.empty(len(terms))
    kept_entries, kept_keys, heaviest = np.empty(keep + 1, np.int64), np.empty(keep + 1), np.empty(keep, np.int64)
    filled = 0
    for doc in range(n):
        first, size = starts[doc], starts[doc + 1] - starts[doc]
        kept = min(size, keep)
        if kept == 0:
            indptr[doc + 1] = filled
            continue
        # numpy's stable argsort kept the keys below the kept-th smallest and, of those equal to it, the first in
        # term order: the keys sorted give that key and how many of its equals are kept.
        last = keys_ascending[first + kept - 1]
        equal = 1
        while first + kept - 1 - equal >= first and keys_ascending[first + kept - 1 - equal] == last:
            equal += 1
        taken = 0
        for at in range(first, first + size):  # in term order; without branches, which the keys would mispredict
            entry = by_term[at]
            tie = (keys[entry] == last) & (equal > 0)
            take = (keys[entry] < last) | tie
            kept_entries[taken], kept_keys[taken] = entry, keys[entry]  # overwritten unless taken
            taken += take
            equal -= tie
        for at in range(kept):  # by key, equal keys in term order: each one's rank, counted (vectorised)
            key, rank = kept_keys[at], 0
            for other in range(kept):
                rank += (kept_keys[other] < key) | ((kept_keys[other] == key) & (other < at))
            heaviest[rank] = kept_entries[at]
        square_sum = 0.0
        for at in range(kept):  # heaviest first, as np.bincount summed them
            square_sum += weights[heaviest[at]] * weights[heaviest[at]]
        norm = np.sqrt(square_sum)
        if not norm > 0:
            norm = 1.0
        for at in range(kept):
            indices[filled], data[filled] = terms[kept_entries[at]], weights[kept_entries[at]] / norm
            filled += 1
        indptr[doc + 1] = filled
    return indptr, indices[:filled], data[:filled]


@numba.njit(cache=True, nogil=True)
def _fill_rows(indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray, rows: np.ndarray, tables: tuple) -> None:
    """``fill_rows`` (one small kernel: numpy's two-dimensional fancy assignment took a tenth of the cold window)."""
    row_terms, row_weights, lengths = tables
    for at in range(len(rows)):
        row, first = rows[at], indptr[at]
        lengths[row] = indptr[at + 1] - first
        for column in range(indptr[at + 1] - first):
            row_terms[row, column], row_weights[row, column] = terms[first + column], weights[first + column]
