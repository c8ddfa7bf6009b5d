"""Version names and CURRENT pointers, shared by indexes, statistics and embeddings."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rerank.versions import CURRENT_FILE, VersionNameError, check_version, new_version, read_pointer, write_pointer


def test_new_versions_sort_in_time_and_are_valid_lower_case_names() -> None:
    first, second = new_version(), new_version("w2v-")
    assert check_version(first) == first and first == first.lower()
    assert second.startswith("w2v-") and new_version() > first


@pytest.mark.parametrize("name", ["My v1", "", "../x", "-v1", "a/b", "CURRENT", "current", "x" * 129])
def test_bad_version_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(VersionNameError, match="letters, digits"):
        check_version(name)


def test_pointer_round_trip_and_missing_or_empty_pointer(tmp_path: Path) -> None:
    assert read_pointer(tmp_path) is None
    (tmp_path / CURRENT_FILE).write_text("  \n")
    assert read_pointer(tmp_path) is None
    write_pointer(tmp_path, "v2")
    assert read_pointer(tmp_path) == "v2" and [p.name for p in tmp_path.iterdir()] == [CURRENT_FILE]
    with pytest.raises(VersionNameError):
        write_pointer(tmp_path, "bad name")
    assert read_pointer(tmp_path) == "v2"
    (tmp_path / CURRENT_FILE).write_text("../../elsewhere\n")  # never followed out of the root
    with pytest.raises(VersionNameError, match="CURRENT is damaged"):
        read_pointer(tmp_path)


def test_a_folder_in_place_of_the_pointer_is_damage_and_no_swap_leaves_a_temporary_file(tmp_path: Path) -> None:
    (tmp_path / CURRENT_FILE).mkdir()
    with pytest.raises(VersionNameError, match="CURRENT is damaged: it is not a file; remove it"):
        read_pointer(tmp_path)
    with pytest.raises(VersionNameError, match="CURRENT is damaged: it is not a file; remove it"):
        write_pointer(tmp_path, "v1")
    assert [p.name for p in tmp_path.iterdir()] == [CURRENT_FILE]


def test_version_time_reads_the_default_names_only() -> None:
    from datetime import datetime, timezone

    from es_rerank.versions import new_version, version_time_ns

    name = new_version("v")
    made = version_time_ns(name)
    assert made is not None and abs(made - datetime.now(timezone.utc).timestamp() * 1e9) < 60e9
    assert version_time_ns("20240101t000000000001z") == 1704067200 * 10**9 + 1000
    assert version_time_ns("v1") is None and version_time_ns("20241399t000000000000z") is None
