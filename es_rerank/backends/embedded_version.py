"""The version folders of the embedded index: which one ``CURRENT`` serves, and opening one's files, each failure a
``BackendError`` that names the fix.

Each version lives in its own directory and ``CURRENT`` names the one being served, swapped atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import tantivy

from es_rerank.backends.base import BackendError
from es_rerank.backends.embedded_schema import TOKENIZER, whitespace_analyzer
from es_rerank.backends.tantivy_files import TantivyFileError, hold_tantivy_files
from es_rerank.held_files import FileBeingWritten
from es_rerank.settings import missing_from_home
from es_rerank.stats import CorpusStats, StatsError
from es_rerank.versions import CURRENT_FILE, VersionNameError, read_pointer


class IndexBeingWritten(BackendError):
    """A file of the version is open for writing by another process: not served until it is closed and verifies."""


def current_version(root: Path) -> str:
    """The version named by ``root/CURRENT``."""
    try:
        version = read_pointer(root)
    except VersionNameError as error:
        raise BackendError(f"{error} (`esrr index use VERSION`, see `esrr index versions`)") from None
    if version is None and not (root / CURRENT_FILE).is_file():
        raise BackendError(
            missing_from_home(
                f"no embedded index in {Path(root).absolute()}", "build one there with `esrr index build`"
            )
        )
    if version is None:
        raise BackendError(
            f"{root / CURRENT_FILE} is empty; serve a version with `esrr index use VERSION` "
            "(see `esrr index versions`) or build one with `esrr index build`"
        )
    return version


def changed_reason(version: str, change: str) -> str:
    """Why a version's searches are refused: its files changed on disk (names, no paths), and the admin's fix."""
    return (
        f"the files of index version {version!r} changed on disk after they were opened and verified ({change}); "
        "its searches are refused rather than read other data than the build wrote: serve another version "
        "(`esrr index use VERSION`) or rebuild it (`esrr index build`); the gateway serves this version again "
        "once its files verify (checksums), at its next look at the index (ESRR_GATEWAY_INDEX_CHECK_S)"
    )


def folder_state(version_dir: Path) -> tuple:
    """What ``stat`` says of every file of a version folder: a failed verification is tried again when it changes."""
    state: list[tuple[object, ...]] = []
    for folder in (version_dir / "stats", version_dir / "tantivy"):
        try:
            for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
                st = entry.stat()
                state.append((folder.name, entry.name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            state.append((folder.name, None))
    return tuple(state)


def read_meta(version_dir: Path) -> dict[str, Any]:
    """The version's ``meta.json``, written last by a build: a folder without it is incomplete."""
    meta_path = version_dir / "meta.json"
    if not meta_path.is_file():
        raise BackendError(
            f"{version_dir} is not a complete embedded index; build one with "
            "`esrr index build` or serve another version with `esrr index use VERSION` "
            "(`esrr index versions` lists them)"
        )
    try:
        return json.loads(meta_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise BackendError(
            f"{meta_path} is damaged ({type(error).__name__}: {error}); rebuild the index "
            "(`esrr index build`) or serve another version (`esrr index use`)"
        ) from None


def open_files(version_dir: Path, check_ids: bool) -> tuple[CorpusStats, list]:
    """The version's statistics and its tantivy segment files, held (and leased) before tantivy maps them.

    A damaged copy (statistics or tantivy files missing) is a BackendError like a missing
    meta.json, so callers that handle one handle all."""
    try:
        stats = CorpusStats.load(version_dir / "stats", check_ids=check_ids)
        return stats, list(hold_tantivy_files(version_dir / "tantivy", verify=check_ids))
    except StatsError as error:
        raise BackendError(f"{error} (index version {version_dir.name})") from None
    except FileBeingWritten as error:
        raise IndexBeingWritten(
            f"index version {version_dir.name} is being written ({error.strerror}); it is "
            "served once it is done and verifies, or serve another version "
            "(`esrr index use VERSION`)"
        ) from None
    except TantivyFileError as error:
        raise BackendError(
            f"the tantivy index of {version_dir} is damaged ({error}); rebuild it with "
            "`esrr index build` or serve another version with `esrr index use VERSION`"
        ) from None
    except OSError as error:
        raise BackendError(
            f"cannot read the tantivy index of {version_dir} ({error.strerror}); rebuild "
            "it with `esrr index build` or serve another version with `esrr index use VERSION`"
        ) from None


def open_tantivy(version_dir: Path) -> tuple[tantivy.Index, tantivy.Searcher]:
    """The version's tantivy index, opened for reading with our tokenizer, and its searcher."""
    try:
        index = tantivy.Index.open(str(version_dir / "tantivy"))
        index.register_tokenizer(TOKENIZER, whitespace_analyzer())
        return index, index.searcher()
    except ValueError as error:
        if "Lockfile" in str(error):  # tantivy writes lock files even to read
            raise BackendError(
                f"cannot open the tantivy index of {version_dir} ({error}): tantivy needs "
                "to write lock files there; make ESRR_HOME writable"
            ) from None
        raise BackendError(
            f"cannot open the tantivy index of {version_dir} ({error}); it is "
            "incomplete or damaged: rebuild it with `esrr index build` or serve "
            "another version with `esrr index use VERSION`"
        ) from None
