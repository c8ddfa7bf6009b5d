"""Versioned embedded builds: layout, the atomic CURRENT swap, failed builds, prune."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_rerank.backends.base import BackendError, text_hits
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.stats import CorpusStats, Document
from es_rerank.stats_writer import StatsWriter
from es_rerank.versions import CURRENT_FILE, new_version
from index_setup.embedded_index import (
    BuildResult,
    PruneError,
    build_embedded_index,
    list_versions,
    prune_versions,
    switch_current,
    unfinished_builds,
)

OLD_DOCS = (
    Document("o1", "Vitamin D deficiency", "Vitamin D deficiency causes bone loss."),
    Document("o2", "Bone health", "Calcium and vitamin K support bone health."),
    Document("o3", "Breast cancer", ""),
)
NEW_DOCS = (
    Document("n1", "Curcumin and colorectal cancer", "Turmeric curcumin slows tumour growth."),
    Document("n2", "Green tea", "Green tea catechins and cardiovascular risk."),
)


def build(root: Path, docs, version: str | None = None) -> BuildResult:
    return build_embedded_index(iter(docs), root, version=version, progress=False)


def served(root: Path) -> str:
    return (root / CURRENT_FILE).read_text(encoding="utf-8").strip()


def search_ids(root: Path, query: str) -> list[str]:
    return [h.doc_id for h in text_hits(EmbeddedBackend.open_current(root), query, 10)]


class Boom(RuntimeError):
    pass


def failing_documents(good: int) -> Iterator[Document]:
    """``good`` documents, then an error, as a reader that hits a broken file would."""
    for i in range(good):
        yield Document(f"f{i}", f"Failing build document {i}", "curcumin zebrafish")
    raise Boom("the corpus file went away")


def test_build_writes_a_complete_version_and_serves_it(tmp_path: Path) -> None:
    root = tmp_path / "indexes" / "embedded"  # created by the build
    result = build(root, OLD_DOCS, version="v1")
    assert result.version == "v1"
    assert result.directory == root / "v1"
    assert result.n_docs == 3
    assert result.n_terms > 0 and result.seconds >= 0
    version_dir = root / "v1"
    assert (version_dir / "tantivy").is_dir() and any((version_dir / "tantivy").iterdir())
    assert (version_dir / "stats" / "meta.json").is_file()
    meta = json.loads((version_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["version"] == "v1" and meta["n_docs"] == 3 and meta["n_terms"] == result.n_terms
    assert served(root) == "v1"
    stats = CorpusStats.load(version_dir / "stats")
    assert stats.version == "v1" and stats.doc_ids == ["o1", "o2", "o3"] and len(stats.vocab) == result.n_terms
    assert search_ids(root, "vitamin")[0] == "o1"
    # No temporary pointer file is left behind.
    assert sorted(p.name for p in root.iterdir()) == [CURRENT_FILE, "v1"]


def test_default_version_is_a_sortable_timestamp(tmp_path: Path) -> None:
    first = build(tmp_path, OLD_DOCS).version
    second = build(tmp_path, NEW_DOCS).version
    assert first < second
    assert list_versions(tmp_path) == [first, second]
    assert served(tmp_path) == second
    assert new_version() > second


def test_reindex_swaps_current_and_keeps_the_old_version(tmp_path: Path) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    old = EmbeddedBackend.open_current(tmp_path)
    build(tmp_path, NEW_DOCS, version="v2")
    assert served(tmp_path) == "v2"
    assert (tmp_path / "v1" / "meta.json").is_file()
    assert search_ids(tmp_path, "curcumin") == ["n1"]
    assert search_ids(tmp_path, "vitamin") == []
    # A backend opened before the swap keeps serving its own version.
    assert [h.doc_id for h in text_hits(old, "vitamin", 10)][0] == "o1"
    assert old.version == "v1"


def test_existing_version_name_is_refused(tmp_path: Path) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    with pytest.raises(FileExistsError, match="v1"):
        build(tmp_path, NEW_DOCS, version="v1")
    assert served(tmp_path) == "v1"
    assert search_ids(tmp_path, "vitamin")[0] == "o1"


@pytest.mark.parametrize("good", [0, 5])
def test_failed_build_is_removed_and_old_version_keeps_serving(tmp_path: Path, good: int) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    with pytest.raises(Boom):
        build_embedded_index(failing_documents(good), tmp_path, version="v2", progress=False)
    assert not (tmp_path / "v2").exists()
    assert served(tmp_path) == "v1"
    assert list_versions(tmp_path) == ["v1"]
    assert search_ids(tmp_path, "vitamin")[0] == "o1"
    assert search_ids(tmp_path, "curcumin") == []


def test_interrupted_build_is_removed(tmp_path: Path) -> None:
    """Ctrl-C (a BaseException) mid-build cleans up like any error."""
    build(tmp_path, OLD_DOCS, version="v1")

    def interrupted() -> Iterator[Document]:
        yield from NEW_DOCS
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_embedded_index(interrupted(), tmp_path, version="v2", progress=False)
    assert not (tmp_path / "v2").exists()
    assert served(tmp_path) == "v1"


def test_failure_after_the_tantivy_commit_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saving the statistics fails after tantivy committed: the version still goes."""
    build(tmp_path, OLD_DOCS, version="v1")

    def no_space(self) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(StatsWriter, "finish", no_space)
    with pytest.raises(OSError, match="No space"):
        build(tmp_path, NEW_DOCS, version="v2")
    assert not (tmp_path / "v2").exists()
    assert served(tmp_path) == "v1"
    monkeypatch.undo()
    assert search_ids(tmp_path, "vitamin")[0] == "o1"


def test_failed_first_build_leaves_no_current(tmp_path: Path) -> None:
    with pytest.raises(Boom):
        build_embedded_index(failing_documents(3), tmp_path, version="v1", progress=False)
    assert not (tmp_path / "v1").exists()
    assert not (tmp_path / CURRENT_FILE).exists()
    assert list_versions(tmp_path) == []


def test_duplicate_document_ids_fail_and_swap_nothing(tmp_path: Path) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    docs = [*NEW_DOCS, Document("n1", "Another n1", "duplicate id")]
    with pytest.raises(ValueError, match="duplicate document id 'n1'"):
        build(tmp_path, docs, version="v2")
    assert not (tmp_path / "v2").exists()
    assert served(tmp_path) == "v1"
    assert search_ids(tmp_path, "vitamin")[0] == "o1"


def test_switch_current_between_versions(tmp_path: Path) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    build(tmp_path, NEW_DOCS, version="v2")
    switch_current(tmp_path, "v1")
    assert served(tmp_path) == "v1"
    assert search_ids(tmp_path, "vitamin")[0] == "o1"
    switch_current(tmp_path, "v2")
    assert search_ids(tmp_path, "curcumin") == ["n1"]


def test_switch_current_to_a_missing_or_incomplete_version_fails(tmp_path: Path) -> None:
    build(tmp_path, OLD_DOCS, version="v1")
    with pytest.raises(FileNotFoundError, match="no complete index version v9"):
        switch_current(tmp_path, "v9")
    (tmp_path / "half" / "tantivy").mkdir(parents=True)  # no meta.json: not complete
    with pytest.raises(FileNotFoundError, match="half"):
        switch_current(tmp_path, "half")
    build(tmp_path, OLD_DOCS, version="v2")  # served once built
    switch_current(tmp_path, "v1")
    shutil.rmtree(tmp_path / "v2" / "stats")  # meta.json there, statistics gone
    with pytest.raises(BackendError, match="esrr index build"):
        switch_current(tmp_path, "v2")
    assert served(tmp_path) == "v1"


def test_list_versions_is_oldest_first_and_only_complete_versions(tmp_path: Path) -> None:
    assert list_versions(tmp_path / "missing") == []
    for age, version in enumerate(("zz-first", "20240102", "20240101")):
        build(tmp_path, OLD_DOCS, version=version)
        os.utime(tmp_path / version / "meta.json", ns=((9 - age) * 10**9,) * 2)  # file times reversed, as by a copy
    (tmp_path / "20249999-half").mkdir()  # an interrupted build without meta.json
    assert list_versions(tmp_path) == ["zz-first", "20240102", "20240101"]  # by recorded build time, not by name
    meta = tmp_path / "zz-first" / "meta.json"  # built before meta.json recorded the time: its file time counts
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "built_ns"}))
    os.utime(meta, ns=(time.time_ns() + 10**9,) * 2)
    assert list_versions(tmp_path) == ["20240102", "20240101", "zz-first"]
    for version in ("20240101t000000000000z", "20230101t000000000000z"):  # default names of older builds
        build(tmp_path, OLD_DOCS, version=version)
        meta = tmp_path / version / "meta.json"
        meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "built_ns"}))
    assert list_versions(tmp_path)[:2] == ["20230101t000000000000z", "20240101t000000000000z"]  # by their names


@pytest.fixture
def four_versions(tmp_path: Path) -> Path:
    for version in ("v1", "v2", "v3", "v4"):
        build(tmp_path, OLD_DOCS, version=version)
    return tmp_path


def test_prune_keeps_the_newest(four_versions: Path) -> None:
    assert prune_versions(four_versions, keep=2) == ["v1", "v2"]
    assert list_versions(four_versions) == ["v3", "v4"]
    assert not (four_versions / "v1").exists()
    assert served(four_versions) == "v4"
    assert prune_versions(four_versions, keep=2) == []


def test_prune_never_deletes_the_current_version(four_versions: Path) -> None:
    switch_current(four_versions, "v1")
    assert prune_versions(four_versions, keep=1) == ["v2", "v3"]
    assert list_versions(four_versions) == ["v1", "v4"]
    assert search_ids(four_versions, "vitamin")[0] == "o1"


def test_prune_keep_zero_leaves_only_the_current(four_versions: Path) -> None:
    switch_current(four_versions, "v2")
    assert prune_versions(four_versions, keep=0) == ["v1", "v3", "v4"]
    assert list_versions(four_versions) == ["v2"]
    assert served(four_versions) == "v2"


def test_prune_rejects_a_negative_keep(four_versions: Path) -> None:
    with pytest.raises(ValueError, match="0 or more"):
        prune_versions(four_versions, keep=-1)
    assert list_versions(four_versions) == ["v1", "v2", "v3", "v4"]


@pytest.mark.parametrize("pointer", ["v9\n", "\n"])
def test_prune_refuses_when_the_served_version_is_unknown(four_versions: Path, pointer: str) -> None:
    (four_versions / "CURRENT").write_text(pointer, encoding="utf-8")  # a hand-edited or half-restored pointer
    with pytest.raises(ValueError, match="esrr index use VERSION"):
        prune_versions(four_versions, keep=0)
    assert list_versions(four_versions) == ["v1", "v2", "v3", "v4"]


def test_prune_deletes_the_link_of_a_symlinked_version_and_leaves_its_target(
    four_versions: Path, tmp_path_factory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "v2"
    shutil.move(four_versions / "v2", elsewhere)
    (four_versions / "v2").symlink_to(elsewhere)
    assert list_versions(four_versions) == ["v1", "v2", "v3", "v4"]
    assert prune_versions(four_versions, keep=1) == ["v1", "v2", "v3"]
    assert list_versions(four_versions) == ["v4"] and (elsewhere / "meta.json").is_file()


def test_a_prune_that_cannot_delete_names_the_version_and_what_it_deleted(
    four_versions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path).name == "v2":
            raise PermissionError(13, "Permission denied")
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    with pytest.raises(PruneError, match=r"cannot delete index version v2 .*Permission denied; already deleted: v1"):
        prune_versions(four_versions, keep=1)
    assert list_versions(four_versions) == ["v2", "v3", "v4"]


def test_builds_killed_outright_are_listed_and_pruned_running_ones_kept(four_versions: Path) -> None:
    """A build holds a lock on its folder while it runs; the kernel drops it however the builder dies."""
    import fcntl

    for name in ("killed", "running"):
        (four_versions / name / "tantivy").mkdir(parents=True)
    running = os.open(four_versions / "running", os.O_RDONLY)
    try:
        fcntl.flock(running, fcntl.LOCK_EX)  # as the build itself holds it
        assert unfinished_builds(four_versions) == {"killed": True, "running": False}
        told: list[tuple[str, bool]] = []
        assert prune_versions(four_versions, keep=3, on_deleted=lambda *event: told.append(event)) == ["v1"]
        assert told == [("killed", True), ("v1", False)]
        assert list(unfinished_builds(four_versions)) == ["running"]
    finally:
        os.close(running)
    assert unfinished_builds(four_versions) == {"running": True}  # its builder is gone now


def test_a_build_holds_its_lock_until_it_is_complete(tmp_path: Path) -> None:
    seen: list[dict[str, bool]] = []

    def watched() -> Iterator[Document]:
        yield OLD_DOCS[0]
        seen.append(unfinished_builds(tmp_path))  # mid-build, as a prune would see it

    build(tmp_path, watched(), version="v1")
    assert seen == [{"v1": False}] and unfinished_builds(tmp_path) == {}


def test_rebuilding_the_name_of_an_interrupted_build_says_how_to_clear_it(tmp_path: Path) -> None:
    (tmp_path / "half" / "tantivy").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="an interrupted build of it is at .*esrr index prune"):
        build(tmp_path, OLD_DOCS, version="half")


def test_a_finished_build_is_not_pruned_before_it_is_served(
    four_versions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import index_setup.embedded_index as module

    real_switch, pruned = module.switch_current, []

    def prune_then_switch(root: Path, version: str) -> None:
        pruned.append(prune_versions(root, keep=0))  # another admin's prune, between meta.json and CURRENT
        real_switch(root, version)

    monkeypatch.setattr(module, "switch_current", prune_then_switch)
    build(four_versions, NEW_DOCS, version="v5")
    assert "v5" not in pruned[0] and served(four_versions) == "v5"
    assert search_ids(four_versions, "green tea") == ["n2"]


def test_prune_of_an_empty_root(tmp_path: Path) -> None:
    assert prune_versions(tmp_path / "missing", keep=2) == []


def test_an_empty_corpus_never_replaces_the_served_index(tmp_path: Path) -> None:
    from es_rerank.backends.embedded_version import current_version
    from es_rerank.stats import Document
    from index_setup.embedded_index import build_embedded_index, list_versions

    first = build_embedded_index([Document("d1", "vitamin D", "bone")], tmp_path, version="v1", progress=False)
    with pytest.raises(ValueError, match="nothing to index"):
        build_embedded_index([], tmp_path, version="v2", progress=False)
    assert current_version(tmp_path) == first.version and list_versions(tmp_path) == ["v1"]


def test_a_version_name_built_again_after_a_prune_is_followed(tmp_path: Path) -> None:
    """Same folder name, another build: the statistics' build id tells them apart."""
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.ranking.served import ServedSearch

    build(tmp_path, OLD_DOCS, version="v1")
    backend = EmbeddedBackend.open_current(tmp_path)
    served = ServedSearch(SearchPipeline(backend, 10), check_every_s=3600)
    build(tmp_path, NEW_DOCS, version="v2")
    prune_versions(tmp_path, keep=1)
    build(tmp_path, NEW_DOCS, version="v1")
    assert served.follow() and served.pipeline().backend.stats.n_docs == len(NEW_DOCS)  # a change, logged
    followed = backend.current()
    assert followed is not backend and followed.version_dir == backend.version_dir
    assert followed.stats.build_id != backend.stats.build_id and followed.current() is followed
    assert [h.doc_id for h in text_hits(followed, "green tea", 5)] == ["n2"]
