"""Memory-mapped string tables: row -> string and string -> row with no Python object per entry.

A table ``NAME`` of a directory is four files:

- ``NAME.txt``: the strings joined by ``\\n`` (UTF-8; no string holds a line break),
  readable with any text tool,
- ``NAME_offsets.npy``: int64 [n + 1], where each string starts (the last entry is
  the length of the text plus one, as if it ended with a line break),
- ``NAME_keys.npy``: uint64 [n], every string's key (``string_key``), sorted,
- ``NAME_rows.npy``: int64 [n], the row of each sorted key.

Finding a string is a binary search for its key, then a comparison of the string
at the found row (so a key shared by two strings cannot return the wrong one). A
canonical decimal number (a PMID, ``1998``) is its own key; any other string's key
is the first 8 bytes of its BLAKE2b digest with the top bit set. All four files are
memory-mapped: a serving process pays for the pages it touches, not per entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np
import numpy.typing as npt

from es_rerank.held_files import HeldFile, NotNumpyError, map_bytes, map_npy

_HASHED = np.uint64(1 << 63)
_MAX_NUMERIC_DIGITS = 18  # below 2**63: numeric keys never meet hashed ones


class StringTableError(Exception):
    """A table's files are missing or disagree with each other."""


def string_key(value: str) -> int:
    """The 64-bit lookup key of a string (see the module docstring)."""
    if value.isascii() and value.isdigit() and len(value) <= _MAX_NUMERIC_DIGITS and (value == "0" or value[0] != "0"):
        return int(value)
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") | (1 << 63)


def string_keys(values: Iterable[str]) -> np.ndarray:
    """uint64 keys of ``values``, in order."""
    return np.fromiter((string_key(v) for v in values), dtype=np.uint64)


def string_checks(values: Iterable[str]) -> np.ndarray:
    """A second, independent 64-bit digest of each string: two strings with one key and one check are equal."""
    return np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(v.encode("utf-8", "surrogatepass"), digest_size=8, person=b"esrr-check").digest(),
                "little",
            )
            for v in values
        ),
        dtype=np.uint64,
    )


def write_string_table(directory: Path, name: str, strings: Sequence[str]) -> None:
    """Write ``strings`` as the table ``name`` under ``directory`` (in-memory builds; streams use
    ``StringTableWriter``)."""
    writer = StringTableWriter(directory, name)
    writer.append(list(strings), string_keys(strings))
    writer.finish()


class NpyAppender:
    """A 1-D ``.npy`` file written in pieces: the header, fixed at 128 bytes, gets its length at ``finish``."""

    HEADER = 128

    def __init__(self, path: Path, dtype: npt.DTypeLike) -> None:
        self.path, self.dtype, self.length = path, np.dtype(dtype), 0
        self.file = path.open("wb")
        self.file.write(b"\0" * self.HEADER)

    def append(self, values: np.ndarray) -> None:
        """Add values at the end."""
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self.file.write(values.tobytes())
        self.length += len(values)

    def finish(self) -> None:
        """Write the header and close the file."""
        header = repr({"descr": self.dtype.str, "fortran_order": False, "shape": (self.length,)})
        body_length = self.HEADER - 10  # magic (6) + version (2) + header length (2)
        header = header.ljust(body_length - 1) + "\n"
        if len(header) != body_length:
            raise StringTableError(f"{self.path}: a .npy header of {len(header)} bytes does not fit")
        self.file.seek(0)
        self.file.write(b"\x93NUMPY\x01\x00" + body_length.to_bytes(2, "little") + header.encode("latin1"))
        self.file.close()

    def abort(self) -> None:
        """Close without a valid header (the build failed)."""
        self.file.close()


class StringTableWriter:
    """Appends strings to a table; ``finish`` sorts the keys (they are in RAM: 8 bytes a string)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = directory, name
        self.text = (directory / f"{name}.txt").open("wb")
        self.offsets = NpyAppender(directory / f"{name}_offsets.npy", np.int64)
        self.keys = NpyAppender(directory / f"{name}_keys.unsorted.npy", np.uint64)
        self.position = 0  # bytes written, counting the line break before each string but the first
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def append(self, strings: Sequence[str], keys: np.ndarray) -> None:
        """Add ``strings`` (with their ``string_key``s) at the end."""
        if not strings:
            return
        encoded = [s.encode("utf-8") for s in strings]
        lengths = np.fromiter((len(e) + 1 for e in encoded), dtype=np.int64, count=len(encoded))
        starts = self.position + np.concatenate([[0], np.cumsum(lengths[:-1])])
        joined = b"\n".join(encoded)
        self.text.write(joined if self.position == 0 else b"\n" + joined)
        self.position += int(lengths.sum())
        self.offsets.append(starts)
        self.keys.append(keys)
        self.count += len(strings)

    def finish(self) -> None:
        """Close the text and write the offsets and the sorted key index."""
        self.text.close()
        self.offsets.append(np.array([self.position], dtype=np.int64))
        self.offsets.finish()
        self.keys.finish()
        unsorted_path = self.directory / f"{self.name}_keys.unsorted.npy"
        keys = np.load(unsorted_path, mmap_mode="r")
        rows = np.argsort(keys, kind="stable")
        np.save(self.directory / f"{self.name}_rows.npy", rows.astype(np.int64))
        np.save(self.directory / f"{self.name}_keys.npy", np.asarray(keys)[rows])
        del keys
        unsorted_path.unlink()

    def abort(self) -> None:
        """Close the files of a failed build."""
        self.text.close()
        self.offsets.abort()
        self.keys.abort()


class StringTable(Sequence[str]):
    """A read-only, memory-mapped table of strings (see the module docstring)."""

    def __init__(self, text: np.ndarray, offsets: np.ndarray, keys: np.ndarray, rows: np.ndarray) -> None:
        self._text, self._offsets, self._keys, self._rows = text, offsets, keys, rows
        self.files: tuple[HeldFile, ...] = ()  # the descriptors the arrays are mapped from, when opened

    @classmethod
    def open(cls, directory: Path, name: str, length: int) -> StringTable:
        """Map the table ``name`` of ``directory``; ``StringTableError`` names a missing or inconsistent file.

        The files are mapped from descriptors the table holds (``files``), so that a caller can
        tell a file changed under it before reading (``es_rerank.held_files``).
        """
        files: list[HeldFile] = []

        def load(file: str, size: int | None) -> np.ndarray:
            try:
                values, held = map_npy(directory / file)
            except FileNotFoundError:
                raise StringTableError(f"{file} is missing") from None
            except NotNumpyError as error:
                raise StringTableError(f"{file} is {error}") from None
            files.append(held)
            if values.ndim != 1 or values.dtype.kind not in "iu" or (size is not None and len(values) != size):
                raise StringTableError(
                    f"{file} holds a {values.dtype} array of shape {values.shape}, expected ({size},) integers"
                )
            return values

        try:
            text, held_text = map_bytes(directory / f"{name}.txt")
        except FileNotFoundError:
            raise StringTableError(f"{name}.txt is missing") from None
        files.append(held_text)
        offsets = load(f"{name}_offsets.npy", length + 1)
        keys, rows = load(f"{name}_keys.npy", length), load(f"{name}_rows.npy", length)
        size = held_text.opened.size
        if offsets[0] != 0 or offsets[-1] != (size + 1 if length else 0) or (length and (np.diff(offsets) < 1).any()):
            raise StringTableError(f"{name}.txt ({size} bytes) does not match {name}_offsets.npy")
        if length and (rows.min() < 0 or rows.max() >= length):
            raise StringTableError(f"{name}_rows.npy points past the {length} strings of {name}.txt")
        table = cls(text, offsets, keys, rows)
        table.files = tuple(files)
        return table

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index):
        """The string at a row (or a list of strings for a slice)."""
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"row {index} is outside the table of {n} strings")
        start, end = int(self._offsets[index]), int(self._offsets[index + 1]) - 1
        return self._text[start:end].tobytes().decode("utf-8")

    def take(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The strings at ``rows`` (0 to len - 1), in their order.

        One gather of the offsets for all rows, where ``self[row]`` pays numpy's per-call
        overhead for each: a search asks for the ids of its 500 hits at once.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"rows {rows.min()}..{rows.max()} reach outside the table of {len(self)} strings")
        text = self._text.data  # a memoryview of the bytes
        return [
            str(text[start:end], "utf-8")
            for start, end in zip(self._offsets[rows].tolist(), (self._offsets[rows + 1] - 1).tolist())
        ]

    def __iter__(self) -> Iterator[str]:
        for row in range(len(self)):
            yield self[row]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (StringTable, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:  # mutable-looking sequence semantics, as a list
        raise TypeError("unhashable type: 'StringTable'")

    def row_of(self, value: str) -> int | None:
        """The row of ``value``, None when the table does not hold it."""
        key = np.uint64(string_key(value))
        position = int(np.searchsorted(self._keys, key))
        while position < len(self._keys) and self._keys[position] == key:
            row = int(self._rows[position])
            if self[row] == value:
                return row
            position += 1
        return None

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and self.row_of(value) is not None


class SortedRuns:
    """Distinct 64-bit keys, each with a value of every payload column, in sorted runs whose sizes at least halve
    from one run to the next (a log-structured merge).

    Adding n keys in batches costs O(n log n) in all (a new run, merged with the runs
    no more than twice its size), where inserting into one sorted array costs a copy
    of the whole array a batch: quadratic over a stream. A lookup is one binary search
    a run, and there are about log2(n / batch) runs.
    """

    def __init__(self, *payload_dtypes: npt.DTypeLike) -> None:
        self._dtypes = payload_dtypes
        self._runs: list[tuple[np.ndarray, tuple[np.ndarray, ...]]] = []

    def __len__(self) -> int:
        return sum(len(keys) for keys, _ in self._runs)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Where each of ``keys`` (uint64) is: a bool array, and each payload column's value there (0 if absent)."""
        keys = np.asarray(keys, dtype=np.uint64)
        found = np.zeros(len(keys), dtype=bool)
        values: tuple[np.ndarray, ...] = tuple(np.zeros(len(keys), dtype=dtype) for dtype in self._dtypes)
        for run_keys, run_values in self._runs:
            position = np.minimum(np.searchsorted(run_keys, keys), len(run_keys) - 1)
            hit = run_keys[position] == keys
            found |= hit
            for out, column in zip(values, run_values):
                out[hit] = column[position[hit]]
        return found, values

    def contains(self, key: int) -> bool:
        """Whether ``key`` is there (one scalar binary search a run)."""
        wanted = np.uint64(key)
        for run_keys, _ in self._runs:
            position = int(np.searchsorted(run_keys, wanted))
            if position < len(run_keys) and run_keys[position] == wanted:
                return True
        return False

    def add(self, keys: np.ndarray, *values: np.ndarray) -> None:
        """Add ``keys`` (distinct, none there yet) with their payload ``values``, one array a column."""
        if not len(keys):
            return
        keys = np.asarray(keys, dtype=np.uint64)
        order = np.argsort(keys, kind="stable")
        self._runs.append((keys[order], tuple(np.asarray(v, dtype=d)[order] for v, d in zip(values, self._dtypes))))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            newer_keys, newer_values = self._runs.pop()
            older_keys, older_values = self._runs.pop()
            merged = np.concatenate([older_keys, newer_keys])
            order = np.argsort(merged, kind="stable")  # two sorted runs: timsort merges them in linear time
            self._runs.append(
                (merged[order], tuple(np.concatenate([a, b])[order] for a, b in zip(older_values, newer_values)))
            )


class KeySet:
    """A growing set of 64-bit keys held as numpy arrays (8 bytes a key): ``SortedRuns`` plus a small buffer.

    For duplicate checks over a stream of any length: ``add`` costs a binary search a
    run; every ``buffer`` new keys become a run. ``add_many`` takes a batch at once.
    """

    def __init__(self, buffer: int = 65_536) -> None:
        self._sorted = SortedRuns()
        self._recent: set[int] = set()
        self._buffer = buffer

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    def add(self, key: int) -> bool:
        """Add ``key``; False when it was there already."""
        if key in self._recent or self._sorted.contains(key):
            return False
        self._recent.add(key)
        if len(self._recent) >= self._buffer:
            self._sorted.add(np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent)))
            self._recent.clear()
        return True

    def add_many(self, keys: np.ndarray) -> np.ndarray:
        """Add ``keys`` (uint64); a bool array, True where a key was there already or repeats an earlier one of
        ``keys``."""
        keys = np.asarray(keys, dtype=np.uint64)
        seen, _ = self._sorted.find(keys)
        if self._recent:
            seen |= np.fromiter((int(k) in self._recent for k in keys), dtype=bool, count=len(keys))
        _, first = np.unique(keys, return_index=True)
        repeated = np.ones(len(keys), dtype=bool)
        repeated[first] = False
        seen |= repeated
        self._sorted.add(keys[~seen])
        return seen
