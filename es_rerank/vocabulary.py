"""The term <-> id table shared by the lexical and the embedding path: grown in memory while a corpus is
tokenized (``Vocabulary``), memory-mapped once saved (``MappedVocabulary``, no Python object per term)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from es_rerank.string_table import StringTable
from es_rerank.text import NUMBER_CLASSES, number_class


class Vocabulary:
    """Term <-> id table shared by the lexical and the embedding path."""

    def __init__(self, terms: Sequence[str] = NUMBER_CLASSES) -> None:
        self.terms: list[str] = list(terms)
        self.ids: dict[str, int] = {t: i for i, t in enumerate(self.terms)}

    def __len__(self) -> int:
        return len(self.terms)

    def add(self, tokens: Iterable[str]) -> np.ndarray:
        """Ids of ``tokens``, adding unseen terms to the table."""
        ids, terms = self.ids, self.terms
        for token in tokens:
            if token not in ids:
                ids[token] = len(terms)
                terms.append(token)
        return np.array([ids[t] for t in tokens], dtype=np.int32)

    def lookup(self, tokens: Iterable[str]) -> np.ndarray:
        """Ids of ``tokens``; each distinct unknown term gets its own negative id."""
        return _lookup(self.ids, tokens)


def _lookup(ids: Mapping[str, int] | TermIds, tokens: Iterable[str]) -> np.ndarray:
    unknown: dict[str, int] = {}
    out = []
    for t in tokens:
        term_id = ids.get(t)
        if term_id is None:  # -1, -2, ... in order of first appearance
            term_id = unknown.setdefault(t, -1 - len(unknown))
        out.append(term_id)
    return np.asarray(out, dtype=np.int32)


class TermIds:
    """Term -> id of a mapped vocabulary, read like the dict ``Vocabulary.ids``."""

    def __init__(self, terms: StringTable) -> None:
        self._terms = terms

    def get(self, term: str, default: int | None = None) -> int | None:
        """The id of ``term``, ``default`` when it is not in the vocabulary."""
        row = self._terms.row_of(term)
        return default if row is None else row

    def __getitem__(self, term: str) -> int:
        row = self._terms.row_of(term)
        if row is None:
            raise KeyError(term)
        return row

    def __contains__(self, term: object) -> bool:
        return term in self._terms

    def __len__(self) -> int:
        return len(self._terms)


class MappedVocabulary:
    """A saved vocabulary, memory-mapped: ``terms[id]`` and ``ids[term]`` cost no memory per term."""

    def __init__(self, terms: StringTable) -> None:
        self.terms = terms
        self.ids = TermIds(terms)

    def __len__(self) -> int:
        return len(self.terms)

    def lookup(self, tokens: Iterable[str]) -> np.ndarray:
        """Ids of ``tokens``; each distinct unknown term gets its own negative id."""
        return _lookup(self.ids, tokens)


def embedding_map(terms: Iterable[str], ids: Mapping[str, int] | TermIds) -> np.ndarray:
    """int32 [n_terms]: the id of each term's embedding-path form (its number class, or itself)."""
    embedding = []
    for term_id, term in enumerate(terms):
        number = number_class(term)
        # a class not in the vocabulary was never in anyone's first tokens: the term may map to itself
        embedding.append(term_id if number is None else ids.get(number, term_id))
    return np.asarray(embedding, dtype=np.int32)
