"""The words a fuzzy word or a phrase's prefix stands for on the embedded index, as Lucene expands them for
Elasticsearch, and the tantivy queries of those words.

tantivy's own fuzzy query scores every match 1 and takes neither ``prefix_length`` nor
``max_expansions``, so the expansion is made here, over the words of the ``text`` field
(the statistics' vocabulary, those with a document frequency): Lucene's edit distance
(Levenshtein, a swap of two neighbours one edit when ``transpositions``; Damerau's
restricted form, as Lucene's automata), computed with numpy for every word of a length
within reach at once. Lucene keeps the ``max_expansions`` words of highest similarity
(1 for the word itself, else 1 - edits / the shorter length), the first in term order
among equals (``TopTermsBlendedFreqScoringRewrite``); each is searched by BM25 times its
similarity (Elasticsearch also blends the expanded words' frequencies, which tantivy's
BM25 does not). A phrase's prefix stands for the first ``max_expansions`` words of the
index starting with it, in term order (Lucene's ``MultiPhrasePrefixQuery``).

Cost: a fuzzy word reads the words of its length +-2 (a few thousand on NFCorpus) in
numpy, about a millisecond; its expansions count against ``ESRR_GATEWAY_MAX_QUERY_TERMS``
(``query_tree.check_cost``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

import numpy as np
import tantivy

from es_rerank.backends.query_tree import Fuzzy, PhrasePrefix, regex_literal


class TermDictionary:
    """The words of one field, sorted, and grouped by length as code points (for the edit distances)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = sorted(set(words))
        grouped: dict[int, list[str]] = {}
        for word in self.words:
            grouped.setdefault(len(word), []).append(word)
        self._by_length = {}
        for length, members in grouped.items():
            matrix = _code_points(members, length)
            self._by_length[length] = (members, matrix, _histograms(matrix))

    def fuzzy(
        self, word: str, edits: int, prefix_length: int = 0, max_expansions: int = 50, transpositions: bool = True
    ) -> list[tuple[str, float]]:
        """The words within ``edits`` edits of ``word`` whose first ``prefix_length`` characters are its own, each with
        Lucene's similarity, the ``max_expansions`` most similar (then first in term order) best first."""
        length = len(word)
        prefix = min(prefix_length, length)
        codes = _code_points([word], length)[0]
        histogram = _histograms(codes[None, :])[0].astype(np.int16)
        found: list[tuple[str, float]] = []
        for size in range(max(1, length - edits, prefix), length + edits + 1):
            group = self._by_length.get(size)
            if group is None:
                continue
            members, matrix, histograms = group
            # Each edit changes at most one character of each side's multiset (a swap none): a word whose
            # characters differ from this one's by more than `edits` is out of reach, without its distance.
            difference = histograms.astype(np.int16) - histogram
            near = np.maximum(np.maximum(difference, 0).sum(axis=1), np.maximum(-difference, 0).sum(axis=1)) <= edits
            if prefix:
                near &= (matrix[:, :prefix] == codes[:prefix]).all(axis=1)
            rows = np.flatnonzero(near)
            if not len(rows):
                continue
            distances = edit_distances(codes[prefix:], matrix[rows, prefix:], transpositions)
            for row, distance in zip(rows[distances <= edits], distances[distances <= edits]):
                similarity = 1.0 if distance == 0 else 1.0 - float(distance) / min(size, length)
                found.append((members[row], similarity))
        found.sort(key=lambda pair: (-pair[1], pair[0]))
        return found[:max_expansions]

    def starting_with(self, prefix: str, limit: int) -> list[str]:
        """The first ``limit`` words starting with ``prefix``, in term order."""
        start = bisect_left(self.words, prefix)
        found = []
        for word in self.words[start : start + limit]:
            if not word.startswith(prefix):
                break
            found.append(word)
        return found


def _code_points(words: list[str], length: int) -> np.ndarray:
    """``words`` of one ``length`` as a [len(words), length] array of code points."""
    joined = "".join(words).encode("utf-32-le")
    return np.frombuffer(joined, dtype=np.uint32).reshape(len(words), length)


_BUCKETS = 32  # characters are counted by code point modulo this: a shared bucket only lowers the bound


def _histograms(matrix: np.ndarray) -> np.ndarray:
    """Each row's characters counted into ``_BUCKETS`` buckets, [rows, _BUCKETS]."""
    counts = np.zeros((matrix.shape[0], _BUCKETS), dtype=np.uint8)
    rows = np.repeat(np.arange(matrix.shape[0]), matrix.shape[1])
    np.add.at(counts, (rows, (matrix % _BUCKETS).ravel()), 1)
    return counts


def edit_distances(word: np.ndarray, others: np.ndarray, transpositions: bool) -> np.ndarray:
    """The edit distance from ``word`` (code points) to each row of ``others`` (code points, all one length): one
    dynamic-programming row per character of ``word``, for every row of ``others`` at once (as columns)."""
    count, width = others.shape
    columns = np.ascontiguousarray(others.T)  # [width, count]: each step below reads whole rows of it
    steps = np.arange(width + 1, dtype=np.int32)[:, None]
    previous = np.repeat(steps, count, axis=1)
    before = previous
    for i in range(1, len(word) + 1):
        # Deletion and substitution from the row above; insertion is the running minimum along the row.
        best = np.minimum(previous[1:] + 1, previous[:-1] + (columns != word[i - 1]))
        if transpositions and i > 1 and width > 1:
            swapped = (columns[:-1] == word[i - 1]) & (columns[1:] == word[i - 2])
            best[1:] = np.where(swapped, np.minimum(best[1:], before[:-2] + 1), best[1:])
        row = np.concatenate([np.full((1, count), i, dtype=np.int32), best]) - steps
        before, previous = previous, np.minimum.accumulate(row, axis=0) + steps
    return previous[width]


def fuzzy_query(schema: tantivy.Schema, field: str, words: TermDictionary, node: Fuzzy) -> tantivy.Query:
    """The tantivy query of a fuzzy word: its expansions, each BM25-scored times its similarity."""
    Query, Occur = tantivy.Query, tantivy.Occur
    expanded = words.fuzzy(node.token, node.edits, node.prefix_length, node.max_expansions, node.transpositions)
    if not expanded:
        return Query.empty_query()
    clauses = [
        (Occur.Should, Query.boost_query(Query.term_query(schema, field, word), max(similarity, 0.0)))
        for word, similarity in expanded
    ]
    query = Query.boolean_query(clauses)
    return query if node.boost == 1.0 else Query.boost_query(query, node.boost)


def phrase_prefix_query(schema: tantivy.Schema, field: str, words: TermDictionary, node: PhrasePrefix) -> tantivy.Query:
    """The tantivy query of a phrase whose last word is a prefix: the phrase with that word any of its expansions."""
    Query, Occur = tantivy.Query, tantivy.Occur
    expanded = words.starting_with(node.tokens[-1], node.max_expansions)
    if not expanded:
        return Query.empty_query()
    if len(node.tokens) == 1:
        query = Query.boolean_query([(Occur.Should, Query.term_query(schema, field, word)) for word in expanded])
    else:
        # The last word as a regular expression of its expansions; tantivy compiles one of at most 1,000 states
        # (when the search runs), so the expansions are split into expressions that stay well within it.
        leading: list[str | tuple[int, str]] = [regex_literal(token) for token in node.tokens[:-1]]
        prefix = node.tokens[-1]
        query = Query.boolean_query(
            [
                (
                    Occur.Should,
                    Query.regex_phrase_query(
                        schema,
                        field,
                        leading
                        + [
                            regex_literal(prefix)
                            + "("
                            + "|".join(regex_literal(word[len(prefix) :]) for word in group)
                            + ")"
                        ],
                        node.slop,
                    ),
                )
                for group in _within_states(expanded, len(prefix))
            ]
        )
    return query if node.boost == 1.0 else Query.boost_query(query, node.boost)


REGEX_STATES = 600  # characters of one expression's words: tantivy refuses an automaton over 1,000 states


def _within_states(words: list[str], prefix: int) -> list[list[str]]:
    """``words`` (sharing a prefix of ``prefix`` characters) in groups whose expression stays within
    ``REGEX_STATES`` characters, each a state at most."""
    groups: list[list[str]] = [[]]
    size = prefix
    for word in words:
        grows = len(word) - prefix + 1
        if groups[-1] and size + grows > REGEX_STATES:
            groups.append([])
            size = prefix
        groups[-1].append(word)
        size += grows
    return groups
