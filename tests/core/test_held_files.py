"""Held files' fingerprints with ctime, verified by content; tantivy's footer CRC; the guard around a read.

Leases need a process that owns its main thread and handles SIGIO: ``esrr serve``, tested in
``tests/gateway/test_served_files.py``. This process never leases (``leases_watched``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from es_rerank.backends.tantivy_files import TantivyFileError, footer_intact, hold_tantivy_files
from es_rerank.held_files import FileGuard, FilesChanged, HeldFile, leases_watched
from es_rerank.stats import CorpusStats
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS


@pytest.fixture
def version(tmp_path: Path) -> Path:
    build_embedded_index(list(TINY_DOCS), tmp_path / "embedded", version="v1", progress=False, workers=0)
    return tmp_path / "embedded" / "v1"


def _rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    st = path.stat()
    with open(path, "r+b") as file:
        file.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_no_lease_is_taken_where_the_process_does_not_watch_them(version):
    assert not leases_watched()
    assert not any(file.leased for file in CorpusStats.load(version / "stats").held_files)


def test_a_rewrite_with_its_mtime_set_back_is_found_by_the_checksum_and_its_undoing_accepted(version):
    stats = CorpusStats.load(version / "stats")
    path = version / "stats" / "doc_ids.txt"
    original = path.read_bytes()
    _rewrite_keeping_mtime(path, original.replace(b"a", b"z", 1))
    assert path.stat().st_size == len(original)
    change = stats.changed_files()
    assert change is not None and "doc_ids.txt was rewritten in place (its modification time set back)" in change
    _rewrite_keeping_mtime(path, original)  # put back as built: the checksum matches again
    assert stats.changed_files() is None


def test_a_change_of_mode_is_verified_and_accepted(version):
    stats = CorpusStats.load(version / "stats")
    for path in (version / "stats").glob("*.npy"):
        path.chmod(0o444)
    assert stats.changed_files() is None


def test_tantivy_files_are_verified_by_the_crc_in_their_footer(version):
    held = hold_tantivy_files(version / "tantivy", verify=True)
    assert held and all(footer_intact(file.descriptor) for file in held)
    (term,) = (version / "tantivy").glob("*.term")
    data = bytearray(term.read_bytes())
    data[len(data) // 2] ^= 0xFF
    _rewrite_keeping_mtime(term, bytes(data))
    with pytest.raises(TantivyFileError, match=r"\.term differs from what tantivy wrote"):
        hold_tantivy_files(version / "tantivy", verify=True)
    (changed,) = [file for file in held if file.name == term.name]
    assert "was rewritten in place (its modification time set back)" in changed.change()


def test_a_read_that_fails_on_a_changed_file_is_refused_and_one_on_unchanged_files_raises_its_own(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100)
    guard = FileGuard([HeldFile(path)])
    with pytest.raises(KeyError):  # nothing changed: the read's own error, a bug to report
        with guard.reading():
            raise KeyError("not about files")
    with pytest.raises(FilesChanged, match="data was cut short from 100 to 10 bytes"):
        with guard.reading():
            os.truncate(path, 10)
            raise IndexError("a row pointer past the end")  # what a read of the changed file raised
    with pytest.raises(FilesChanged):  # and before the next read
        with guard.reading():
            pytest.fail("read a changed file")


def test_reads_nest_and_only_the_outermost_checks(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 100)
    guard = FileGuard([HeldFile(path)])
    with pytest.raises(FilesChanged):
        with guard.reading():
            with guard.reading():
                os.truncate(path, 10)
            # the inner read ended without a check: the outer one refuses the whole
