"""In-process reranking for the shell (``esrr search``): the worker's runtime without a broker."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from es_rerank.backends.base import Hit
from es_rerank.payload import build_request
from es_rerank.stats import CorpusStats
from worker.runtime import Runtime
from worker.settings import WorkerSettings


def rerank_scores(query: str, hits: Sequence[Hit], stats: CorpusStats,
                  settings: WorkerSettings | None = None) -> tuple[np.ndarray, str]:
    """Delta scores of ``hits`` for ``query`` and the model's name, scored in this process."""
    runtime = Runtime.load(settings or WorkerSettings())
    try:
        request = build_request(query, [h.terms for h in hits], stats, runtime.lex_names)
        return runtime.score(request), runtime.model_name
    finally:
        runtime.close()
