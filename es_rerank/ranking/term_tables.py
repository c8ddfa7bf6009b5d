"""Vocabulary-long int32 tables of -1 for the candidate feedback's compiled kernels, kept between windows.

A kernel marks the window's terms in one (a term's group in ``similar_hits``, its place among a
document's terms in ``heaviest_terms``) and sets them back to -1 before it returns; filling a new
table is a pass over the vocabulary (8 MB at 2M terms) per search. One table per window being
computed at once; a table is given back only once its kernel has set it back to all -1.
"""

from __future__ import annotations

import queue

import numpy as np

_FREE: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()


def blank_table(vocab: int) -> np.ndarray:
    """A table of -1 for at least ``vocab`` terms, a kept one where one is free."""
    try:
        table = _FREE.get_nowait()
    except queue.Empty:
        return np.full(vocab, -1, np.int32)
    return table if len(table) >= vocab else np.full(vocab, -1, np.int32)


def give_back(table: np.ndarray) -> None:
    """Keep ``table`` for a later window; all -1 again (its kernel has set back what it marked)."""
    _FREE.put(table)
