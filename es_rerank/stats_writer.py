"""Statistics written to disk as a stream of tokenized batches: memory bounded whatever the corpus size.

``tokenize_batch`` (pure; run in worker processes) turns a batch of documents into
batch-local term ids, the batch's own vocabulary with its keys, and each field's
document frequencies within the batch. ``StatsWriter`` (one, in the process that
owns the build) takes the batches in corpus order: it maps batch-local ids to
global ones with a sorted key table (numpy arrays, no Python object per term),
appends the id arrays, lengths, vocabulary and document ids to files, adds the
document frequencies, and at ``finish`` writes the row pointers, the sorted key
indexes and ``meta.json`` last. New terms get ids in the order of their first
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from es_rerank.manifest import write_manifest
from es_rerank.stats import FIELDS, FIRST_TOKENS, STATS_FORMAT, DocTerms, statistics_files
from es_rerank.string_table import KeySet, NpyAppender, StringTableWriter, string_checks, string_keys
from es_rerank.text import NUMBER_CLASSES, embedding_tokens, tokenize

PARTS = ("title", "abstract", "first")  # the ragged arrays of every document


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
    lengths: np.ndarray  # int32 [3, n]: title, abstract, first lengths
    ids: tuple[np.ndarray, np.ndarray, np.ndarray]  # int32 batch-local ids of title, abstract, first
    df: np.ndarray  # int32 [3, len(terms)]: title, abstract, text document frequencies within the batch
    # Each document's ``_source`` (``Document.source``: the text and the metadata people read), attached by
    # ``index_setup.ingest`` in the building process: the tokenizing processes need not carry it.
    sources: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.doc_ids)


def tokenize_batch(documents: Sequence[tuple[str, str, str]]) -> TokenizedBatch:
    """Tokenize ``(doc_id, title, abstract)`` triples into a ``TokenizedBatch``."""
    local: dict[str, int] = {}
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    lengths = np.zeros((3, len(documents)), dtype=np.int32)
    texts = []
    for row, (_, title, abstract) in enumerate(documents):
        title_tokens, abstract_tokens = tokenize(title), tokenize(abstract)
        lexical = title_tokens + abstract_tokens
        for part, tokens in enumerate((title_tokens, abstract_tokens, embedding_tokens(lexical[:FIRST_TOKENS]))):
            parts[part].extend([local.setdefault(t, len(local)) for t in tokens])
            lengths[part, row] = len(tokens)
        texts.append(" ".join(lexical))
    terms = list(local)
    ids = tuple(np.asarray(p, dtype=np.int32) for p in parts)
    n_terms = len(terms)
    rows = [np.repeat(np.arange(len(documents), dtype=np.int64), lengths[part]) for part in range(2)]
    df = np.zeros((3, n_terms), dtype=np.int32)
    pairs = []
    for part in range(2):
        pairs.append(np.unique(rows[part] * max(n_terms, 1) + ids[part]))
        df[part] = np.bincount(pairs[part] % max(n_terms, 1), minlength=n_terms)
    df[2] = np.bincount(np.union1d(pairs[0], pairs[1]) % max(n_terms, 1), minlength=n_terms)
    return TokenizedBatch([d[0] for d in documents], [d[1] for d in documents], texts,
                          string_keys(d[0] for d in documents), terms, string_keys(terms), string_checks(terms),
                          lengths, ids, df)


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
        return [DocTerms(*(self.ids[p][starts[p, i]:ends[p, i]] for p in range(3))) for i in range(self.lengths.shape[1])]


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
        self._lengths = {p: NpyAppender(directory / f"{p}_lengths.tmp.npy", np.int32) for p in PARTS}
        self._keys = np.zeros(0, dtype=np.uint64)  # sorted keys of the vocabulary so far
        self._checks = np.zeros(0, dtype=np.uint64)  # aligned with _keys
        self._key_ids = np.zeros(0, dtype=np.int32)  # aligned with _keys: the term id
        self._df = np.zeros((3, 1024), dtype=np.int32)
        self._doc_keys = KeySet()
        self._add_terms(list(NUMBER_CLASSES), string_keys(NUMBER_CLASSES), string_checks(NUMBER_CLASSES))

    @property
    def n_terms(self) -> int:
        """Terms in the vocabulary so far."""
        return len(self._vocab)

    def _add_terms(self, terms: list[str], keys: np.ndarray, checks: np.ndarray) -> np.ndarray:
        """Give ``terms`` (new to the vocabulary; with their ``string_key``s and ``string_checks``) the next ids."""
        ids = np.arange(self.n_terms, self.n_terms + len(terms), dtype=np.int32)
        self._vocab.append(terms, keys)
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self._keys, keys[order])
        self._keys = np.insert(self._keys, at, keys[order])
        self._checks = np.insert(self._checks, at, checks[order])
        self._key_ids = np.insert(self._key_ids, at, ids[order])
        if self.n_terms > self._df.shape[1]:
            grown = np.zeros((3, max(self.n_terms, 2 * self._df.shape[1])), dtype=np.int32)
            grown[:, :self._df.shape[1]] = self._df
            self._df = grown
        return ids

    def _global_ids(self, batch: TokenizedBatch) -> np.ndarray:
        """Global id of each batch-local term, adding new terms in their order of first appearance."""
        n_local = len(batch.terms)
        global_ids = np.empty(n_local, dtype=np.int32)
        found = np.zeros(n_local, dtype=bool)
        if len(self._keys):
            position = np.minimum(np.searchsorted(self._keys, batch.term_keys), len(self._keys) - 1)
            found = self._keys[position] == batch.term_keys
            clash = found & (self._checks[position] != batch.term_checks)
            if clash.any():
                term = batch.terms[int(np.flatnonzero(clash)[0])]
                raise ValueError(f"the term {term!r} shares its 64-bit key with another term of the vocabulary; "
                                 "this is a hash collision es-rerank does not handle: report it with the term")
            global_ids[found] = self._key_ids[position[found]]
        new = np.flatnonzero(~found)
        if len(new):
            # the keys and checks the tokenizing process computed: not hashed a second time here
            global_ids[new] = self._add_terms([batch.terms[i] for i in new], batch.term_keys[new],
                                              batch.term_checks[new])
        return global_ids

    def add(self, batch: TokenizedBatch) -> "WrittenBatch":
        """Append a batch's documents: their rows and global ids. ``DuplicateDocumentError`` on a document id
        seen before (nothing of the batch is written then)."""
        repeated = self._doc_keys.add_many(batch.doc_keys)
        if repeated.any():
            doc_id = batch.doc_ids[int(np.flatnonzero(repeated)[0])]
            raise DuplicateDocumentError(
                f"duplicate document id {doc_id!r} (document {self.n_docs + int(np.flatnonzero(repeated)[0]) + 1} "
                "of the load repeats an earlier one); document ids must be unique: remove or rename one of them "
                "(PubMed update files go under updatefiles/, where a later version replaces the earlier)")
        global_ids = self._global_ids(batch)
        for part, name in enumerate(PARTS):
            self._values[name].append(global_ids[batch.ids[part]])
            self._lengths[name].append(batch.lengths[part])
        self._df[:, global_ids] += batch.df
        self._doc_ids.append(batch.doc_ids, batch.doc_keys)
        first_row = self.n_docs
        self.n_docs += len(batch)
        return WrittenBatch(first_row, tuple(global_ids[local] for local in batch.ids), batch.lengths)

    def finish(self) -> dict:
        """Write the remaining files, ``meta.json`` last (its presence marks complete statistics); returns the meta."""
        for name in PARTS:
            self._values[name].finish()
            self._lengths[name].finish()
            lengths_path = self.directory / f"{name}_lengths.tmp.npy"
            lengths = np.load(lengths_path, mmap_mode="r")
            ptr = np.lib.format.open_memmap(self.directory / f"{name}_ptr.npy", mode="w+", dtype=np.int64,
                                            shape=(self.n_docs + 1,))
            ptr[0] = 0
            np.cumsum(lengths, dtype=np.int64, out=ptr[1:])
            ptr.flush()
            del ptr, lengths
            lengths_path.unlink()
        for part, name in enumerate(FIELDS):
            np.save(self.directory / f"df_{name}.npy", self._df[part, :self.n_terms])
        self._vocab.finish()
        self._doc_ids.finish()
        meta = {"format": STATS_FORMAT, "version": self.version, "build_id": self.build_id,
                "n_docs": self.n_docs, "n_terms": self.n_terms}
        write_manifest(self.directory, statistics_files(self.directory))
        # The statistics are complete once meta.json is there.
        (self.directory / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        return meta

    def abort(self) -> None:
        """Close every file of a failed build (the caller deletes the directory)."""
        for appender in (*self._values.values(), *self._lengths.values()):
            appender.abort()
        self._vocab.abort()
        self._doc_ids.abort()

