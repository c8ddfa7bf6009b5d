"""Whether the served model fits what it is served: checked when a worker loads an index, and per request.

A model trained on NFCorpus meets another collection's words and another collection's
feature scale. Three things are measured, with the figure in every warning:

- the embeddings' coverage of the served index: the share of the documents' first 50 tokens
  (the words the Delta stage reads) that have a vector; a word without one reads as UNK;
- the share of documents without a title, where the paper's two title features are 0 for
  every hit (the window variant reads an empty title as unknown instead, ``es_rerank.lex``);
- the scale of the Lex features the model standardises with its training mean and standard
  deviation: each request's window mean of each feature, in those training units, over windows
  of at least ``MIN_WINDOW`` documents (a short window holds a few strong matches, whose mean
  says nothing of the scale). On NFCorpus dev, 3% of the paper model's full windows have a
  feature more than ``SCALE_LIMIT`` off, against 68% for the sentence-long vid-desc queries,
  whose BM25 sits 2.1 training standard deviations above on average
  (``reports/transfer/dev/choices.md``). A warning comes when more than ``DRIFT_SHARE`` of
  the windows seen drift. Window-relative features (``_wz``) are 0 on average by construction
  and are not watched.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from es_rerank.embeddings import UNK
from es_rerank.lex import WINDOW_SUFFIX
from es_rerank.stats import CorpusStats

MIN_COVERAGE = 0.95  # NFCorpus: 99.6% of the first-50 tokens have a vector with the recipe's embeddings
MAX_EMPTY_TITLES = 0.2  # NFCorpus: none is empty
SCALE_LIMIT = 1.5  # training standard deviations between a window's mean feature and the training mean
MIN_WINDOW = 100  # documents a window needs for its mean to say something of the scale
MIN_REQUESTS = 20  # windows seen before a share of drifting ones is worth a warning
DRIFT_SHARE = 0.25  # NFCorpus dev: 3% of the full windows drift, its vid-desc queries: 68%
SCALE_REPORT_EVERY = 1000  # windows between two warnings


@dataclass(frozen=True)
class IndexFit:
    """How the served model fits one index: coverage, empty titles, and warnings that name the figures."""

    version: str
    token_coverage: float  # share of the first-50 token occurrences with an embedding
    term_coverage: float  # share of the distinct terms of the index with an embedding
    empty_titles: float  # share of documents without a title
    warnings: tuple[str, ...]

    def summary(self) -> str:
        """One line for logs and ``esrr worker start``."""
        return (
            f"index {self.version}: {self.token_coverage:.1%} of the documents' first 50 tokens and "
            f"{self.term_coverage:.1%} of its terms have an embedding; {self.empty_titles:.1%} of its "
            "documents have no title"
        )


def index_fit(stats: CorpusStats, rows_of_terms: np.ndarray, lex_names: Sequence[str]) -> IndexFit:
    """Measure how a model reading ``lex_names`` over these embeddings (``rows_of_terms``) fits ``stats``."""
    first = np.asarray(stats.first_values)
    token_coverage = float((rows_of_terms[first] != UNK).mean()) if first.size else 1.0
    used = np.zeros(len(rows_of_terms), dtype=bool)
    for values in (stats.title_values, stats.abstract_values):
        used[np.asarray(values)] = True
    term_coverage = float((rows_of_terms[used] != UNK).mean()) if used.any() else 1.0
    title_lengths = np.diff(np.asarray(stats.title_ptr))
    empty_titles = float((title_lengths == 0).mean()) if stats.n_docs else 0.0
    warnings = []
    if token_coverage < MIN_COVERAGE:
        warnings.append(
            f"only {token_coverage:.1%} of the first 50 tokens of index {stats.version}'s documents "
            f"have an embedding (below {MIN_COVERAGE:.0%}): the model reads the rest as one unknown "
            "word; train embeddings on text of this collection (`esrr embeddings train`) and the "
            "model on them"
        )
    paper_title_features = [n for n in lex_names if n.startswith("title_") and not n.endswith(WINDOW_SUFFIX)]
    if paper_title_features and empty_titles > MAX_EMPTY_TITLES:
        warnings.append(
            f"{empty_titles:.1%} of index {stats.version}'s documents have no title, so the model's "
            f"title features ({', '.join(paper_title_features)}) are 0 for them, as for a title that "
            "matches nothing; a window-standardised model (`esrr train --variant "
            "delta-32-lex3-window`) reads an empty title as unknown"
        )
    return IndexFit(stats.version, token_coverage, term_coverage, empty_titles, tuple(warnings))


class ScaleMonitor:
    """Each request's window mean of the paper-scale Lex features, in the model's training units.

    ``observe`` returns a warning once more than ``DRIFT_SHARE`` of the (at least ``MIN_REQUESTS``)
    full windows seen have a feature past ``SCALE_LIMIT``, and again every ``SCALE_REPORT_EVERY``
    windows while that lasts; thread-safe.
    """

    def __init__(self, names: Sequence[str], mean: np.ndarray, std: np.ndarray) -> None:
        self.columns = [j for j, name in enumerate(names) if not name.endswith(WINDOW_SUFFIX)]
        self.names = [names[j] for j in self.columns]
        self.mean = np.asarray(mean, dtype=np.float64)[self.columns]
        self.std = np.maximum(np.asarray(std, dtype=np.float64)[self.columns], 1e-12)
        self.windows = self.drifting = 0
        self._warned_at: int | None = None
        self._lock = threading.Lock()

    def observe(self, lex: np.ndarray) -> str | None:
        """Count one request's features (float32 [n, L]); a warning with the figures when it is time to say."""
        if not self.columns or lex.shape[0] < MIN_WINDOW:
            return None
        units = (lex[:, self.columns].mean(axis=0) - self.mean) / self.std
        worst = int(np.argmax(np.abs(units)))
        with self._lock:
            self.windows += 1
            self.drifting += bool(abs(units[worst]) > SCALE_LIMIT)
            windows, drifting = self.windows, self.drifting
            due = self._warned_at is None or windows - self._warned_at >= SCALE_REPORT_EVERY
            if windows < MIN_REQUESTS or drifting / windows <= DRIFT_SHARE or not due:
                return None
            self._warned_at = windows
        return (
            f"{drifting} of the {windows} windows scored so far ({drifting / windows:.0%}) have a Lex feature "
            f"more than {SCALE_LIMIT:g} training standard deviations from the model's training mean (this one: "
            f"{self.names[worst]} at {units[worst]:+.1f}): the model reads inputs off the scale it was trained "
            "on (long queries, another collection); a window-standardised model (`esrr train --variant "
            "delta-32-lex3-window`) reads them on the window's own scale"
        )
