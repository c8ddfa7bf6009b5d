"""In-process reranking (``esrr search``, ``esrr bench search``): the worker's runtime without a broker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from es_rerank.backends.base import Hit
from es_rerank.payload import WorkerSetupError, build_request
from es_rerank.ranking.pipeline import StageClock, no_clock
from es_rerank.stats import CorpusStats
from worker.settings import WorkerSettings

if TYPE_CHECKING:
    from worker.runtime import Runtime


class LocalReranker:
    """The served model scoring in this process, loaded on first use (a ``pipeline.Reranker``).

    The two stages it times are the gateway's half (the Lex features and the request)
    and the worker's (the model). Its caller sends one request at a time, so the
    runtime's micro-batcher does not wait for company (``batch_wait_ms`` 0): nobody
    else would come.
    """

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = (settings or WorkerSettings()).model_copy(update={"batch_wait_ms": 0.0})
        self._runtime: Runtime | None = None

    @property
    def runtime(self) -> Runtime:
        """The loaded runtime (model, embeddings); loading raises ``WorkerSetupError`` with the fix."""
        if self._runtime is None:
            try:
                from worker.runtime import Runtime  # torch: imported only when the model is first used
            except ImportError as error:  # a core install
                raise WorkerSetupError(
                    f"reranking needs the model extra ({error}): pip install 'es-rerank[model]', or pass --no-rerank"
                ) from None
            self._runtime = Runtime.load(self.settings)
        return self._runtime

    @property
    def name(self) -> str:
        """The served model's name, as search output and eval rows show it."""
        return self.runtime.model_name

    def skipping(self) -> None:
        """Never: the model is in this process."""
        return None

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats, clock: StageClock = no_clock) -> np.ndarray:
        """float32 [len(hits)] Delta scores of ``hits`` for ``query``; ``stats`` describe the hits' index."""
        runtime = self.runtime
        with clock("features"):
            request = build_request(query, [h.terms for h in hits], stats, runtime.lex_names)
        with clock("model"):
            return runtime.score(request)

    def close(self) -> None:
        """Stop the runtime's scoring thread, if it was loaded."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __enter__(self) -> LocalReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
