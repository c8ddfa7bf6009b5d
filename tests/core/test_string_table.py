"""Memory-mapped string tables and the key set of the streaming build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from es_rerank import string_table
from es_rerank.string_table import KeySet, SortedRuns, StringTable, StringTableError, string_key, write_string_table


def test_rows_and_lookups(tmp_path: Path) -> None:
    strings = ["7", "007", "α-synuclein", "IL-6", "", "rs1000123", "18446744073709551615"]
    write_string_table(tmp_path, "t", strings)
    table = StringTable.open(tmp_path, "t", len(strings))
    assert list(table) == strings and table[-1] == strings[-1] and table[1:3] == strings[1:3]
    assert [table.row_of(s) for s in strings] == list(range(len(strings)))
    assert table.row_of("8") is None and "IL6" not in table and 7 not in table
    assert string_key("7") == 7 and string_key("007") != 7  # only canonical numbers are their own key
    with pytest.raises(IndexError):
        table[len(strings)]
    rows = [6, 0, 4, 2, 2, 3]
    assert table.take(rows) == [strings[row] for row in rows] and table.take([]) == []
    with pytest.raises(IndexError, match="outside the table of 7 strings"):
        table.take([0, 7])


def test_a_key_shared_by_two_strings_still_finds_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(string_table, "string_key", lambda value: 42)  # every string under one key
    write_string_table(tmp_path, "t", ["a", "b", "c"])
    table = StringTable.open(tmp_path, "t", 3)
    assert np.load(tmp_path / "t_keys.npy").tolist() == [42, 42, 42]
    assert [table.row_of(s) for s in "abc"] == [0, 1, 2] and table.row_of("d") is None


def test_a_table_that_disagrees_with_its_offsets_is_refused(tmp_path: Path) -> None:
    write_string_table(tmp_path, "t", ["one", "two"])
    (tmp_path / "t.txt").write_text("one", encoding="utf-8")
    with pytest.raises(StringTableError, match=r"t.txt \(3 bytes\) does not match t_offsets.npy"):
        StringTable.open(tmp_path, "t", 2)


def test_key_set_finds_repeats_in_and_across_batches() -> None:
    seen = KeySet(buffer=4)
    assert [seen.add(k) for k in (5, 6, 5)] == [True, True, False]
    for k in range(100, 110):  # past the buffer: merged into the sorted array
        assert seen.add(k)
    assert not seen.add(105) and not seen.add(6)
    repeated = seen.add_many(np.array([1, 105, 2, 1, 6], dtype=np.uint64))
    assert repeated.tolist() == [False, True, False, True, True]
    assert not seen.add(2) and len(seen) == 14


def test_sorted_runs_find_every_key_with_its_values_whatever_the_batches() -> None:
    runs = SortedRuns(np.int32)
    rng = np.random.default_rng(0)
    keys = rng.permutation(np.arange(1, 20_001, dtype=np.uint64) * 7919)
    start = 0
    for size in (1, 3, 500, 40, 4000, 7, 9000, 6449):  # batches of any size, merged as they come
        runs.add(keys[start : start + size], np.arange(start, start + size))
        start += size
    assert start == len(keys) == len(runs)
    assert len(runs._runs) <= 6  # sizes at least halve from run to run
    found, (where,) = runs.find(np.concatenate([keys, np.array([3, 5], dtype=np.uint64)]))
    assert found.tolist() == [True] * len(keys) + [False, False]
    np.testing.assert_array_equal(where[: len(keys)], np.arange(len(keys)))
    assert runs.contains(int(keys[123])) and not runs.contains(3)
