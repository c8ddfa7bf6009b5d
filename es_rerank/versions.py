"""Version names of indexes, statistics and embeddings, and the ``CURRENT`` pointer files.

A version name is a directory name, an Elasticsearch index-name suffix and a field of
the scoring payload, so one rule serves all: letters, digits, '.', '_' and '-', at
most 128 characters, starting with a letter or digit, and never the pointer's name.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

CURRENT_FILE = "CURRENT"
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TIME_FORMAT = "%Y%m%dt%H%M%S%fz"  # new_version's names end in this: 22 characters, e.g. 20261122t042725754880z
_TIME_LENGTH = len(datetime(2000, 1, 1).strftime(_TIME_FORMAT))


class VersionNameError(ValueError):
    """A version name that cannot be used as a directory and index name."""


def new_version(prefix: str = "") -> str:
    """A sortable, unique, lower-case name from the UTC time: ``<prefix>20261122t042725754880z``."""
    return prefix + datetime.now(timezone.utc).strftime(_TIME_FORMAT)


def version_time_ns(name: str) -> int | None:
    """When ``new_version`` named ``name`` (ns since the epoch, UTC), or None for another kind of name."""
    try:
        made = datetime.strptime(name[-_TIME_LENGTH:], _TIME_FORMAT)
    except ValueError:
        return None
    return int(made.replace(tzinfo=timezone.utc).timestamp()) * 10**9 + made.microsecond * 1000


def check_version(name: str) -> str:
    """``name`` if it is a valid version name, else ``VersionNameError`` naming the rule."""
    if not _VERSION_RE.match(name) or name.upper() == CURRENT_FILE:
        raise VersionNameError(
            f"bad version name {name!r}: use letters, digits, '.', '_' and '-' (at most 128, "
            f"starting with a letter or digit, not {CURRENT_FILE!r})"
        )
    return name


def read_pointer(root: Path) -> str | None:
    """The version ``root/CURRENT`` names, or None when there is no pointer or it is empty.

    ``VersionNameError`` when it names something that is not a version (``../x``, a
    path): the pointer is never followed out of ``root``.
    """
    pointer = root / CURRENT_FILE
    if not pointer.is_file():
        _refuse_a_non_file(pointer)  # nothing may count as served
        return None
    try:
        version = pointer.read_text(encoding="utf-8").strip() or None
    except UnicodeDecodeError:
        raise VersionNameError(f"{pointer} is damaged: it is not text; point it at a version under {root}") from None
    if version is not None:
        try:
            check_version(version)
        except VersionNameError as error:
            raise VersionNameError(f"{pointer} is damaged: {error}; point it at a version under {root}") from None
    return version


def write_pointer(root: Path, version: str) -> None:
    """Point ``root/CURRENT`` at ``version`` atomically (write a temporary file, then rename)."""
    _refuse_a_non_file(root / CURRENT_FILE)  # a rename cannot replace a folder
    tmp = root / f".{CURRENT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(check_version(version) + "\n", encoding="utf-8")
    try:
        os.replace(tmp, root / CURRENT_FILE)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _refuse_a_non_file(pointer: Path) -> None:
    if pointer.exists() and not pointer.is_file():  # a folder or a device in its place
        raise VersionNameError(
            f"{pointer} is damaged: it is not a file; remove it, then point it at a version under {pointer.parent}"
        )


def lock_folder(folder: Path, wait: bool = True) -> int:
    """An open descriptor of ``folder`` holding its exclusive lock (closing it releases the lock).

    ``BlockingIOError`` when ``wait`` is False and another process holds the lock.
    """
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


@contextmanager
def root_lock(root: Path) -> Iterator[None]:
    """Hold the lock of the ``root`` folder itself (made if missing): builds claim their folders and prunes
    delete them under it, one at a time."""
    root.mkdir(parents=True, exist_ok=True)
    lock = lock_folder(root)
    try:
        yield
    finally:
        os.close(lock)


def is_locked(folder: Path) -> bool:
    """Whether another descriptor holds ``folder``'s lock (a build at work in it); ``OSError`` if it cannot
    be opened."""
    try:
        os.close(lock_folder(folder, wait=False))  # free: taken and released at once
    except BlockingIOError:
        return True
    return False
