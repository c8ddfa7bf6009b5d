"""Statistics written to disk as a stream of tokenized batches: memory bounded whatever the corpus size.

``tokenize_batch`` (pure; run in worker processes) turns a batch of documents into
batch-local term ids, the batch's own vocabulary with its keys, and each field's
document frequencies within the batch. ``StatsWriter`` (one, in the process that
owns the build) takes the batches in corpus order: it maps batch-local ids to
global ones with a sorted key table (numpy arrays, no Python object per term),
appends the id arrays, their row pointers, each new term's embedding-path id, the
vocabulary and the document ids to files, adds the document frequencies, and at
``finish`` writes the sorted key indexes and ``meta.json`` last. New terms get ids in the order of their first
appearance in the corpus (title, then abstract, then the first tokens of the
embedding path, document after document), exactly as ``Vocabulary.add`` does in the
in-memory ``build_stats``, so both builds give the same files.

What stays in RAM grows with the vocabulary, not the documents: 20 bytes a term for
the key table and 12 for the document frequencies, plus 8 bytes a document for the
duplicate check of document ids (numpy arrays).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from es_rerank.manifest import write_manifest
from es_rerank.stats import FIELDS, FIRST_TOKENS, STATS_FORMAT, DocTerms, statistics_files
from es_rerank.string_table import KeySet, NpyAppender, SortedRuns, StringTableWriter, string_checks, string_keys
from es_rerank.text import NUMBER_CLASSES, number_class, tokenize

PARTS = ("title", "abstract")  # the ragged arrays written (the first tokens derive from them: embedding_of)
_CLASS_INDEX = {name: i for i, name in enumerate(NUMBER_CLASSES)}


@dataclass
class TokenizedBatch:
    """A batch of documents tokenized against a vocabulary of its own."""

    doc_ids: list[str]
    titles: list[str]
    texts: list[str]  # title + abstract lexical tokens joined by spaces: what the BM25 index reads
    doc_keys: np.ndarray  # uint64 [n]
    terms: list[str]  # the batch's vocabulary, in order of first appearance
    term_keys: np.ndarray  # uint64 [len(terms)]
    term_checks: np.ndarray  # uint64 [len(terms)]
    term_classes: np.ndarray  # int8 [len(terms)]: the index in NUMBER_CLASSES of a number's class, else -1
    lengths: np.ndarray  # int32 [3, n]: title, abstract, first lengths
    ids: tuple[np.ndarray, np.ndarray, np.ndarray]  # int32 batch-local ids of title, abstract, first
    df: np.ndarray  # int32 [3, len(terms)]: title, abstract, text document frequencies within the batch
    # Each document's ``_source`` (``Document.source``: the text and the metadata people read), attached by
    # ``index_setup.ingest`` in the building process: the tokenizing processes need not carry it.
    sources: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.doc_ids)


def _unique_pairs(rows: np.ndarray, ids: np.ndarray, n_terms: int) -> np.ndarray:
    """The distinct ``row * n_terms + id`` of a field's tokens, sorted (a sort: numpy's hashed unique is slower)."""
    pairs = np.sort(rows * max(n_terms, 1) + ids)
    if len(pairs) < 2:
        return pairs
    keep = np.empty(len(pairs), dtype=bool)
    keep[0] = True
    np.not_equal(pairs[1:], pairs[:-1], out=keep[1:])
    return pairs[keep]


def tokenize_batch(documents: Sequence[tuple[str, str, str]]) -> TokenizedBatch:
    """Tokenize ``(doc_id, title, abstract)`` triples into a ``TokenizedBatch``."""
    lexical: list[str] = []  # every document's title then abstract tokens, in corpus order
    title_lengths, abstract_lengths, texts = [], [], []
    for _, title, abstract in documents:
        title_tokens, abstract_tokens = tokenize(title), tokenize(abstract)
        title_lengths.append(len(title_tokens))
        abstract_lengths.append(len(abstract_tokens))
        lexical += title_tokens
        lexical += abstract_tokens
        texts.append(" ".join(title_tokens + abstract_tokens))
    # Batch-local ids in order of first appearance, with dict operations in C rather than a Python loop per token.
    terms = list(dict.fromkeys(lexical))
    local = dict(zip(terms, range(len(terms))))
    lexical_ids = np.fromiter(map(local.__getitem__, lexical), dtype=np.int32, count=len(lexical))
    n_docs = len(documents)
    lengths = np.zeros((3, n_docs), dtype=np.int32)
    lengths[0], lengths[1] = title_lengths, abstract_lengths
    per_doc = lengths[0] + lengths[1]
    lengths[2] = np.minimum(per_doc, FIRST_TOKENS)
    rows = np.repeat(np.arange(n_docs, dtype=np.int64), per_doc)
    within = np.arange(len(lexical), dtype=np.int64) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
    in_title = within < np.repeat(lengths[0], per_doc)
    # The embedding path maps numbers to their class, a function of the term alone: worked out once a term. The
    # classes are in every vocabulary from the start, so appending them here changes no new term's global id.
    embedding = np.arange(len(terms), dtype=np.int32)
    classes = np.full(len(terms), -1, dtype=np.int8)
    for term_id, term in enumerate(list(terms)):
        number = number_class(term)
        if number is not None:
            classes[term_id] = _CLASS_INDEX[number]
            embedding[term_id] = local.setdefault(number, len(local))
            if len(local) > len(terms):
                terms.append(number)
    classes = np.concatenate([classes, np.full(len(terms) - len(classes), -1, dtype=np.int8)])
    first = embedding[lexical_ids[within < FIRST_TOKENS]]
    ids = (lexical_ids[in_title], lexical_ids[~in_title], first)
    n_terms = len(terms)
    df = np.zeros((3, n_terms), dtype=np.int32)
    title_pairs = _unique_pairs(rows[in_title], ids[0], n_terms)
    abstract_pairs = _unique_pairs(rows[~in_title], ids[1], n_terms)
    df[0] = np.bincount(title_pairs % max(n_terms, 1), minlength=n_terms)
    df[1] = np.bincount(abstract_pairs % max(n_terms, 1), minlength=n_terms)
    df[2] = np.bincount(_unique_pairs(rows, lexical_ids, n_terms) % max(n_terms, 1), minlength=n_terms)
    return TokenizedBatch(
        [d[0] for d in documents],
        [d[1] for d in documents],
        texts,
        string_keys(d[0] for d in documents),
        terms,
        string_keys(terms),
        string_checks(terms),
        classes,
        lengths,
        ids,
        df,
    )


@dataclass(frozen=True)
class WrittenBatch:
    """Where a batch went: its first row, and its documents' ids in the global vocabulary."""

    first_row: int
    ids: tuple[np.ndarray, np.ndarray, np.ndarray]  # int32 title, abstract, first ids of all documents, concatenated
    lengths: np.ndarray  # int32 [3, n]

    def doc_terms(self) -> list[DocTerms]:
        """Each document's ``DocTerms`` (for a backend that stores them with the document)."""
        ends = np.cumsum(self.lengths, axis=1)
        starts = ends - self.lengths
        return [
            DocTerms(*(self.ids[p][starts[p, i] : ends[p, i]] for p in range(3))) for i in range(self.lengths.shape[1])
        ]


class DuplicateDocumentError(ValueError):
    """A document id given twice to one build."""


class StatsWriter:
    """Builds a statistics directory (the format ``CorpusStats.load`` reads) from ``TokenizedBatch``es."""

    def __init__(self, directory: Path, version: str, build_id: str | None = None) -> None:
        self.directory, self.version = directory, version
        self.build_id = build_id or uuid.uuid4().hex
        directory.mkdir(parents=True, exist_ok=True)
        self.n_docs = 0
        self._vocab = StringTableWriter(directory, "vocab")
        self._doc_ids = StringTableWriter(directory, "doc_ids")
        self._values = {p: NpyAppender(directory / f"{p}_values.npy", np.int32) for p in PARTS}
        self._ptr = {p: NpyAppender(directory / f"{p}_ptr.npy", np.int64) for p in PARTS}
        for appender in self._ptr.values():
            appender.append(np.zeros(1, dtype=np.int64))
        self._embedding_of = NpyAppender(directory / "embedding_of.npy", np.int32)
        self._keys = SortedRuns(np.uint64, np.int32)  # the vocabulary's keys: each term's check and id
        self._df = np.zeros((3, 1024), dtype=np.int32)
        self._doc_keys = KeySet()
        # The classes first, so that class i has id i (embedding_of maps numbers to them).
        self._add_terms(
            list(NUMBER_CLASSES),
            string_keys(NUMBER_CLASSES),
            string_checks(NUMBER_CLASSES),
            np.full(len(NUMBER_CLASSES), -1, dtype=np.int8),
        )

    @property
    def n_terms(self) -> int:
        """Terms in the vocabulary so far."""
        return len(self._vocab)

    def _add_terms(self, terms: list[str], keys: np.ndarray, checks: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Give ``terms`` (new to the vocabulary; with their ``string_key``s, ``string_checks`` and number classes)
        the next ids."""
        ids = np.arange(self.n_terms, self.n_terms + len(terms), dtype=np.int32)
        self._vocab.append(terms, keys)
        self._embedding_of.append(np.where(classes >= 0, classes.astype(np.int32), ids))
        self._keys.add(keys, checks, ids)
        if self.n_terms > self._df.shape[1]:
            grown = np.zeros((3, max(self.n_terms, 2 * self._df.shape[1])), dtype=np.int32)
            grown[:, : self._df.shape[1]] = self._df
            self._df = grown
        return ids

    def _global_ids(self, batch: TokenizedBatch) -> np.ndarray:
        """Global id of each batch-local term, adding new terms in their order of first appearance."""
        found, (checks, global_ids) = self._keys.find(batch.term_keys)
        clash = found & (checks != batch.term_checks)
        if clash.any():
            term = batch.terms[int(np.flatnonzero(clash)[0])]
            raise ValueError(
                f"the term {term!r} shares its 64-bit key with another term of the vocabulary; "
                "this is a hash collision es-rerank does not handle: report it with the term"
            )
        new = np.flatnonzero(~found)
        if len(new):
            # the keys and checks the tokenizing process computed: not hashed a second time here
            global_ids[new] = self._add_terms(
                [batch.terms[i] for i in new], batch.term_keys[new], batch.term_checks[new], batch.term_classes[new]
            )
        return global_ids

    def add(self, batch: TokenizedBatch) -> WrittenBatch:
        """Append a batch's documents: their rows and global ids. ``DuplicateDocumentError`` on a document id
        seen before (nothing of the batch is written then)."""
        repeated = self._doc_keys.add_many(batch.doc_keys)
        if repeated.any():
            doc_id = batch.doc_ids[int(np.flatnonzero(repeated)[0])]
            raise DuplicateDocumentError(
                f"duplicate document id {doc_id!r} (document {self.n_docs + int(np.flatnonzero(repeated)[0]) + 1} "
                "of the load repeats an earlier one); document ids must be unique: remove or rename one of them "
                "(PubMed update files go under updatefiles/, where a later version replaces the earlier)"
            )
        global_ids = self._global_ids(batch)
        for part, name in enumerate(PARTS):  # the first tokens (part 2) are not written: they derive from these
            self._ptr[name].append(self._values[name].length + np.cumsum(batch.lengths[part], dtype=np.int64))
            self._values[name].append(global_ids[batch.ids[part]])
        self._df[:, global_ids] += batch.df
        self._doc_ids.append(batch.doc_ids, batch.doc_keys)
        first_row = self.n_docs
        self.n_docs += len(batch)
        return WrittenBatch(first_row, tuple(global_ids[local] for local in batch.ids), batch.lengths)

    def finish(self) -> dict:
        """Write the remaining files, ``meta.json`` last (its presence marks complete statistics); returns the meta."""
        for name in PARTS:
            self._values[name].finish()
            self._ptr[name].finish()
        for part, name in enumerate(FIELDS):
            np.save(self.directory / f"df_{name}.npy", self._df[part, : self.n_terms])
        self._embedding_of.finish()
        self._vocab.finish()
        self._doc_ids.finish()
        meta = {
            "format": STATS_FORMAT,
            "version": self.version,
            "build_id": self.build_id,
            "n_docs": self.n_docs,
            "n_terms": self.n_terms,
        }
        write_manifest(self.directory, statistics_files(self.directory))
        # The statistics are complete once meta.json is there.
        (self.directory / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        return meta

    def abort(self) -> None:
        """Close every file of a failed build (the caller deletes the directory)."""
        for appender in (*self._values.values(), *self._ptr.values(), self._embedding_of):
            appender.abort()
        self._vocab.abort()
        self._doc_ids.abort()
