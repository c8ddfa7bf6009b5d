"""The order of a first stage's hits: highest score first, equal scores by ascending document id.

tantivy returns its top hits by score; which of the documents tied at a score come first is
its own (segment and address order), and a tie at the cut-off decides which of them make the
top ``k``. ``best_first`` orders them as Elasticsearch's default sort does, on ``_score`` and
then on the id.
"""

from __future__ import annotations

from collections.abc import Sequence


def best_first(scores: Sequence[float], ids: Sequence[str], k: int) -> list[int]:
    """The positions of the ``k`` best hits, highest score first, equal scores by ascending id (Python's order of
    ``str``), the scores being numbers (never NaN, as BM25's are not).

    One sort of the positions on ready-made (-score, id) keys, looked up by the list's own
    ``__getitem__``: no Python function runs per hit. A window has 500 to 600 hits, and
    about a third of them tie on NFCorpus; numpy's argsort with the ties ordered by id
    took more CPU than this at that size (``reports/profile/micro-hitdata.txt``).
    """
    keys = list(zip([-score for score in scores], ids))
    return sorted(range(len(keys)), key=keys.__getitem__)[:k]
