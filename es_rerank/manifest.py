"""What a statistics build wrote: each file's size and xxh3-128 checksum, in ``manifest.json`` beside the files.

Written once when a build is finalised (``CorpusStats.save``, before ``meta.json``), read
when a version is opened. Sizes are checked at every open (one ``fstat`` a file); the
checksums when the whole version is read anyway (``esrr index use``, a build's own check),
because hashing is a full read. xxh3-128 hashes over ten times as fast as sha256 here
(``esrr bench integrity``; docs/operations.md has the figures): NFCorpus's 5 MB in about a
millisecond, but PubMed's ~50 GB would take seconds from the page cache and about a minute
from disk, too long for every reindex a gateway or worker follows.

A checksum guards against damage (a copy cut short, a file rewritten in place), not an
attacker: whoever can rewrite the statistics can rewrite this file too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import xxhash

MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
CHECKSUM = "xxh3_128"
_CHUNK = 1 << 20  # 1 MiB reads: as fast as larger ones for xxh3, and a small constant in a build's memory


class ManifestError(Exception):
    """A manifest that cannot be read, or a file that differs from what it records (names the file, not its path)."""


@dataclass(frozen=True)
class Entry:
    """One file as the build wrote it."""

    size: int
    checksum: str


def checksum_of_bytes(data: bytes) -> str:
    """The xxh3-128 checksum of ``data``, as hex."""
    return xxhash.xxh3_128_hexdigest(data)


def checksum_of_descriptor(descriptor: int) -> str:
    """The xxh3-128 checksum of an open file's whole content, read with ``pread`` (the file offset is untouched)."""
    digest = xxhash.xxh3_128()
    offset = 0
    while chunk := os.pread(descriptor, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def checksum_of_file(path: Path) -> str:
    """The xxh3-128 checksum of the file at ``path``."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return checksum_of_descriptor(descriptor)
    finally:
        os.close(descriptor)


def write_manifest(directory: Path, names: Iterable[str]) -> None:
    """Record the size and checksum of each named file of ``directory`` in ``directory/manifest.json``."""
    files = {
        name: {"bytes": (directory / name).stat().st_size, CHECKSUM: checksum_of_file(directory / name)}
        for name in sorted(names)
    }
    manifest = {"format": MANIFEST_FORMAT, "files": files}
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def read_manifest(directory: Path) -> dict[str, Entry] | None:
    """The files ``directory/manifest.json`` records, None when there is none (statistics built before manifests)."""
    path = directory / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{MANIFEST_FILE} cannot be read ({type(error).__name__})") from None
    try:
        manifest = json.loads(text)
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ManifestError(
                f"{MANIFEST_FILE} has format {manifest.get('format')!r}, this code reads {MANIFEST_FORMAT}"
            )
        return {
            str(name): Entry(int(entry["bytes"]), str(entry[CHECKSUM])) for name, entry in manifest["files"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
        raise ManifestError(f"{MANIFEST_FILE} is damaged ({type(error).__name__}: {error})") from None


def check_size(name: str, entry: Entry, size: int) -> None:
    """``ManifestError`` unless a file of ``size`` bytes is the size the build wrote."""
    if size != entry.size:
        change = "cut short" if size < entry.size else "grown"
        raise ManifestError(
            f"{name} has {size} bytes, the build wrote {entry.size} ({MANIFEST_FILE}): it was "
            f"{change} or replaced after the build"
        )


def check_checksum(name: str, entry: Entry, checksum: str) -> None:
    """``ManifestError`` unless ``checksum`` is the one the build recorded for ``name``."""
    if checksum != entry.checksum:
        raise ManifestError(
            f"{name} differs from what the build wrote (its {CHECKSUM} checksum in "
            f"{MANIFEST_FILE}): it was rewritten after the build"
        )
