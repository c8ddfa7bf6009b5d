"""``es_rerank.manifest`` and ``es_rerank.held_files`` under ``CorpusStats``: what a build wrote, checked when opened
and before use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from es_rerank.held_files import NotNumpyError, map_npy
from es_rerank.manifest import MANIFEST_FILE, checksum_of_file, read_manifest
from es_rerank.stats import CorpusStats, StatsError

STATS_FILES = {
    "title_ptr.npy",
    "title_values.npy",
    "abstract_ptr.npy",
    "abstract_values.npy",
    "embedding_of.npy",
    "df_title.npy",
    "df_abstract.npy",
    "df_text.npy",
    *(
        f"{table}{part}"
        for table in ("vocab", "doc_ids")
        for part in (".txt", "_offsets.npy", "_keys.npy", "_rows.npy")
    ),
}


def test_a_build_records_every_file_it_wrote(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    manifest = read_manifest(tmp_path)
    assert manifest is not None and set(manifest) == STATS_FILES
    for name, entry in manifest.items():
        assert entry.size == (tmp_path / name).stat().st_size and entry.checksum == checksum_of_file(tmp_path / name)
    other = tmp_path / "copy.npy"
    other.write_bytes((tmp_path / "title_values.npy").read_bytes())
    assert checksum_of_file(other) == manifest["title_values.npy"].checksum


def test_a_file_of_another_size_is_refused_at_every_open(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    with open(tmp_path / "df_text.npy", "ab") as file:
        file.write(b"\0" * 8)  # numpy still reads the array: only the manifest tells
    with pytest.raises(StatsError, match=r"df_text.npy has \d+ bytes, the build wrote \d+ .*grown.*esrr index build"):
        CorpusStats.load(tmp_path)


def test_a_rewritten_file_is_refused_where_the_whole_version_is_read(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    path = tmp_path / "df_title.npy"
    df = np.load(path)
    df[0] += 1  # a plausible count: no shape or range check can tell
    np.save(path, df)
    CorpusStats.load(tmp_path)
    with pytest.raises(StatsError, match="df_title.npy differs from what the build wrote"):
        CorpusStats.load(tmp_path, check_ids=True)


def test_statistics_without_a_manifest_still_open_and_a_damaged_one_is_named(
    tiny_stats: CorpusStats, tmp_path: Path
) -> None:
    tiny_stats.save(tmp_path)
    (tmp_path / MANIFEST_FILE).unlink()  # saved before manifests
    assert CorpusStats.load(tmp_path, check_ids=True).n_docs == 3
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"format": 1, "files": {"vocab.txt": {"bytes": "x"}}}))
    with pytest.raises(StatsError, match=r"damaged \(manifest.json is damaged"):
        CorpusStats.load(tmp_path)


def test_changes_under_the_process_are_told_before_a_read(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    stats = CorpusStats.load(tmp_path)
    assert stats.changed_files() is None
    size = (tmp_path / "abstract_values.npy").stat().st_size
    os.truncate(tmp_path / "abstract_values.npy", 100)  # nothing reads the map here: no SIGBUS
    with open(tmp_path / "df_text.npy", "ab") as file:
        file.write(b"\0")
    change = stats.changed_files()
    assert f"abstract_values.npy was cut short from {size} to 100 bytes" in change
    assert "df_text.npy grew" in change and str(tmp_path) not in change and "esrr index use" in change
    assert tiny_stats.changed_files() is None  # built in memory: no files to change


def test_only_numeric_npy_files_are_mapped(tmp_path: Path) -> None:
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(NotNumpyError, match="Python objects"):
        map_npy(tmp_path / "objects.npy")
    np.save(tmp_path / "short.npy", np.arange(1000, dtype=np.int64))
    os.truncate(tmp_path / "short.npy", 200)
    with pytest.raises(NotNumpyError, match=r"only 200 bytes long, shorter than the \(1000,\) array"):
        map_npy(tmp_path / "short.npy")
    np.save(tmp_path / "empty.npy", np.zeros(0, dtype=np.int32))
    array, held = map_npy(tmp_path / "empty.npy")
    assert array.shape == (0,) and held.change() is None
