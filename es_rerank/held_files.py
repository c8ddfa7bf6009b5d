"""Statistics arrays mapped from descriptors this process holds, and the check that the files did not change since.

A mapped file that is cut short under a process kills it with SIGBUS the moment a page
past the new end is read, and one rewritten in place changes what the process serves
without a word. Neither can be caught once the read has started, so the check comes
before: each array is mapped from a descriptor opened here, the descriptor is kept, and
``HeldFile.change`` compares its ``fstat`` size and mtime with what they were when the file
was opened and checked. A search makes that check (~2 us a file) before it reads the
statistics and is refused if a file changed; the gateway's health says so. Not ctime:
``chmod``, a hard link and a prune's unlink change it too, and must not stop the searches;
so a rewrite that keeps the size and sets the mtime back (``rsync --inplace --times``) is
only found by the checksums (``esrr index use``).

What this leaves: a file cut short in the few milliseconds between a search's check and
its last read of the mapped pages still ends the process. Reading with ``pread`` instead
of a map closes that gap (a short read is an error, never a signal) but costs an order of
magnitude more than the map for a search's 500 hits, and a copy of the whole statistics
in each process's memory ~1.4 KB a document (~50 GB for PubMed): ``esrr bench integrity``
measures both, docs/operations.md has the figures. A file replaced by a rename is no
danger: the held descriptor keeps the file that was verified.
"""

from __future__ import annotations

import mmap
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class NotNumpyError(ValueError):
    """A file that is not a ``.npy`` array this module can map (says why; names no path)."""


@dataclass(frozen=True)
class Fingerprint:
    """What ``fstat`` says of a file's content: a change in either field means the content may have changed."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, descriptor: int) -> "Fingerprint":
        """The fingerprint of an open file."""
        st = os.fstat(descriptor)
        return cls(st.st_size, st.st_mtime_ns)


class HeldFile:
    """An open, read-only descriptor of one file and its fingerprint when opened; closed when collected."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.descriptor)
        self.opened = Fingerprint.of(self.descriptor)

    def change(self) -> str | None:
        """How the file changed since it was opened (no path in it), None when it did not."""
        now = Fingerprint.of(self.descriptor)
        if now == self.opened:
            return None
        if now.size < self.opened.size:
            return f"{self.name} was cut short from {self.opened.size} to {now.size} bytes"
        if now.size > self.opened.size:
            return f"{self.name} grew from {self.opened.size} to {now.size} bytes"
        return f"{self.name} was rewritten in place"


def map_npy(path: Path) -> tuple[np.ndarray, HeldFile]:
    """A read-only array mapped from a ``.npy`` file, and the held file it is mapped from.

    ``FileNotFoundError``/``OSError`` as ``os.open`` raises them; ``NotNumpyError`` when the
    file is not a ``.npy`` array (or is shorter than its header says).
    """
    held = HeldFile(path)
    with open(held.descriptor, "rb", closefd=False) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise NotNumpyError(f"a .npy file of version {version}, which this code does not map")
        except (ValueError, EOFError) as error:  # numpy's own text would suggest allow_pickle
            raise NotNumpyError(f"not a readable numeric .npy array ({type(error).__name__})") from None
        offset = stream.tell()
    if dtype.hasobject:
        raise NotNumpyError("a .npy array of Python objects, not a readable numeric .npy array")
    count = int(np.prod(shape))
    if offset + count * dtype.itemsize > held.opened.size:
        raise NotNumpyError(f"only {held.opened.size} bytes long, shorter than the {shape} array its header announces")
    if held.opened.size == 0 or count == 0:
        array = np.zeros(shape, dtype=dtype)
    else:
        mapped = mmap.mmap(held.descriptor, 0, access=mmap.ACCESS_READ)
        array = np.frombuffer(mapped, dtype=dtype, count=count, offset=offset)
        array = array.reshape(shape, order="F" if fortran else "C")
    return array, held


def map_bytes(path: Path) -> tuple[np.ndarray, HeldFile]:
    """A whole file as a read-only uint8 array mapped from a held descriptor, and that held file."""
    held = HeldFile(path)
    if held.opened.size == 0:
        return np.zeros(0, dtype=np.uint8), held
    mapped = mmap.mmap(held.descriptor, 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=np.uint8), held
