"""Each hit's k most similar other hits of a window: a compiled kernel over the pairs of hits that share a term.

The candidate feedback's costly step. A full NFCorpus window (500 hits, 50 terms each) has about 150k pairs of
hits sharing a term; scipy's sparse [n, V] x [V, n] product walks them twice at several nanoseconds each, and
picking the k best of the dense [n, n] result cost about a fifth more. This kernel goes one hit at a time: the
hit's terms, each term's hits (the window's entries grouped by term by a counting sort), their products summed
into one row of n cosines (which stays in the L1 cache), and the k best of that row kept in one pass over it.

It sums each cosine over the hit's terms in their stored order, as scipy's product does, so the cosines are
the same to the bit; of equal cosines the lower index (the hit BM25 ranks higher) comes first, as k passes of
``argmax`` give them. ``tests/ranking/test_feedback_reference.py`` checks both against the plain numpy/scipy
reference. numba, because this loop is a few nanoseconds per pair compiled and has no vectorised form that
numpy runs without materialising the pairs (that took longer than scipy's product).
"""

from __future__ import annotations

import numba
import numpy as np
from scipy import sparse

from es_rerank.ranking.term_tables import blank_table, give_back


def nearest_hits(vectors: sparse.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """int [n, min(k, n-1)] each hit's k most similar other hits, most similar first, and float [n, ...] their cosines.

    Cosines are the rows' dot products (``vectors`` holds unit rows), below 0 raised to 0. Of equally similar
    hits the one nearer the top of the window (BM25's better) comes first: duplicate documents are equally
    similar to every other hit.
    """
    n, vocab = vectors.shape
    if n < 2:
        return np.zeros((n, 0), dtype=np.intp), np.zeros((n, 0))
    indices = np.asarray(vectors.indices, dtype=np.int32)  # as the cache's matrices hold them: no copy
    if len(indices) and (indices.min() < 0 or indices.max() >= vocab):  # the kernel indexes a table by term
        raise ValueError(f"term ids must lie in [0, {vocab}), got {indices.min()} to {indices.max()}")
    table = blank_table(vocab)
    indptr, data = np.asarray(vectors.indptr, dtype=np.int32), np.asarray(vectors.data, dtype=np.float64)
    nearest, cosines = _nearest(indptr, indices, data, table, min(k, n - 1))
    give_back(table)  # only once the kernel has set it back to all -1
    return nearest, np.maximum(cosines, 0.0)


def warm_up() -> None:
    """Compile the kernel now (or load it from numba's cache beside this file), not on the first search."""
    nearest_hits(sparse.csr_matrix(np.eye(3)), 1)


@numba.njit(cache=True, nogil=True)
def _postings(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, group_of_term: np.ndarray) -> tuple:
    """The window's entries grouped by term (a counting sort): each one's (hit, weight) in that order, each
    entry's group, and where each group starts. Sets ``group_of_term`` (all -1) back to all -1."""
    nnz = len(indices)
    group_of_entry, term_of_group = np.empty(nnz, np.int32), np.empty(nnz, np.int32)
    starts = np.zeros(nnz + 1, np.int64)
    groups = 0
    for entry in range(nnz):
        group = group_of_term[indices[entry]]
        if group < 0:
            group, groups = groups, groups + 1
            group_of_term[indices[entry]], term_of_group[group] = group, indices[entry]
        group_of_entry[entry] = group
        starts[group + 1] += 1
    for group in range(groups):
        starts[group + 1] += starts[group]
        group_of_term[term_of_group[group]] = -1
    filled = starts[:groups].copy()
    posting_hit, posting_weight = np.empty(nnz, np.int32), np.empty(nnz)
    for hit in range(len(indptr) - 1):
        for entry in range(indptr[hit], indptr[hit + 1]):
            at = filled[group_of_entry[entry]]
            filled[group_of_entry[entry]] = at + 1
            posting_hit[at], posting_weight[at] = hit, data[entry]
    return posting_hit, posting_weight, group_of_entry, starts


@numba.njit(cache=True, nogil=True)
def _nearest(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, group_of_term: np.ndarray, k: int) -> tuple:
    """``nearest_hits`` before the raise to 0, for 1 <= k <= n - 1."""
    n = len(indptr) - 1
    posting_hit, posting_weight, group_of_entry, starts = _postings(indptr, indices, data, group_of_term)
    nearest, cosines = np.empty((n, k), np.intp), np.empty((n, k))
    row = np.zeros(n)  # the current hit's cosines
    for hit in range(n):
        for entry in range(indptr[hit], indptr[hit + 1]):  # in stored order, as scipy's product sums
            weight, group = data[entry], group_of_entry[entry]
            for at in range(starts[group], starts[group + 1]):
                row[posting_hit[at]] += weight * posting_weight[at]
        size, floor = 0, -np.inf  # the k best so far, best first; floor: the k-th's cosine once there are k
        for other in range(n):  # in window order: a later hit passes an equal cosine only if strictly above
            value = row[other]
            if other == hit or (size == k and not value > floor):
                continue
            at = size if size < k else k - 1
            size = min(size + 1, k)
            while at > 0 and value > cosines[hit, at - 1]:
                cosines[hit, at], nearest[hit, at] = cosines[hit, at - 1], nearest[hit, at - 1]
                at -= 1
            cosines[hit, at], nearest[hit, at] = value, other
            floor = cosines[hit, k - 1]
        row[:] = 0.0
    return nearest, cosines
