"""The 18 lexical match features of section 4.2.2 of the Delta paper, in numpy.

All features are computed from the index-time statistics (``es_rerank.stats``), so
training, evaluation and serving get the same numbers whichever backend served the
hits. ``lex_features`` computes any subset by name, vectorised over a batch of
candidate documents; the greedy feature selection reruns over ``ALL_FEATURES``.

Weighting choices the paper leaves open: BM25 on a field uses that field's
document frequencies and average length (Lucene's idf and length norm); the
IDF-weighted overlap and Jaccard features weight each term by its idf over the
whole text (title + abstract), one notion of term significance for all fields.

Window-relative variants (not in the paper; ``WINDOW_SUFFIX``): any feature named with
``_wz`` is that feature standardised within the documents it is computed for, the query's
window (mean 0, standard deviation 1; all equal: 0). The paper's BM25 grows with the
query's length and the collection's statistics (a sentence-long query scores in the tens
where NFCorpus's short queries score a few points), so a model trained on NFCorpus reads
another collection's BM25 off its training scale; standardised within the window it reads
only how a document compares with the other candidates of its query. An empty title is
unknown, not a mismatch: before standardising, a title feature of a document without a
title takes the window's mean over the documents with one (all empty: 0 everywhere).
``LEX3_WINDOW`` is Lex3 on that scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter

import numpy as np

from es_rerank.stats import CorpusStats, DocTerms

# In the paper's order, (1) .. (18).
ALL_FEATURES: tuple[str, ...] = (
    "text_word_overlap",
    "text_bigram_overlap",
    "text_jaccard",
    "text_idf_word_overlap",
    "text_idf_jaccard",
    "title_bm25",
    "abstract_bm25",
    "text_bm25",
    "title_word_overlap",
    "title_bigram_overlap",
    "title_jaccard",
    "title_idf_word_overlap",
    "title_idf_jaccard",
    "abstract_word_overlap",
    "abstract_bigram_overlap",
    "abstract_jaccard",
    "abstract_idf_word_overlap",
    "abstract_idf_jaccard",
)
# Delta-32-Lex3 (section 5.1): BM25 on the abstract, IDF-weighted Jaccard with the
# title, IDF-weighted proportion of unique query words in the title.
LEX3: tuple[str, ...] = ("abstract_bm25", "title_idf_jaccard", "title_idf_word_overlap")
WINDOW_SUFFIX = "_wz"
WINDOW_FEATURES: tuple[str, ...] = tuple(name + WINDOW_SUFFIX for name in ALL_FEATURES)
LEX3_WINDOW: tuple[str, ...] = tuple(name + WINDOW_SUFFIX for name in LEX3)
KNOWN_FEATURES: tuple[str, ...] = ALL_FEATURES + WINDOW_FEATURES  # every name a model may read


class UnknownFeatureError(ValueError):
    """A requested Lex feature name does not exist."""


def check_feature_names(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` if they are distinct Lex features, at least one; else ``ValueError`` naming the fix."""
    unknown = [n for n in names if n not in KNOWN_FEATURES]
    if not names or unknown:
        problem = f"unknown Lex feature(s) {unknown}" if unknown else "no feature given"
        raise ValueError(
            f"{problem}; choose from {', '.join(ALL_FEATURES)}, each also with the suffix "
            f"{WINDOW_SUFFIX} (standardised within the query's window)"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{repeated} given twice; name each feature once")
    return tuple(names)


@dataclass(frozen=True)
class BM25Params:
    """Okapi BM25 parameters (Lucene's defaults; the paper used k1=2.0 on titles)."""

    k1: float = 1.2
    b: float = 0.75


class _FieldBatch:
    """One field of a batch of documents as flat token ids, with where each document's ids end."""

    def __init__(self, ids_per_doc: Sequence[np.ndarray]) -> None:
        self.n_docs = len(ids_per_doc)
        self.lengths = np.fromiter(map(len, ids_per_doc), dtype=np.int64, count=self.n_docs)
        self.ends = np.cumsum(self.lengths)
        self.ids = np.concatenate(ids_per_doc) if self.n_docs else np.zeros(0, np.int64)

    @cached_property
    def rows(self) -> np.ndarray:
        """The document (row) of each id."""
        return np.repeat(np.arange(self.n_docs), self.lengths)

    def term_frequencies(self, query_terms: np.ndarray) -> np.ndarray:
        """[n_docs, n_query_terms] counts of each (distinct, sorted) query term."""
        tf = np.zeros((self.n_docs, len(query_terms)), dtype=np.float64)
        if len(query_terms) == 0 or len(self.ids) == 0:
            return tf
        # Only the few ids that are query terms are placed: a query has a handful of terms, a window 10^5 ids.
        # A table of the query's terms, its last entry False for every id past them (ids are never negative).
        is_query_term = np.zeros(int(query_terms[-1]) + 2, dtype=bool)
        is_query_term[query_terms] = True
        found = np.flatnonzero(is_query_term.take(self.ids, mode="clip"))
        rows = np.searchsorted(self.ends, found, side="right")
        np.add.at(tf, (rows, np.searchsorted(query_terms, self.ids[found])), 1.0)
        return tf

    def unique_idf_sums(self, idf_of: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per document: number of distinct terms, and the sum of their idf."""
        if len(self.ids) == 0:
            return np.zeros(self.n_docs), np.zeros(self.n_docs)
        span = int(self.ids.max()) + 1
        keys = self.rows * span + self.ids
        keys.sort()  # np.unique's order, several times faster here than its hashing
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
        rows, terms = keys // span, keys % span
        counts = np.bincount(rows, minlength=self.n_docs).astype(np.float64)
        sums = np.bincount(rows, weights=idf_of(terms), minlength=self.n_docs)
        return counts, sums

    def bigram_presence(self, bigrams: np.ndarray) -> np.ndarray:
        """[n_docs, n_bigrams] 1.0 where the document field contains the bigram."""
        present = np.zeros((self.n_docs, len(bigrams)), dtype=np.float64)
        if len(bigrams) == 0 or len(self.ids) < 2:
            return present
        same_doc = self.rows[:-1] == self.rows[1:]
        first, second = self.ids[:-1], self.ids[1:]
        for j, (a, b) in enumerate(bigrams):
            hit = same_doc & (first == a) & (second == b)
            present[self.rows[:-1][hit], j] = 1.0
        return present


class _Query:
    """Distinct query terms, their idf weights and bigrams."""

    def __init__(self, query_ids: np.ndarray, stats: CorpusStats) -> None:
        ordered = np.asarray(query_ids, dtype=np.int64)
        self.terms = np.unique(ordered)  # sorted; unknown terms have negative ids
        self.known = self.terms[self.terms >= 0]
        self.known_mask = self.terms >= 0
        self.idf = stats.idf(self.terms, "text")
        pairs = {(int(a), int(b)) for a, b in zip(ordered[:-1], ordered[1:])}
        self.bigrams = np.asarray(sorted(pairs), dtype=np.int64).reshape(-1, 2)


def lex_features(
    query_ids: np.ndarray,
    docs: Sequence[DocTerms],
    stats: CorpusStats,
    names: Sequence[str] = LEX3,
    bm25: BM25Params = BM25Params(),
) -> np.ndarray:
    """[len(docs), len(names)] float32 Lex features of one query against its candidates.

    ``query_ids`` are lexical term ids from ``stats.vocab.lookup(tokenize(query))``.
    """
    unknown = [n for n in names if n not in KNOWN_FEATURES]
    if unknown:
        raise UnknownFeatureError(
            f"unknown Lex feature(s) {unknown}; choose from {list(ALL_FEATURES)}, each also "
            f"with the suffix {WINDOW_SUFFIX}"
        )
    if not names or not docs:
        return np.zeros((len(docs), len(names)), dtype=np.float32)
    window = _Window(_Query(query_ids, stats), docs, stats, bm25)
    return np.stack([window.feature(n) for n in names], axis=1).astype(np.float32)


class _Window:
    """One query's candidates: the field batches, term frequencies and idf sums that several features share,
    each computed once, on first use."""

    def __init__(self, query: _Query, docs: Sequence[DocTerms], stats: CorpusStats, bm25: BM25Params) -> None:
        self.query, self.docs, self.stats, self.bm25 = query, docs, stats, bm25
        self._fields: dict[str, _FieldBatch] = {}
        self._tf: dict[str, np.ndarray] = {}
        self._unique: dict[str, np.ndarray] = {}

    def feature(self, name: str) -> np.ndarray:
        """[n_docs] values of one of ``KNOWN_FEATURES``."""
        if name.endswith(WINDOW_SUFFIX):
            return self._window_relative(name[: -len(WINDOW_SUFFIX)])
        field_name, kind = name.split("_", 1)
        if kind == "bm25":
            return self._bm25(field_name)
        if kind == "bigram_overlap":
            return self._bigram_overlap(field_name)
        return self._term_match(field_name, kind)

    def _field(self, name: str) -> _FieldBatch:
        if name not in self._fields:
            if name == "text":
                self._fields[name] = _FieldBatch([np.concatenate([d.title_ids, d.abstract_ids]) for d in self.docs])
            else:
                self._fields[name] = _FieldBatch(list(map(attrgetter(f"{name}_ids"), self.docs)))
        return self._fields[name]

    def _term_frequencies(self, name: str) -> np.ndarray:
        if name not in self._tf:
            tf = np.zeros((len(self.docs), len(self.query.terms)))
            tf[:, self.query.known_mask] = self._field(name).term_frequencies(self.query.known)
            self._tf[name] = tf
        return self._tf[name]

    def _unique_terms(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self._unique:
            self._unique[name] = np.stack(self._field(name).unique_idf_sums(lambda t: self.stats.idf(t, "text")))
        return self._unique[name][0], self._unique[name][1]

    def _bm25(self, field_name: str) -> np.ndarray:
        bm25, stats = self.bm25, self.stats
        tf = self._term_frequencies(field_name)
        lengths = self._field(field_name).lengths[:, None]
        norm = bm25.k1 * (1 - bm25.b + bm25.b * lengths / max(stats.avg_length(field_name), 1e-9))
        idf = stats.idf(self.query.terms, field_name)
        # tf == 0 terms add nothing; skipping them avoids 0/0 when norm is 0
        # (b = 1 and an empty field, e.g. a PubMed record without abstract).
        denominator = np.where(tf > 0, tf + norm, 1.0)
        return (idf * tf * (bm25.k1 + 1) / denominator).sum(axis=1)

    def _bigram_overlap(self, field_name: str) -> np.ndarray:
        if len(self.query.bigrams) == 0:
            return np.zeros(len(self.docs))
        return self._field(field_name).bigram_presence(self.query.bigrams).mean(axis=1)

    def _term_match(self, field_name: str, kind: str) -> np.ndarray:
        """word_overlap, idf_word_overlap, jaccard or idf_jaccard of the query's terms with one field."""
        query = self.query
        present = self._term_frequencies(field_name) > 0
        matched = present.sum(axis=1)
        if kind == "word_overlap":
            return matched / max(len(query.terms), 1)
        if kind == "jaccard":
            n_unique, _ = self._unique_terms(field_name)
            return matched / np.maximum(len(query.terms) + n_unique - matched, 1)
        matched_idf = (present * query.idf).sum(axis=1)
        query_idf = max(query.idf.sum(), 1e-12)
        if kind == "idf_word_overlap":
            return matched_idf / query_idf
        _, unique_idf = self._unique_terms(field_name)
        return matched_idf / np.maximum(query_idf + unique_idf - matched_idf, 1e-12)  # idf_jaccard

    def _window_relative(self, name: str) -> np.ndarray:
        """``name`` standardised within the window, a title feature's missing titles at the titled mean first."""
        values = self.feature(name).astype(np.float64)
        if name.startswith("title_"):
            titled = self._field("title").lengths > 0
            values = np.where(titled, values, values[titled].mean() if titled.any() else 0.0)
        return standardised(values)


def standardised(values: np.ndarray) -> np.ndarray:
    """float64 values of one window (a query's hits) minus their mean, divided by their spread (all equal: zeros).

    The one per-query scale of the package: the window-relative Lex features, and every score that
    the guard, the feedback, the votes and an ensemble add up.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    centred = values - values.mean()
    spread = centred.std()
    return centred / spread if spread > 1e-12 else np.zeros_like(centred)
