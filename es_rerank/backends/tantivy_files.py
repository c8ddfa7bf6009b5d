"""The segment files of a tantivy index, held open beside tantivy's own maps of them (``es_rerank.held_files``).

tantivy maps each segment file itself and keeps no descriptor; a file cut short under it
ends the process at the next read of a page past the new end (SIGBUS), and one rewritten
in place is searched without a word. Holding a descriptor of each file lets the gateway
lease it (another process's open for writing or truncate waits until no search reads)
or, without a lease, compare its fingerprint before and after each read.

Every segment file ends with tantivy's footer: the CRC32 of the bytes before it, as JSON,
then the footer's length and a magic number (``u32`` little-endian each). That CRC is what
a change of ctime alone is verified against, and what ``verify`` checks at open.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

from es_rerank.held_files import HeldFile

FOOTER_MAGIC = 1337  # tantivy's FOOTER_MAGIC_NUMBER
_TAIL = struct.Struct("<II")  # footer length, magic
_CHUNK = 1 << 20


class TantivyFileError(Exception):
    """A segment file whose content is not what its footer records (names the file, not its path)."""


def _footer(descriptor: int) -> tuple[int, int] | None:
    """Where a tantivy file's footer starts and the CRC32 it records; None for a file without one."""
    size = os.fstat(descriptor).st_size
    if size < _TAIL.size:
        return None
    length, magic = _TAIL.unpack(os.pread(descriptor, _TAIL.size, size - _TAIL.size))
    if magic != FOOTER_MAGIC or length + _TAIL.size > size:
        return None
    start = size - _TAIL.size - length
    try:
        return start, int(json.loads(os.pread(descriptor, length, start))["crc"])
    except (ValueError, KeyError, TypeError):
        return None


def footer_intact(descriptor: int) -> bool:
    """Whether an open tantivy file's bytes have the CRC32 its footer records (a full read)."""
    footer = _footer(descriptor)
    if footer is None:
        return False
    end, expected = footer
    crc, offset = 0, 0
    while offset < end:
        chunk = os.pread(descriptor, min(_CHUNK, end - offset), offset)
        if not chunk:
            return False
        crc = zlib.crc32(chunk, crc)
        offset += len(chunk)
    return crc == expected


def hold_tantivy_files(directory: Path, verify: bool = False) -> list[HeldFile]:
    """A held file of each segment file of the tantivy index in ``directory`` (not its lock files or
    ``meta.json``, which tantivy reads once when opened); ``verify`` also checks each file's CRC32 (a full read).

    ``TantivyFileError`` names a file that fails it; ``OSError`` as ``os.open`` raises it.
    """
    held: list[HeldFile] = []
    if not directory.is_dir():  # tantivy's own open names what is missing
        return held
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or path.name == "meta.json" or not path.is_file():
            continue
        file = HeldFile(path)
        if _footer(file.descriptor) is not None:  # a file of an older tantivy without a footer: fingerprint only
            file.verify = footer_intact
            if verify and not footer_intact(file.descriptor):
                raise TantivyFileError(f"{path.name} differs from what tantivy wrote (the CRC32 in its footer)")
        held.append(file)
    return held
