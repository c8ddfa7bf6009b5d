"""Term statistics computed once at index time, and the Lex features built on them.

Per corpus: N, document frequencies per field (title, abstract, text = title +
abstract), average field lengths, and the term vocabulary. Per document: the
lexical token ids of title and abstract in order (term frequencies, lengths and
term sets all derive from these). The first ``FIRST_TOKENS`` embedding-path token
ids the neural model reads are derived from them, not stored: they are the first
lexical ids with each number mapped to its class, and ``embedding_of`` (one int32 a
term) holds that map (storing them took 200 bytes a document; format 2).

Everything here is pure numpy: data in, data out. ``CorpusStats.save`` writes one
directory of ``.npy`` files that ``CorpusStats.load`` memory-maps in milliseconds;
the directory name is the index version it describes. The vocabulary and the
document ids are memory-mapped string tables (``es_rerank.string_table``): a
loaded index holds no Python object per term or per document. ``build_stats``
builds in memory (small corpora, tests); ``es_rerank.stats_writer`` writes the
same files from a stream of batches, for corpora of any size.

Beside this module: ``es_rerank.vocabulary`` (the term <-> id tables),
``es_rerank.stats_format`` (the directory's format, fields and error) and
``es_rerank.stats_reader`` (opening and checking a saved directory). Their public
names are importable from here too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from es_rerank.held_files import HeldFile
from es_rerank.manifest import write_manifest
from es_rerank.stats_format import FIELDS, FIRST_TOKENS, STATS_FORMAT, StatsError, statistics_files
from es_rerank.stats_reader import read_statistics
from es_rerank.string_table import StringTable, write_string_table
from es_rerank.text import embedding_tokens, tokenize
from es_rerank.vocabulary import MappedVocabulary, Vocabulary, embedding_map

NO_DOCUMENTS = (
    "no documents were read, so there is nothing to index; check the corpus path and the load "
    "report (the served index is unchanged)"
)


@dataclass(frozen=True)
class Document:
    """One corpus record: an id, a title and an abstract, and the metadata people read (empty when unknown)."""

    doc_id: str
    title: str
    abstract: str
    journal: str = ""
    year: int | None = None
    authors: tuple[str, ...] = ()  # display names as PubMed gives them, "LastName Initials"
    mesh: tuple[str, ...] = ()  # MeSH descriptor names
    publication_types: tuple[str, ...] = ()
    doi: str | None = None
    metadata: Mapping | None = field(default=None, compare=False)  # a BEIR record's own `metadata`, as given

    def source(self) -> dict:
        """The document as both backends return it in ``_source`` (the names of the issue-26 contract)."""
        source: dict = {
            "doc_id": self.doc_id,
            "title": self.title,
            "abstract": self.abstract,
            "journal": self.journal,
            "authors": list(self.authors),
            "mesh": list(self.mesh),
            "publication_types": list(self.publication_types),
        }
        if self.year is not None:
            source["year"] = self.year
        if self.doi:
            source["doi"] = self.doi
        if self.metadata:
            source["metadata"] = dict(self.metadata)
        return source


@dataclass(frozen=True)
class DocTerms:
    """The per-document precomputed data that every backend returns with a hit."""

    title_ids: np.ndarray  # int32 [title_len] lexical term ids, in order
    abstract_ids: np.ndarray  # int32 [abstract_len]
    first_ids: np.ndarray  # int32 [<= FIRST_TOKENS] embedding-path term ids

    def as_json(self) -> dict[str, list[int]]:
        """Plain lists, as stored in an Elasticsearch document."""
        return {
            "title_ids": self.title_ids.tolist(),
            "abstract_ids": self.abstract_ids.tolist(),
            "first_ids": self.first_ids.tolist(),
        }

    @classmethod
    def from_json(cls, data: dict[str, list[int]]) -> DocTerms:
        """Inverse of ``as_json``."""
        return cls(
            np.asarray(data["title_ids"], dtype=np.int32),
            np.asarray(data["abstract_ids"], dtype=np.int32),
            np.asarray(data["first_ids"], dtype=np.int32),
        )


def _doc_terms(title_ids: np.ndarray, abstract_ids: np.ndarray, first_ids: np.ndarray) -> DocTerms:
    """``DocTerms(title_ids, abstract_ids, first_ids)``, its fields set in its ``__dict__`` as ``__init__`` sets them.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: twice the
    CPU of this, paid for every hit of every window (500 a search).
    """
    terms = object.__new__(DocTerms)
    attributes = terms.__dict__
    attributes["title_ids"] = title_ids
    attributes["abstract_ids"] = abstract_ids
    attributes["first_ids"] = first_ids
    return terms


def doc_terms(doc: Document, vocab: Vocabulary) -> DocTerms:
    """Tokenize one document into its precomputed data, growing ``vocab``."""
    title = tokenize(doc.title)
    abstract = tokenize(doc.abstract)
    first = embedding_tokens((title + abstract)[:FIRST_TOKENS])
    return DocTerms(vocab.add(title), vocab.add(abstract), vocab.add(first))


def _ragged(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate int arrays into (ptr [n+1], values) CSR form."""
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    ptr = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    values = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, np.int32)
    return ptr, values


def first_ptr_of(title_ptr: np.ndarray, abstract_ptr: np.ndarray) -> np.ndarray:
    """int64 [n_docs + 1]: where each document's first tokens start in ``first_values_of``."""
    lengths = np.minimum(np.diff(title_ptr) + np.diff(abstract_ptr), FIRST_TOKENS)
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return ptr


class Spans(NamedTuple):
    """Rows of one CSR field: where each starts in ``values``, how many ids it has, and the field's ids."""

    starts: np.ndarray  # int64 [rows]
    lengths: np.ndarray  # int64 [rows]
    values: np.ndarray

    @classmethod
    def of_rows(cls, ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> Spans:
        """The spans of ``rows`` (int64, any order, repeats allowed) of the field ``ptr`` / ``values``."""
        starts = ptr[rows]
        return cls(starts, ptr[rows + 1] - starts, values)


def first_ids_of(title: Spans, abstract: Spans, embedding_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ptr [rows + 1], int ids): the first tokens of each row, concatenated: its first ``FIRST_TOKENS`` lexical
    ids (title, then abstract) through ``embedding_of``, gathered for all rows at once."""
    from_title = np.minimum(title.lengths, FIRST_TOKENS)
    from_abstract = np.minimum(abstract.lengths, FIRST_TOKENS - from_title)
    ptr = np.zeros(len(from_title) + 1, dtype=np.int64)
    np.cumsum(from_title + from_abstract, out=ptr[1:])
    out = np.empty(int(ptr[-1]), dtype=np.intp)
    for counts, spans, offset in ((from_title, title, 0), (from_abstract, abstract, from_title)):
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        out[np.repeat(ptr[:-1] + offset, counts) + within] = np.asarray(spans.values)[
            np.repeat(spans.starts, counts) + within
        ]
    return ptr, np.asarray(embedding_of)[out]


def first_values_of(
    title_ptr: np.ndarray,
    title_values: np.ndarray,
    abstract_ptr: np.ndarray,
    abstract_values: np.ndarray,
    embedding_of: np.ndarray,
) -> np.ndarray:
    """int32: every document's first tokens, concatenated (reads the whole corpus: for training and checks)."""
    title_ptr, abstract_ptr = np.asarray(title_ptr), np.asarray(abstract_ptr)
    title = Spans(title_ptr[:-1], np.diff(title_ptr), title_values)
    abstract = Spans(abstract_ptr[:-1], np.diff(abstract_ptr), abstract_values)
    return first_ids_of(title, abstract, embedding_of)[1]


def _document_frequency(ptr: np.ndarray, values: np.ndarray, n_terms: int) -> np.ndarray:
    """Number of documents (CSR rows) containing each term."""
    rows = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    unique_pairs = np.unique(rows * n_terms + values)
    return np.bincount(unique_pairs % n_terms, minlength=n_terms).astype(np.int32)


@dataclass
class CorpusStats:
    """Corpus-level statistics plus every document's precomputed data, in CSR arrays."""

    version: str
    doc_ids: Sequence[str]  # a list when built in memory, a StringTable when loaded
    vocab: Vocabulary | MappedVocabulary
    title_ptr: np.ndarray
    title_values: np.ndarray
    abstract_ptr: np.ndarray
    abstract_values: np.ndarray
    embedding_of: np.ndarray  # int32 [n_terms]: each term's embedding-path form (``embedding_map``)
    df: dict[str, np.ndarray] = field(default_factory=dict)
    # Which build of ``version`` these are: a version name freed by a prune can be built again.
    build_id: str = ""
    _row_of: dict[str, int] | None = field(default=None, repr=False)
    # The files the arrays are mapped from (``load``): checked for changes before a search reads them.
    _held: tuple[HeldFile, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self.build_id = self.build_id or self.version  # statistics saved before build ids: the name

    @classmethod
    def build(
        cls, version: str, docs: Sequence[tuple[str, DocTerms]], vocab: Vocabulary, build_id: str | None = None
    ) -> CorpusStats:
        """Assemble the statistics from tokenized documents (see ``doc_terms``); ``build_id`` defaults to a new one."""
        title_ptr, title_values = _ragged([d.title_ids for _, d in docs])
        abstract_ptr, abstract_values = _ragged([d.abstract_ids for _, d in docs])
        stats = cls(
            version,
            [i for i, _ in docs],
            vocab,
            title_ptr,
            title_values,
            abstract_ptr,
            abstract_values,
            embedding_map(vocab.terms, vocab.ids),
            build_id=build_id or uuid.uuid4().hex,
        )
        n = len(vocab)
        text_ptr, text_values = _ragged([np.concatenate([d.title_ids, d.abstract_ids]) for _, d in docs])
        stats.df = {
            "title": _document_frequency(title_ptr, title_values, n),
            "abstract": _document_frequency(abstract_ptr, abstract_values, n),
            "text": _document_frequency(text_ptr, text_values, n),
        }
        return stats

    @property
    def first_ptr(self) -> np.ndarray:
        """Row pointers of ``first_values`` (computed: O(documents) memory, not for serving)."""
        return first_ptr_of(self.title_ptr, self.abstract_ptr)

    @property
    def first_values(self) -> np.ndarray:
        """Every document's first embedding-path ids, concatenated (computed from the whole corpus: for training
        and checks, not for serving)."""
        return first_values_of(
            self.title_ptr, self.title_values, self.abstract_ptr, self.abstract_values, self.embedding_of
        )

    @property
    def n_docs(self) -> int:
        """Number of indexed documents."""
        return len(self.doc_ids)

    def avg_length(self, field_name: str) -> float:
        """Mean token length of a field (one of ``FIELDS``) over the corpus."""
        if field_name not in FIELDS:
            raise StatsError(f"unknown field {field_name!r}; choose from {list(FIELDS)}")
        if self.n_docs == 0:
            return 0.0
        total = {"title": int(self.title_ptr[-1]), "abstract": int(self.abstract_ptr[-1])}
        total["text"] = total["title"] + total["abstract"]
        return total[field_name] / self.n_docs

    def idf(self, term_ids: np.ndarray, field_name: str = "text") -> np.ndarray:
        """Lucene's BM25 idf, log(1 + (N - df + 0.5) / (df + 0.5)); unknown ids get df 0."""
        df_table = self.df[field_name]
        known = term_ids >= 0
        df = np.zeros(len(term_ids), dtype=np.float64)
        df[known] = df_table[term_ids[known]]
        return np.log1p((self.n_docs - df + 0.5) / (df + 0.5))

    def __contains__(self, doc_id: object) -> bool:
        """Whether the statistics (and so the index they describe) hold this document id."""
        return isinstance(doc_id, str) and self._row_of_id(doc_id) is not None

    def _row_of_id(self, doc_id: str) -> int | None:
        if isinstance(self.doc_ids, StringTable):
            return self.doc_ids.row_of(doc_id)
        if self._row_of is None:  # built in memory: small
            self._row_of = {d: i for i, d in enumerate(self.doc_ids)}
        return self._row_of.get(doc_id)

    def row(self, doc_id: str) -> int:
        """Row index of a document id."""
        row = self._row_of_id(doc_id)
        if row is None:
            raise StatsError(
                f"document {doc_id!r} is not in statistics version {self.version!r}; "
                "rebuild the index so hits and statistics come from the same load"
            )
        return row

    def doc_terms(self, row: int) -> DocTerms:
        """The precomputed data of one document row."""
        title = self.title_values[self.title_ptr[row] : self.title_ptr[row + 1]]
        abstract = self.abstract_values[self.abstract_ptr[row] : self.abstract_ptr[row + 1]]
        first = (
            title[:FIRST_TOKENS]
            if len(title) >= FIRST_TOKENS
            else np.concatenate((title, abstract[: FIRST_TOKENS - len(title)]))
        )
        return DocTerms(title, abstract, self.embedding_of[first])

    def doc_ids_at(self, rows: Sequence[int]) -> list[str]:
        """The document ids of ``rows``, looked up together (a search's hits)."""
        if isinstance(self.doc_ids, StringTable):
            return self.doc_ids.take(rows)
        return [self.doc_ids[row] for row in rows]

    def doc_terms_at(self, rows: Sequence[int] | np.ndarray) -> list[DocTerms]:
        """``doc_terms`` of each of ``rows`` (a search's hits), read together: the rows' bounds in one gather, their
        first tokens in one (never the whole corpus's ``first_values``), then one view of each field per row."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return []
        if rows.min() < 0 or rows.max() >= self.n_docs:
            raise IndexError(f"rows {rows.min()}..{rows.max()} reach outside the {self.n_docs} documents")
        title = Spans.of_rows(self.title_ptr, self.title_values, rows)
        abstract = Spans.of_rows(self.abstract_ptr, self.abstract_values, rows)
        first_ptr, first = first_ids_of(title, abstract, self.embedding_of)
        first.flags.writeable = False  # one buffer for all rows: a write to one hit's ids would change another's
        ends = (title.starts + title.lengths, abstract.starts + abstract.lengths, first_ptr[1:])
        bounds = np.stack((title.starts, ends[0], abstract.starts, ends[1], first_ptr[:-1], ends[2])).tolist()
        titles, abstracts = self.title_values, self.abstract_values
        return [_doc_terms(titles[t0:t1], abstracts[a0:a1], first[f0:f1]) for t0, t1, a0, a1, f0, f1 in zip(*bounds)]

    def save(self, directory: Path) -> None:
        """Write the statistics as memory-mappable files under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {
            "title_ptr": self.title_ptr,
            "title_values": self.title_values,
            "abstract_ptr": self.abstract_ptr,
            "abstract_values": self.abstract_values,
            "embedding_of": np.asarray(self.embedding_of, dtype=np.int32),
            **{f"df_{name}": values for name, values in self.df.items()},
        }
        for name, values in arrays.items():
            np.save(directory / f"{name}.npy", values)
        write_string_table(directory, "vocab", list(self.vocab.terms))
        write_string_table(directory, "doc_ids", list(self.doc_ids))
        write_manifest(directory, statistics_files(directory))
        meta = {
            "format": STATS_FORMAT,
            "version": self.version,
            "build_id": self.build_id,
            "n_docs": self.n_docs,
            "n_terms": len(self.vocab),
        }
        # meta.json last: its presence marks a complete directory.
        (directory / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, check_ids: bool = False) -> CorpusStats:
        """Memory-map statistics written by ``save``; ``check_ids`` also reads every term id (once, before serving).

        The shapes, dtypes and row pointers, and each file's size against ``manifest.json``,
        are always checked (cheap); the term ids and the files' checksums only when asked,
        since that reads the whole corpus: ``esrr index use`` does (``es_rerank.stats_reader``).
        The arrays are mapped from descriptors held open (``es_rerank.held_files``), so
        ``changed_files`` can tell a file changed under the process before a search reads it.
        """
        saved = read_statistics(directory, check_ids)
        stats = cls(
            saved.version,
            saved.doc_ids,
            MappedVocabulary(saved.terms),
            saved.title_ptr,
            saved.title_values,
            saved.abstract_ptr,
            saved.abstract_values,
            saved.embedding_of,
            df=saved.df,
            build_id=saved.build_id,
        )
        stats._held = saved.held
        return stats

    @property
    def held_files(self) -> tuple[HeldFile, ...]:
        """The files the arrays are mapped from (``load``); none when built in memory."""
        return self._held

    def changed_files(self) -> str | None:
        """How the files of these statistics changed since ``load`` opened and checked them (file names, no
        paths), None when none did or they were never loaded from files."""
        changes = [change for file in self._held if (change := file.change()) is not None]
        if not changes:
            return None
        return (
            f"the statistics of index version {self.version!r} changed on disk after they were opened and "
            f"checked ({'; '.join(changes)}), so searches would read other data than the build wrote, or "
            "end the process; serve another version (`esrr index use`) or rebuild it (`esrr index build`), "
            "then reload"
        )


def saved_build_id(directory: Path) -> str | None:
    """The build id of the statistics saved in ``directory`` (their version for older ones), None if unreadable."""
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        return str(meta.get("build_id") or meta["version"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def iter_doc_terms(documents: Iterable[Document], vocab: Vocabulary) -> Iterator[tuple[Document, DocTerms]]:
    """Each document with its precomputed data (growing ``vocab``); a repeated id is an error.

    Not skipped like a malformed record: which of the two is the right text is the
    corpus owner's call (a PubMed update repeats a PMID to revise it).
    """
    first_seen: dict[str, int] = {}
    for number, doc in enumerate(documents, start=1):
        if doc.doc_id in first_seen:
            raise ValueError(
                f"duplicate document id {doc.doc_id!r} (documents {first_seen[doc.doc_id]} and {number} "
                "of the load); document ids must be unique: remove or rename one of them (PubMed "
                "update files repeat PMIDs on purpose: load the baseline files only)"
            )
        first_seen[doc.doc_id] = number
        yield doc, doc_terms(doc, vocab)


def build_stats(version: str, documents: Iterable[Document]) -> CorpusStats:
    """Tokenize documents and compute all statistics in one pass."""
    vocab = Vocabulary()
    docs = [(doc.doc_id, terms) for doc, terms in iter_doc_terms(documents, vocab)]
    return CorpusStats.build(version, docs, vocab)
