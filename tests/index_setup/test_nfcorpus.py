"""Finding and loading NFCorpus: the real copy in ../shared/data, and every fallback."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from es_rerank.settings import DEFAULT_NFCORPUS
from index_setup import nfcorpus
from index_setup.nfcorpus import (
    BEIR_URL,
    ENV_VAR,
    NFCorpus,
    NFCorpusNotFoundError,
    UnknownSplitError,
    find_nfcorpus,
)

real_data = pytest.mark.skipif(
    not (DEFAULT_NFCORPUS / "queries.jsonl").is_file(), reason=f"NFCorpus is not at {DEFAULT_NFCORPUS}"
)


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No NFCorpus anywhere: no env variable, no shared copy, an empty artifacts home."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("ESRR_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(nfcorpus, "DEFAULT_NFCORPUS", tmp_path / "no-shared-copy")
    return tmp_path


def write_beir(root: Path, graded_train: bool) -> Path:
    """A two-query NFCorpus look-alike in BEIR layout."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"MED-{i}", "title": f"t{i}", "text": f"a{i}"}) + "\n" for i in (1, 2)),
        encoding="utf-8",
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": q.lower()}) + "\n" for q in ("PLAIN-1", "PLAIN-2", "PLAIN-3")),
        encoding="utf-8",
    )
    header = "query-id\tcorpus-id\tscore\n"
    (root / "qrels" / "train.tsv").write_text(header + "PLAIN-1\tMED-1\t1\nPLAIN-1\tMED-2\t1\n", encoding="utf-8")
    (root / "qrels" / "dev.tsv").write_text(header + "PLAIN-2\tMED-1\t2\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(header + "PLAIN-3\tMED-2\t1\nPLAIN-9\tMED-2\t1\n", encoding="utf-8")
    if graded_train:
        (root / "original" / "qrels").mkdir(parents=True)
        (root / "original" / "qrels" / "train.2-1-0.qrel").write_text(
            "PLAIN-1 0 MED-1 2\nPLAIN-1 0 MED-2 1\n", encoding="utf-8"
        )
    return root


@real_data
def test_finds_the_shared_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert find_nfcorpus(None) == DEFAULT_NFCORPUS
    assert find_nfcorpus(DEFAULT_NFCORPUS) == DEFAULT_NFCORPUS
    monkeypatch.setenv(ENV_VAR, str(DEFAULT_NFCORPUS))
    assert find_nfcorpus(None) == DEFAULT_NFCORPUS


@real_data
def test_real_splits_and_graded_train() -> None:
    data = NFCorpus(DEFAULT_NFCORPUS)
    assert data.corpus_path.name == "corpus.jsonl.gz"
    assert data.qrels_path("train").name == "train.2-1-0.qrel"
    train = data.qrels("train")
    grades = [g for docs in train.values() for g in docs.values()]
    assert (grades.count(2), grades.count(1), len(grades)) == (4279, 106296, 110575)
    sizes = {split: len(data.queries(split)) for split in ("train", "dev", "test")}
    assert sizes == {"train": 2590, "dev": 324, "test": 323}
    assert set(data.queries("dev")).isdisjoint(data.queries("test"))
    assert data.queries("test").keys() == data.qrels("test").keys()
    assert len(data.all_queries()) == 3237


def test_train_falls_back_to_beir_qrels(tmp_path: Path) -> None:
    flat = NFCorpus(write_beir(tmp_path / "flat", graded_train=False))
    assert flat.qrels("train") == {"PLAIN-1": {"MED-1": 1, "MED-2": 1}}
    graded = NFCorpus(write_beir(tmp_path / "graded", graded_train=True))
    assert graded.qrels("train") == {"PLAIN-1": {"MED-1": 2, "MED-2": 1}}
    assert graded.queries("dev") == {"PLAIN-2": "plain-2"}
    assert graded.queries("test") == {"PLAIN-3": "plain-3"}  # PLAIN-9 has qrels but no text
    assert [d.doc_id for d in graded.documents()] == ["MED-1", "MED-2"]
    with pytest.raises(UnknownSplitError, match="'validation'"):
        graded.qrels("validation")


def test_explicit_path_and_environment(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_beir(nowhere / "mine", graded_train=False)
    assert find_nfcorpus(data) == data
    assert NFCorpus.locate(data).root == data
    monkeypatch.setenv(ENV_VAR, str(data))
    assert find_nfcorpus(None) == data
    # a configured path that does not hold the data is an error, not a silent fallback
    monkeypatch.setenv(ENV_VAR, str(nowhere))
    with pytest.raises(NFCorpusNotFoundError, match=f"from {ENV_VAR}.*lacks corpus.jsonl"):
        find_nfcorpus(None)
    (data / "qrels" / "dev.tsv").unlink()
    with pytest.raises(NFCorpusNotFoundError, match=r"lacks qrels/dev\.tsv"):
        find_nfcorpus(data)
    with pytest.raises(NFCorpusNotFoundError, match="does not exist"):
        find_nfcorpus(nowhere / "typo")


def test_nothing_found_says_how_to_get_the_data(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # import ir_datasets -> ImportError
    with pytest.raises(NFCorpusNotFoundError) as caught:
        find_nfcorpus(None)
    message = str(caught.value)
    assert "ir_datasets package is not installed" in message
    assert "pip install ir-datasets" in message and BEIR_URL in message and "--data" in message
    assert ENV_VAR in message


def fake_ir_datasets(fail: str | None = None) -> types.ModuleType:
    """An ``ir_datasets`` stand-in serving a two-document NFCorpus."""
    docs = [
        SimpleNamespace(doc_id="MED-1", title="Vitamin D", text="Bone loss.", url="u"),
        SimpleNamespace(doc_id="MED-2", title="Statins", text="Breast cancer.", url="u"),
    ]
    queries = [SimpleNamespace(query_id=q, text=f"query {q}", url="u") for q in ("PLAIN-1", "PLAIN-2", "PLAIN-3")]

    def qrel(q: str, d: str, r: int) -> SimpleNamespace:
        return SimpleNamespace(query_id=q, doc_id=d, relevance=r, iteration="0")

    datasets = {
        "beir/nfcorpus": SimpleNamespace(docs_iter=lambda: iter(docs), queries_iter=lambda: iter(queries)),
        "beir/nfcorpus/train": SimpleNamespace(
            qrels_iter=lambda: iter([qrel("PLAIN-1", "MED-1", 1), qrel("PLAIN-1", "MED-2", 1)])
        ),
        "beir/nfcorpus/dev": SimpleNamespace(qrels_iter=lambda: iter([qrel("PLAIN-2", "MED-1", 2)])),
        "beir/nfcorpus/test": SimpleNamespace(qrels_iter=lambda: iter([qrel("PLAIN-3", "MED-2", 1)])),
        # the original release: grade 0 is "marginally relevant", MED-9 is not in the BEIR corpus
        "nfcorpus/train": SimpleNamespace(
            qrels_iter=lambda: iter(
                [
                    qrel("PLAIN-1", "MED-1", 2),
                    qrel("PLAIN-1", "MED-2", 1),
                    qrel("PLAIN-1", "MED-9", 2),
                    qrel("PLAIN-2", "MED-2", 0),
                ]
            )
        ),
    }

    def load(name: str):
        if name == fail:
            raise ConnectionError("no network")
        return datasets[name]

    module = types.ModuleType("ir_datasets")
    module.load = load
    return module


def test_ir_datasets_export(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", fake_ir_datasets())
    root = find_nfcorpus(None)
    assert root == nowhere / "home" / "datasets" / "nfcorpus"
    data = NFCorpus(root)
    assert [d.title for d in data.documents()] == ["Vitamin D", "Statins"]
    assert data.qrels("train") == {"PLAIN-1": {"MED-1": 2, "MED-2": 1}}  # graded, BEIR pairs only
    assert data.qrels("dev") == {"PLAIN-2": {"MED-1": 2}}
    assert data.queries("test") == {"PLAIN-3": "query PLAIN-3"}
    # the export is found again without ir_datasets
    monkeypatch.setitem(sys.modules, "ir_datasets", None)
    assert find_nfcorpus(None) == root
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".nfcorpus-")]


def test_ir_datasets_without_graded_train(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", fake_ir_datasets(fail="nfcorpus/train"))
    data = NFCorpus(find_nfcorpus(None))
    assert data.qrels_path("train").name == "train.tsv"
    assert data.qrels("train") == {"PLAIN-1": {"MED-1": 1, "MED-2": 1}}


def test_ir_datasets_failure_says_how_to_get_the_data(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", fake_ir_datasets(fail="beir/nfcorpus"))
    with pytest.raises(NFCorpusNotFoundError, match="ConnectionError: no network") as caught:
        find_nfcorpus(None)
    assert BEIR_URL in str(caught.value)
    home = nowhere / "home" / "datasets"
    assert not (home / "nfcorpus").exists() and list(home.iterdir()) == []  # nothing half-written
