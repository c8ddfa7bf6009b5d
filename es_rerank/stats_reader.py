"""Opening a saved statistics directory: ``meta.json``, the manifest, the memory-mapped arrays and string
tables, each checked before a search may index with them (``CorpusStats.load`` builds on this).

The shapes, dtypes and row pointers, and each file's size against ``manifest.json``, are
always checked (cheap); the term ids and the files' checksums only when asked, since that
reads the whole corpus. Every problem is a ``StatsError`` that names the file and the fix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from es_rerank.held_files import FileBeingWritten, HeldFile, NotNumpyError, map_npy
from es_rerank.manifest import (
    Entry,
    ManifestError,
    check_checksum,
    check_size,
    checksum_of_descriptor,
    read_manifest,
)
from es_rerank.stats_format import FIELDS, STATS_FORMAT, StatsError
from es_rerank.string_table import StringTable, StringTableError

_SCAN_BYTES = 16 << 20  # what the id check reads at a time


@dataclass(frozen=True)
class SavedStatistics:
    """The checked contents of a statistics directory, every array mapped from a file held open."""

    version: str
    build_id: str  # "" for statistics saved before build ids
    doc_ids: StringTable
    terms: StringTable
    title_ptr: np.ndarray
    title_values: np.ndarray
    abstract_ptr: np.ndarray
    abstract_values: np.ndarray
    embedding_of: np.ndarray
    df: dict[str, np.ndarray]
    held: tuple[HeldFile, ...]


def read_statistics(directory: Path, check_ids: bool = False) -> SavedStatistics:
    """Map and check the statistics that ``CorpusStats.save`` wrote to ``directory`` (``check_ids``: also every
    term id and the files' checksums, reading the whole corpus)."""
    return _Reader(directory, check_ids).read()


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


class _Reader:
    """One opening of a statistics directory: the files it has mapped so far, and the errors that name them."""

    def __init__(self, directory: Path, check_ids: bool) -> None:
        self.directory = directory
        self.check_ids = check_ids
        self.held: list[HeldFile] = []

    def read(self) -> SavedStatistics:
        """Everything ``read_statistics`` returns, checked in the order that names a damage best."""
        version, build_id, n_docs, n_terms = self._meta()
        try:
            manifest = read_manifest(self.directory)
        except ManifestError as error:
            raise self._damaged(str(error)) from None
        terms = self._table("vocab", n_terms)
        doc_ids = self._table("doc_ids", n_docs)
        embedding_of = self._array("embedding_of", n_terms)
        if self.check_ids and n_terms and (embedding_of.min() < 0 or embedding_of.max() >= n_terms):
            raise self._damaged(f"embedding_of.npy holds term ids outside the vocabulary of {n_terms}")
        title_ptr, title_values = self._ragged("title", n_docs, n_terms)
        abstract_ptr, abstract_values = self._ragged("abstract", n_docs, n_terms)
        df = {name: self._array(f"df_{name}", n_terms) for name in FIELDS}
        self._check_manifest(manifest)  # after the checks of shape and content, which name the damage better
        return SavedStatistics(
            version,
            build_id,
            doc_ids,
            terms,
            title_ptr,
            title_values,
            abstract_ptr,
            abstract_values,
            embedding_of,
            df,
            tuple(self.held),
        )

    def _damaged(self, detail: str) -> StatsError:
        return StatsError(
            f"statistics at {self.directory} are damaged ({detail}); rebuild the index "
            "(`esrr index build`) or serve another version (`esrr index use`)"
        )

    def _missing(self, name: str) -> StatsError:
        return StatsError(
            f"statistics at {self.directory} lack {name} although meta.json is "
            "there (a partial copy?); rebuild the index (`esrr index build`)"
        )

    def _meta(self) -> tuple[str, str, int, int]:
        """Version, build id, documents and terms from ``meta.json``, the mark of a complete directory."""
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            raise StatsError(f"no complete statistics at {self.directory}; build the index first (`esrr index build`)")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("format") != STATS_FORMAT:
                raise StatsError(
                    f"statistics at {self.directory} have format {meta.get('format')}, this code "
                    f"reads format {STATS_FORMAT} (3 derives each document's first tokens instead of "
                    "storing them); rebuild the index (`esrr index build`)"
                )
            build_id = str(meta.get("build_id") or "")  # older statistics: CorpusStats.__post_init__ names it
            return str(meta["version"]), build_id, int(meta["n_docs"]), int(meta["n_terms"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
            raise self._damaged(f"meta.json: {type(error).__name__}: {error}") from None
        except OSError as error:  # unreadable: permissions, a folder in its place
            raise self._damaged(f"meta.json: {error.strerror}") from None

    def _array(self, name: str, length: int | None = None) -> np.ndarray:
        """The row of integers in ``<name>.npy``, of ``length`` when given."""
        try:
            # A plain ndarray view of the map: slicing a np.memmap costs ~1 us more per slice.
            values, file = map_npy(self.directory / f"{name}.npy")
        except FileNotFoundError:
            raise self._missing(f"{name}.npy") from None
        except NotNumpyError as error:
            raise self._damaged(f"{name}.npy is {error}") from None
        except FileBeingWritten:  # not damage: the caller may try again once the writer is done
            raise
        except OSError as error:
            raise self._damaged(f"{name}.npy: {error.strerror}") from None
        self.held.append(file)
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise self._damaged(
                f"{name}.npy holds a {values.dtype} array of shape {values.shape}, not a row of integers"
            )
        if length is not None and values.shape != (length,):
            raise self._damaged(f"{name}.npy has shape {values.shape}, meta.json implies ({length},)")
        return values

    def _ragged(self, field: str, n_docs: int, id_limit: int) -> tuple[np.ndarray, np.ndarray]:
        """The row pointers and term ids of one field, checked once here so that a search never indexes past
        a table (an IndexError 500)."""
        ptr, values = self._array(f"{field}_ptr", n_docs + 1), self._array(f"{field}_values")
        if ptr[0] != 0 or ptr[-1] != len(values) or (np.diff(ptr) < 0).any():
            raise self._damaged(f"{field}_ptr.npy does not index {field}_values.npy")
        low, high = _id_range(values, self.held[-1].descriptor) if self.check_ids else (0, 0)
        if len(values) and (low < 0 or high >= id_limit):
            raise self._damaged(f"{field}_values.npy holds term ids outside the vocabulary of {id_limit}")
        return ptr, values

    def _table(self, name: str, length: int) -> StringTable:
        """The string table ``name`` of ``length`` rows (the vocabulary, the document ids)."""
        try:
            strings = StringTable.open(self.directory, name, length)
        except StringTableError as error:
            if "missing" in str(error):
                raise self._missing(str(error).split(" is missing")[0]) from None
            raise self._damaged(str(error)) from None
        except FileBeingWritten:  # not damage: the caller may try again once the writer is done
            raise
        except OSError as error:
            raise self._damaged(f"{name}.txt: {error.strerror}") from None
        self.held.extend(strings.files)
        return strings

    def _check_manifest(self, manifest: dict[str, Entry] | None) -> None:
        """Each held file's size (and checksum, with ``check_ids``) against the manifest, when there is one."""
        for file in self.held:
            entry = manifest.get(file.name) if manifest is not None else None
            if entry is None:  # statistics saved before manifests: nothing to compare with
                continue
            try:
                check_size(file.name, entry, file.opened.size)
                if self.check_ids:
                    check_checksum(file.name, entry, checksum_of_descriptor(file.descriptor))
            except ManifestError as error:
                raise self._damaged(str(error)) from None
            # What a change of ctime alone is checked against (``HeldFile.change``).
            file.verify = lambda descriptor, expected=entry.checksum: checksum_of_descriptor(descriptor) == expected
