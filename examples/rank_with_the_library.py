"""Rank a query through the library, in this process: the served index, BM25, then the candidate feedback.

    ESRR_HOME=artifacts python examples/rank_with_the_library.py "vitamin d and bone"

The index is the one ``esrr`` serves (``ESRR_HOME``, ``ESRR_BACKEND``: the embedded index that
``esrr index build`` made, by default). Torch-free: a model is a ``Reranker`` handed to
``SearchPipeline`` (``worker.local.LocalReranker`` scores in this process,
``es_rerank.ranking.dispatch.WorkerReranker`` through a broker); without one the window is
reordered by the candidate feedback alone. ``answer`` is the one path every search takes
(``_search`` too); ``text_request`` is the request a client sends for plain words.
Prints the ranker, then one line per hit.
"""

from __future__ import annotations

import sys

from es_rerank.backends import open_backend
from es_rerank.ranking.answer import answer
from es_rerank.ranking.feedback import FeedbackParams
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.request import text_request
from es_rerank.settings import CommonSettings


def main(query: str, size: int = 10) -> None:
    """Print the top ``size`` of ``query`` over the served index, BM25's top 50 reordered by the feedback."""
    settings = CommonSettings()  # ESRR_* from the environment, as esrr reads them
    backend = open_backend(settings)
    pipeline = SearchPipeline(backend, window=50, feedback=FeedbackParams.from_settings(settings))
    ranking = answer(pipeline, text_request(query, size)).ranking
    print(f"index {backend.index}: {ranking.retrieved} hits, ranker {ranking.ranker}")
    for rank, item in enumerate(ranking.ranked, start=1):
        print(f"{rank:>3} {item.score:8.3f} (BM25 {item.hit.score:6.3f}) {item.hit.doc_id}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} QUERY")
    main(sys.argv[1])
