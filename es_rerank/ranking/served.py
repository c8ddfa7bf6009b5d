"""The pipeline a long-lived process serves, following the index version an admin swaps in.

A reindex (``esrr index build``, ``esrr index use``) makes another version current
without stopping anything: the workers load its statistics on its first request, and
``ServedSearch`` moves the gateway's pipeline to it at most ``check_every_s`` after the
swap. A version that cannot be opened (or a damaged ``CURRENT``) leaves the old one
serving, and says why: in the log, and in ``problem`` until a look succeeds, for the
gateway's health. Whether the judged-neighbour votes belong to the served index is
checked here too, at start and when a reindex is followed, so no search pays for it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from es_rerank.backends.base import BackendError
from es_rerank.ranking.pipeline import SearchPipeline

log = logging.getLogger(__name__)


class ServedSearch:
    """The current ``SearchPipeline``, its backend looked at again every ``check_every_s`` (0: every request)."""

    def __init__(self, pipeline: SearchPipeline, check_every_s: float = 5.0) -> None:
        self._pipeline = pipeline
        self.check_every_s = check_every_s
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        self._problem: str | None = None
        pipeline.neighbours_problem()  # the votes' corpus check (a digest of every id) at start, not in a search

    def pipeline(self) -> SearchPipeline:
        """The pipeline for the next query, after following a reindex if it is time to look.

        One request looks; the others meanwhile go on with the pipeline they find.
        """
        if time.monotonic() - self._checked >= self.check_every_s and self._lock.acquire(blocking=False):
            try:
                said = self._problem
                self._follow()
            except BackendError as error:
                if str(error) != said:  # once per problem, not at every look
                    log.warning(
                        "still serving index %s: cannot follow the served index (%s)",
                        self._pipeline.backend.index,
                        error,
                    )
            finally:
                self._lock.release()
        return self._pipeline

    @property
    def problem(self) -> str | None:
        """Why the index version current on disk is not served (the last look failed), None when it is.

        The text may name paths: log it, keep it out of HTTP bodies.
        """
        return self._problem

    def follow(self) -> bool:
        """Serve the index version that is current now; True when it changed. A ``BackendError`` changes nothing."""
        with self._lock:
            return self._follow()

    def _follow(self) -> bool:
        self._checked = time.monotonic()
        served = self._pipeline.backend
        try:
            current = served.current()
        except BackendError as error:
            self._problem = str(error)
            raise
        self._problem = None
        if current is served:
            return False
        # A new pipeline, not a changed one: a search under way keeps one index version throughout.
        pipeline = replace(self._pipeline, backend=current)
        # Whether the votes belong to this index (a digest of all its ids, cached per build): checked by the one
        # request that follows, before the pipeline is served, so no search of the new index computes it.
        pipeline.neighbours_problem(current.stats)
        self._pipeline = pipeline
        if current.index == served.index and current.stats.build_id == served.stats.build_id:
            return False  # the same build, from another folder (a copied version)
        log.info("now serving index %s (build %s)", current.index, current.stats.build_id)
        return True

    def close(self) -> None:
        """Release the reranker's connections."""
        if self._pipeline.reranker is not None:
            self._pipeline.reranker.close()
