"""Token -> embedding-row mapping shared by training and serving, so both build the same inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from es_rerank.embeddings import UNK, Embeddings
from es_rerank.string_table import StringTable
from worker.model import PAD_ID


def term_rows(terms: Sequence[str], embeddings: Embeddings) -> np.ndarray:
    """int64 [len(terms)] embedding row of every term (unknown words -> UNK).

    A memory-mapped vocabulary (``StringTable``, millions of terms at PubMed scale) is
    read the other way round: each embedding word is found in it, so no Python string
    is made per corpus term.
    """
    if isinstance(terms, StringTable):
        rows = np.full(len(terms), UNK, dtype=np.int64)
        for row, word in enumerate(embeddings.vocab):
            term_id = terms.row_of(word) if row > UNK else None  # PAD and UNK are no corpus terms
            if term_id is not None:
                rows[term_id] = row
        return rows
    return np.asarray(embeddings.lookup(terms), dtype=np.int64)


def query_rows(tokens: Sequence[str], embeddings: Embeddings, query_len: int) -> np.ndarray:
    """int64 [query_len] rows of the first ``query_len`` embedding-path tokens, PAD-filled."""
    rows = np.full(query_len, PAD_ID, dtype=np.int64)
    tokens = list(tokens[:query_len])
    if tokens:
        rows[: len(tokens)] = embeddings.lookup(tokens)
    return rows
