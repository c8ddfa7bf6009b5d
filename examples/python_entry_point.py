"""Open the served search from Python with ``es_rerank.open_search`` and rank a query, as ``esrr search`` does.

    python examples/python_entry_point.py artifacts "vitamin d and bone"

``open_search(home=...)`` assembles the pipeline ``esrr search`` serves from that home
folder's index and the ``ESRR_*`` settings: BM25's top 500, then each stage set up there
(a trained model needs ``PipelineOptions(local_reranker=...)`` or ``via_worker=True``; without
one the candidate feedback reorders the window). What cannot be served raises
``es_rerank.SetupError`` with its fix: printed here, exit status 1.
"""

from __future__ import annotations

import sys

from es_rerank import SetupError, open_search
from es_rerank.ranking.answer import answer
from es_rerank.ranking.request import text_request


def main(home: str, query: str, size: int = 10) -> int:
    """Print the ranker and the top ``size`` of ``query`` over the index in ``home``; 1 when it cannot be opened."""
    try:
        pipeline = open_search(home=home)
    except SetupError as error:
        print(f"cannot search {home}: {error}", file=sys.stderr)
        return 1
    ranking = answer(pipeline, text_request(query, size)).ranking
    print(f"index {pipeline.backend.index}: {ranking.retrieved} hits, ranker {ranking.ranker}")
    for rank, item in enumerate(ranking.ranked, start=1):
        print(f"{rank:>3} {item.score:8.3f} {item.hit.doc_id}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: python {sys.argv[0]} HOME QUERY")
    sys.exit(main(sys.argv[1], sys.argv[2]))
