"""Token -> embedding-row mapping shared by training and serving, so both build the same inputs."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from es_rerank.embeddings import Embeddings
from worker.model import PAD_ID


def term_rows(terms: Sequence[str], embeddings: Embeddings) -> np.ndarray:
    """int64 [len(terms)] embedding row of every term (unknown words -> UNK)."""
    return np.asarray(embeddings.lookup(terms), dtype=np.int64)


def query_rows(tokens: Sequence[str], embeddings: Embeddings, query_len: int) -> np.ndarray:
    """int64 [query_len] rows of the first ``query_len`` embedding-path tokens, PAD-filled."""
    rows = np.full(query_len, PAD_ID, dtype=np.int64)
    tokens = list(tokens[:query_len])
    if tokens:
        rows[:len(tokens)] = embeddings.lookup(tokens)
    return rows
