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
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from es_rerank.held_files import FileBeingWritten, HeldFile, NotNumpyError, map_npy
from es_rerank.manifest import (
    ManifestError,
    check_checksum,
    check_size,
    checksum_of_descriptor,
    read_manifest,
    write_manifest,
)
from es_rerank.string_table import StringTable, StringTableError, write_string_table
from es_rerank.text import NUMBER_CLASSES, embedding_tokens, number_class, tokenize

FIRST_TOKENS = 50  # N of the paper: document tokens the neural model reads
# 2: vocabulary and document ids as string tables with key indexes; 3: the first tokens derived through
# embedding_of.npy instead of stored (first_ptr/first_values.npy)
STATS_FORMAT = 3
FIELDS = ("title", "abstract", "text")
NO_DOCUMENTS = (
    "no documents were read, so there is nothing to index; check the corpus path and the load "
    "report (the served index is unchanged)"
)


class StatsError(Exception):
    """A statistics directory is missing, incomplete or of another format."""


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


def _lookup(ids: Mapping[str, int] | _TermIds, tokens: Iterable[str]) -> np.ndarray:
    unknown: dict[str, int] = {}
    out = []
    for t in tokens:
        term_id = ids.get(t)
        if term_id is None:  # -1, -2, ... in order of first appearance
            term_id = unknown.setdefault(t, -1 - len(unknown))
        out.append(term_id)
    return np.asarray(out, dtype=np.int32)


class _TermIds:
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
        self.ids = _TermIds(terms)

    def __len__(self) -> int:
        return len(self.terms)

    def lookup(self, tokens: Iterable[str]) -> np.ndarray:
        """Ids of ``tokens``; each distinct unknown term gets its own negative id."""
        return _lookup(self.ids, tokens)


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


def embedding_map(terms: Iterable[str], ids: Mapping[str, int] | _TermIds) -> np.ndarray:
    """int32 [n_terms]: the id of each term's embedding-path form (its number class, or itself)."""
    embedding = []
    for term_id, term in enumerate(terms):
        number = number_class(term)
        # a class not in the vocabulary was never in anyone's first tokens: the term may map to itself
        embedding.append(term_id if number is None else ids.get(number, term_id))
    return np.asarray(embedding, dtype=np.int32)


_SCAN_BYTES = 16 << 20  # what the id check reads at a time


def _id_range(values: np.ndarray, descriptor: int) -> tuple[int, int]:
    """Min and max of a memory-mapped .npy array, read with ``pread`` in chunks rather than through the map: a
    scan of the map leaves every page of the file in the process's RSS (about 1 GB at 1M documents)."""
    offset = os.fstat(descriptor).st_size - values.nbytes  # the data ends the file
    low: int | None = None
    high: int | None = None
    for start in range(0, values.nbytes, _SCAN_BYTES):
        chunk = np.frombuffer(
            os.pread(descriptor, min(_SCAN_BYTES, values.nbytes - start), offset + start), dtype=values.dtype
        )
        low = int(chunk.min()) if low is None else min(low, int(chunk.min()))
        high = int(chunk.max()) if high is None else max(high, int(chunk.max()))
    return (low, high) if low is not None and high is not None else (0, 0)


def first_ptr_of(title_ptr: np.ndarray, abstract_ptr: np.ndarray) -> np.ndarray:
    """int64 [n_docs + 1]: where each document's first tokens start in ``first_values_of``."""
    lengths = np.minimum(np.diff(title_ptr) + np.diff(abstract_ptr), FIRST_TOKENS)
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return ptr


def first_values_of(
    title_ptr: np.ndarray,
    title_values: np.ndarray,
    abstract_ptr: np.ndarray,
    abstract_values: np.ndarray,
    embedding_of: np.ndarray,
) -> np.ndarray:
    """int32: every document's first tokens, concatenated (reads the whole corpus: for training and checks)."""
    title_ptr, abstract_ptr = np.asarray(title_ptr), np.asarray(abstract_ptr)
    from_title = np.minimum(np.diff(title_ptr), FIRST_TOKENS)
    from_abstract = np.minimum(np.diff(abstract_ptr), FIRST_TOKENS - from_title)
    starts = first_ptr_of(title_ptr, abstract_ptr)[:-1]
    out = np.empty(int(from_title.sum() + from_abstract.sum()), dtype=np.int32)
    for counts, source_ptr, values, offset in (
        (from_title, title_ptr, title_values, 0),
        (from_abstract, abstract_ptr, abstract_values, from_title),
    ):
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        out[np.repeat(starts + offset, counts) + within] = np.asarray(values)[
            np.repeat(source_ptr[:-1], counts) + within
        ]
    return np.asarray(embedding_of)[out]


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

    def doc_terms_at(self, rows: Sequence[int]) -> list[DocTerms]:
        """``doc_terms`` of each of ``rows`` (a search's hits); each row's first tokens derived as ``doc_terms``
        derives them, never the whole corpus's ``first_values``."""
        return [self.doc_terms(int(row)) for row in rows]

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
        since that reads the whole corpus: ``esrr index use`` does. The arrays are mapped
        from descriptors held open (``es_rerank.held_files``), so ``changed_files`` can
        tell a file changed under the process before a search reads it.
        """
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise StatsError(f"no complete statistics at {directory}; build the index first (`esrr index build`)")

        def damaged(detail: str) -> StatsError:
            return StatsError(
                f"statistics at {directory} are damaged ({detail}); rebuild the index "
                "(`esrr index build`) or serve another version (`esrr index use`)"
            )

        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("format") != STATS_FORMAT:
                raise StatsError(
                    f"statistics at {directory} have format {meta.get('format')}, this code "
                    f"reads format {STATS_FORMAT} (3 derives each document's first tokens instead of "
                    "storing them); rebuild the index (`esrr index build`)"
                )
            version, n_docs, n_terms = str(meta["version"]), int(meta["n_docs"]), int(meta["n_terms"])
            build_id = str(meta.get("build_id") or "")  # older statistics: __post_init__ names it
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
            raise damaged(f"meta.json: {type(error).__name__}: {error}") from None
        except OSError as error:  # unreadable: permissions, a folder in its place
            raise damaged(f"meta.json: {error.strerror}") from None

        try:
            manifest = read_manifest(directory)
        except ManifestError as error:
            raise damaged(str(error)) from None
        held: list[HeldFile] = []

        def check_manifest() -> None:
            # After the checks of shape and content, which name the damage better.
            for file in held:
                entry = manifest.get(file.name) if manifest is not None else None
                if entry is None:  # statistics saved before manifests: nothing to compare with
                    continue
                try:
                    check_size(file.name, entry, file.opened.size)
                    if check_ids:
                        check_checksum(file.name, entry, checksum_of_descriptor(file.descriptor))
                except ManifestError as error:
                    raise damaged(str(error)) from None
                # What a change of ctime alone is checked against (``HeldFile.change``).
                file.verify = lambda descriptor, expected=entry.checksum: checksum_of_descriptor(descriptor) == expected

        def missing(name: str) -> StatsError:
            return StatsError(
                f"statistics at {directory} lack {name} although meta.json is "
                "there (a partial copy?); rebuild the index (`esrr index build`)"
            )

        def array(name: str, length: int | None = None) -> np.ndarray:
            try:
                # A plain ndarray view of the map: slicing a np.memmap costs ~1 us more per slice.
                values, file = map_npy(directory / f"{name}.npy")
            except FileNotFoundError:
                raise missing(f"{name}.npy") from None
            except NotNumpyError as error:
                raise damaged(f"{name}.npy is {error}") from None
            except FileBeingWritten:  # not damage: the caller may try again once the writer is done
                raise
            except OSError as error:
                raise damaged(f"{name}.npy: {error.strerror}") from None
            held.append(file)
            if values.ndim != 1 or values.dtype.kind not in "iu":
                raise damaged(f"{name}.npy holds a {values.dtype} array of shape {values.shape}, not a row of integers")
            if length is not None and values.shape != (length,):
                raise damaged(f"{name}.npy has shape {values.shape}, meta.json implies ({length},)")
            return values

        def ragged(field: str, id_limit: int) -> tuple[np.ndarray, np.ndarray]:
            # Checked once here, so that a search never indexes past a table (an IndexError 500).
            ptr, values = array(f"{field}_ptr", n_docs + 1), array(f"{field}_values")
            if ptr[0] != 0 or ptr[-1] != len(values) or (np.diff(ptr) < 0).any():
                raise damaged(f"{field}_ptr.npy does not index {field}_values.npy")
            low, high = _id_range(values, held[-1].descriptor) if check_ids else (0, 0)
            if len(values) and (low < 0 or high >= id_limit):
                raise damaged(f"{field}_values.npy holds term ids outside the vocabulary of {id_limit}")
            return ptr, values

        def table(name: str, length: int) -> StringTable:
            try:
                strings = StringTable.open(directory, name, length)
            except StringTableError as error:
                if "missing" in str(error):
                    raise missing(str(error).split(" is missing")[0]) from None
                raise damaged(str(error)) from None
            except FileBeingWritten:  # not damage: the caller may try again once the writer is done
                raise
            except OSError as error:
                raise damaged(f"{name}.txt: {error.strerror}") from None
            held.extend(strings.files)
            return strings

        terms = table("vocab", n_terms)
        doc_ids = table("doc_ids", n_docs)
        embedding_of = array("embedding_of", n_terms)
        if check_ids and n_terms and (embedding_of.min() < 0 or embedding_of.max() >= n_terms):
            raise damaged(f"embedding_of.npy holds term ids outside the vocabulary of {n_terms}")
        stats = cls(
            version,
            doc_ids,
            MappedVocabulary(terms),
            *ragged("title", n_terms),
            *ragged("abstract", n_terms),
            embedding_of,
            df={name: array(f"df_{name}", n_terms) for name in FIELDS},
            build_id=build_id,
        )
        check_manifest()
        stats._held = tuple(held)
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


def statistics_files(directory: Path) -> list[str]:
    """The data files of the statistics in ``directory``: all but ``meta.json`` and the manifest, which the manifest
    lists."""
    return sorted(
        path.name for path in directory.iterdir() if path.is_file() and path.name not in ("meta.json", "manifest.json")
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
