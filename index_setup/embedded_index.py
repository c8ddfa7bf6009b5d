"""Build a versioned embedded index (tantivy + statistics) and switch ``CURRENT`` to it."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tantivy
from tqdm import tqdm

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.embedded_schema import TOKENIZER, index_document, index_schema, whitespace_analyzer
from es_rerank.stats import NO_DOCUMENTS, Document
from es_rerank.stats_writer import StatsWriter
from es_rerank.versions import (
    CURRENT_FILE,
    VersionNameError,
    check_version,
    is_locked,
    lock_folder,
    new_version,
    read_pointer,
    root_lock,
    version_time_ns,
    write_pointer,
)
from index_setup.ingest import tokenized_batches


@dataclass(frozen=True)
class BuildResult:
    """What a build produced and how long it took."""

    version: str
    directory: Path
    n_docs: int
    n_terms: int
    seconds: float


def build_embedded_index(
    documents: Iterable[Document],
    root: Path,
    version: str | None = None,
    progress: bool = True,
    total: int | None = None,
    allow_empty: bool = False,
    workers: int | None = None,
) -> BuildResult:
    """Index ``documents`` into ``root/<version>`` and point ``root/CURRENT`` at it.

    The corpus streams through: ``workers`` processes tokenize it in batches
    (``index_setup.ingest``; default one per core, 0 tokenizes here), the statistics
    go to disk batch by batch (``StatsWriter``) and tantivy indexes with its own
    thread, so memory does not grow with the number of documents. The pointer moves
    only after the index and its statistics are complete; on any failure the
    half-built version is removed and the served version stays. A corpus that yields
    no document is refused unless ``allow_empty``: an empty index must never replace
    a served one because every record of a file was malformed.
    """
    version = check_version(version) if version else new_version()
    read_pointer(root)  # a damaged CURRENT is refused now, not after the whole build
    started = time.perf_counter()
    writer = stats = None
    with _claim(root, version) as target:
        try:
            (target / "tantivy").mkdir()
            index = tantivy.Index(index_schema(), path=str(target / "tantivy"))
            index.register_tokenizer(TOKENIZER, whitespace_analyzer())
            writer = index.writer(heap_size=256_000_000, num_threads=1)
            stats = StatsWriter(target / "stats", version)
            with tqdm(desc="indexing", unit="doc", total=total, disable=not progress, smoothing=0.1) as bar:
                for _, batch in tokenized_batches(documents, workers):
                    first_row = stats.add(batch).first_row
                    for i, (text, source) in enumerate(zip(batch.texts, batch.sources)):
                        writer.add_document(index_document(first_row + i, text, source, int(batch.lengths[0][i])))
                    bar.update(len(batch))
            writer.commit()
            writer.wait_merging_threads()
            if not stats.n_docs and not allow_empty:
                raise ValueError(NO_DOCUMENTS)
            # The version's files are complete from here: statistics (meta.json last), then the version's meta.json.
            stats.finish()
            seconds = time.perf_counter() - started
            meta = {
                "version": version,
                "n_docs": stats.n_docs,
                "n_terms": stats.n_terms,
                "build_seconds": seconds,
                "built_ns": time.time_ns(),
            }
            (target / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        except BaseException:
            if writer is not None:
                _stop_writer(writer)
            if stats is not None:
                stats.abort()
            shutil.rmtree(target, ignore_errors=True)
            raise
        switch_current(root, version)  # still locked: a prune must not take the version before it is served
    return BuildResult(version, target, stats.n_docs, stats.n_terms, seconds)


def _stop_writer(writer: tantivy.IndexWriter) -> None:
    """Discard uncommitted documents and join the indexing threads.

    Without this, a writer kept alive by the exception's traceback (a caller that
    holds on to the error) goes on writing segment files into the directory we are
    deleting, and the half-built version reappears on disk.
    """
    try:
        writer.rollback()
        writer.wait_merging_threads()
    except (RuntimeError, ValueError):  # consumed (the failure came after the commit), or broken
        pass


def switch_current(root: Path, version: str) -> None:
    """Atomically point ``root/CURRENT`` at an existing version that opens (statistics and tantivy files)."""
    if not (root / check_version(version) / "meta.json").is_file():
        raise FileNotFoundError(f"no complete index version {version} under {root}; `esrr index versions` lists them")
    EmbeddedBackend(root / version, check_ids=True)  # BackendError naming the damage, before anything is served
    write_pointer(root, version)


def list_versions(root: Path) -> list[str]:
    """Complete versions under ``root``, oldest build first (meta.json, written last, marks a complete one)."""
    if not root.is_dir():
        return []
    complete = [p for p in root.iterdir() if (p / "meta.json").is_file()]
    return [p.name for p in sorted(complete, key=lambda p: (_built_ns(p / "meta.json"), p.name))]


def _built_ns(meta: Path) -> int:
    """When the version was built: recorded in meta.json, which a copy (``cp -r``) keeps and a file time does not.

    Versions built before the field existed fall back to the time in their default name,
    then to meta.json's modification time.
    """
    try:
        built = json.loads(meta.read_text(encoding="utf-8")).get("built_ns")
    except (OSError, ValueError, AttributeError):
        built = None
    if isinstance(built, int) and not isinstance(built, bool):
        return built
    named = version_time_ns(meta.parent.name)
    return named if named is not None else meta.stat().st_mtime_ns


@contextmanager
def _claim(root: Path, version: str) -> Iterator[Path]:
    """Create ``root/version`` and hold a lock on that folder for as long as the build runs.

    The kernel drops the lock when the builder dies however it dies (SIGKILL, OOM), in
    any PID namespace, so a folder without meta.json whose lock is free is an
    abandoned build; pid files could not tell (reused pids, containers). Locks are
    those of one machine: the index root must be on a local file system.
    """
    with root_lock(root):
        target = root / version
        if target.exists() or target.is_symlink():
            interrupted = unfinished_builds(root).get(version)
            what = "an interrupted build of it is" if interrupted else "it already exists"
            hint = "delete it with `esrr index prune` or pick" if interrupted else "pick"
            raise FileExistsError(f"index version {version}: {what} at {target}; {hint} another --version")
        target.mkdir()
        lock = lock_folder(target)
    try:
        yield target
    finally:
        os.close(lock)


def unfinished_builds(root: Path) -> dict[str, bool]:
    """Version folders without meta.json, each with whether its build was abandoned (the folder's lock is free)."""
    if not root.is_dir():
        return {}
    unfinished = {}
    for path in root.iterdir():
        try:
            check_version(path.name)
        except VersionNameError:  # CURRENT, its temporary files, anything not ours
            continue
        if path.is_dir() and not (path / "meta.json").is_file():
            unfinished[path.name] = not _being_built(path)
    return dict(sorted(unfinished.items()))


def _being_built(version_dir: Path) -> bool:
    try:
        return is_locked(version_dir)
    except OSError:  # gone or unreadable: leave it alone
        return True


def _delete_version(root: Path, version: str, deleted: list[str]) -> None:
    """Delete one version folder; a symlinked one loses its link only, its target is left."""
    path = root / version
    try:
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path)
    except OSError as error:
        done = f"; already deleted: {', '.join(deleted)}" if deleted else ""
        raise PruneError(
            f"cannot delete index version {version} at {path}: {error.strerror or error}"
            f"{done}; fix its permissions or delete it by hand"
        ) from None


class PruneError(ValueError):
    """A version could not be deleted; the message names it and what was deleted before it."""


def prune_versions(
    root: Path, keep: int = 2, on_deleted: Callable[[str, bool], None] = lambda version, interrupted: None
) -> list[str]:
    """Delete all but the newest ``keep`` versions (never the current one) and the folders of abandoned builds.

    Returns the deleted versions; ``on_deleted(name, interrupted)`` is told of each
    deletion as it happens, abandoned builds (``interrupted``) first.
    """
    if keep < 0:
        raise ValueError(f"keep={keep}: the number of versions to keep must be 0 or more")
    if not root.is_dir():
        return []
    with root_lock(root):
        current = read_pointer(root)
        versions = list_versions(root)
        if (root / CURRENT_FILE).exists() and current not in versions:
            # The served version is unknown: deleting "old" ones could delete what was meant to be served.
            raise ValueError(
                f"{root / CURRENT_FILE} names {current or 'nothing'}, not one of the complete "
                f"versions {versions}; serve one with `esrr index use VERSION` before pruning"
            )
        abandoned = [name for name, is_abandoned in unfinished_builds(root).items() if is_abandoned]
        doomed = [
            v for v in (versions[:-keep] if keep > 0 else versions) if v != current and not _being_built(root / v)
        ]  # complete, but its build has not served it yet
        deleted: list[str] = []
        for name in [*abandoned, *doomed]:
            _delete_version(root, name, deleted)
            deleted.append(name)
            on_deleted(name, name in abandoned)
    return [name for name in deleted if name not in abandoned]
