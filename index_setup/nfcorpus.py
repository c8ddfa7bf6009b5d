"""Locate and load NFCorpus, the main retrieval test collection.

Everything downstream reads one format: a BEIR-layout directory

    corpus.jsonl[.gz]  queries.jsonl  qrels/{train,dev,test}.tsv
    original/qrels/train.2-1-0.qrel      (optional: graded train labels)

``find_nfcorpus`` looks, in order, at: the explicit path (``--data``); the
``ESRR_NFCORPUS`` environment variable; ``../shared/data/nfcorpus`` next to the
repository (``es_rerank.settings.DEFAULT_NFCORPUS``); a copy exported earlier
under ``$ESRR_HOME/datasets/nfcorpus``; and finally ``ir_datasets``
(``beir/nfcorpus``, downloaded on first use), which it exports into that copy.
An explicit path or ``ESRR_NFCORPUS`` that does not hold the data is an error,
never silently replaced by another copy.

BEIR flattened the train grades to 1; the original release keeps them (2 =
direct link, 1 = indirect). ``NFCorpus.qrels("train")`` therefore prefers
``original/qrels/train.2-1-0.qrel`` when present. dev/test labels are the same
in both releases.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from es_rerank.settings import DEFAULT_NFCORPUS, CommonSettings
from es_rerank.stats import Document
from index_setup.readers import BEIR_CORPUS_NAMES, LoadReport, beir_corpus_file, read_corpus, read_qrels, read_queries

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
ENV_VAR = "ESRR_NFCORPUS"
IR_DATASETS_ID = "beir/nfcorpus"
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/nfcorpus.zip"
GRADED_TRAIN_QRELS = Path("original") / "qrels" / "train.2-1-0.qrel"

HOW_TO_GET = (
    "Get NFCorpus in one of these ways:\n"
    "  1. pip install ir-datasets (with network access): it is then downloaded on first use;\n"
    f"  2. download the BEIR archive {BEIR_URL}, unzip it and pass its folder with "
    f"--data DIR (or set {ENV_VAR}=DIR);\n"
    "  3. put it at ../shared/data/nfcorpus next to the repository."
)


class NFCorpusNotFoundError(FileNotFoundError):
    """NFCorpus is not where it was looked for; the message says how to get it."""


class UnknownSplitError(ValueError):
    """A split other than train, dev or test was asked for."""


def missing_parts(directory: Path) -> list[str]:
    """The BEIR-layout files ``directory`` lacks (empty: it is a complete NFCorpus)."""
    if not directory.is_dir():
        return ["the directory itself"]
    missing = []
    if not any((directory / name).is_file() for name in BEIR_CORPUS_NAMES):
        missing.append("corpus.jsonl[.gz]")
    if not (directory / "queries.jsonl").is_file():
        missing.append("queries.jsonl")
    missing += [f"qrels/{s}.tsv" for s in SPLITS if not (directory / "qrels" / f"{s}.tsv").is_file()]
    return missing


def _checked(directory: Path, origin: str) -> Path:
    if directory.is_file():
        raise NFCorpusNotFoundError(
            f"{directory} ({origin}) is a file; NFCorpus is a BEIR directory holding "
            "corpus.jsonl[.gz], queries.jsonl and qrels/: name that directory.\n" + HOW_TO_GET
        )
    if not directory.is_dir():
        raise NFCorpusNotFoundError(f"{directory} ({origin}) does not exist.\n" + HOW_TO_GET)
    missing = missing_parts(directory)
    if missing:
        raise NFCorpusNotFoundError(
            f"{directory} ({origin}) is not an NFCorpus BEIR directory: it lacks {', '.join(missing)}.\n" + HOW_TO_GET
        )
    return directory


def export_dir(settings: CommonSettings | None = None) -> Path:
    """Where an ``ir_datasets`` download is exported: ``<home>/datasets/nfcorpus``."""
    settings = settings or CommonSettings()
    return Path(settings.home) / "datasets" / "nfcorpus"


def find_nfcorpus(explicit: Path | None = None, settings: CommonSettings | None = None) -> Path:
    """The directory of NFCorpus in BEIR layout (see the module docstring for the order)."""
    if explicit is not None:
        return _checked(Path(explicit).expanduser(), "given explicitly, e.g. with --data")
    settings = settings or CommonSettings()
    configured = settings.nfcorpus
    if configured:
        return _checked(Path(configured).expanduser(), f"from {ENV_VAR}")
    if not missing_parts(DEFAULT_NFCORPUS):
        return DEFAULT_NFCORPUS
    exported = export_dir(settings)
    if not missing_parts(exported):
        return exported
    try:
        import ir_datasets  # noqa: F401  (optional: pip install es-rerank[datasets])
    except ImportError:
        raise NFCorpusNotFoundError(
            f"NFCorpus was not found (looked at {DEFAULT_NFCORPUS} and {exported}; {ENV_VAR} is "
            "not set) and the ir_datasets package is not installed.\n" + HOW_TO_GET
        ) from None
    try:
        return export_from_ir_datasets(exported)
    except NFCorpusNotFoundError:
        raise
    except Exception as error:  # ir_datasets wraps network and format failures in many types
        raise NFCorpusNotFoundError(
            f"NFCorpus was not found locally and ir_datasets could not provide it "
            f"({type(error).__name__}: {error}).\n" + HOW_TO_GET
        ) from error


def _write_jsonl(path: Path, records: Iterator[dict]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def export_from_ir_datasets(target: Path) -> Path:
    """Download NFCorpus with ``ir_datasets`` and write it to ``target`` in BEIR layout.

    Written into a temporary sibling and renamed at the end, so ``target`` is either
    complete or absent. Graded train labels come from ``nfcorpus/train`` (the
    original release) when it can be had, restricted to the BEIR train pairs.
    """
    import ir_datasets

    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".nfcorpus-", dir=target.parent))
    try:
        logger.info("exporting %s from ir_datasets to %s", IR_DATASETS_ID, target)
        base = ir_datasets.load(IR_DATASETS_ID)
        n_docs = _write_jsonl(
            work / "corpus.jsonl", ({"_id": d.doc_id, "title": d.title, "text": d.text} for d in base.docs_iter())
        )
        _write_jsonl(work / "queries.jsonl", ({"_id": q.query_id, "text": q.text} for q in base.queries_iter()))
        (work / "qrels").mkdir()
        train_pairs: set[tuple[str, str]] = set()
        for split in SPLITS:
            with (work / "qrels" / f"{split}.tsv").open("w", encoding="utf-8") as out:
                out.write("query-id\tcorpus-id\tscore\n")
                for qrel in ir_datasets.load(f"{IR_DATASETS_ID}/{split}").qrels_iter():
                    out.write(f"{qrel.query_id}\t{qrel.doc_id}\t{qrel.relevance}\n")
                    if split == "train":
                        train_pairs.add((qrel.query_id, qrel.doc_id))
        _export_graded_train(ir_datasets, work, train_pairs)
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    logger.info("exported %d NFCorpus documents to %s", n_docs, target)
    return _checked(target, "exported from ir_datasets")


def _export_graded_train(ir_datasets, work: Path, train_pairs: set[tuple[str, str]]) -> None:
    """Best effort: ``original/qrels/train.2-1-0.qrel`` from ``nfcorpus/train``."""
    lines = []
    try:
        for qrel in ir_datasets.load("nfcorpus/train").qrels_iter():
            if qrel.relevance >= 1 and (qrel.query_id, qrel.doc_id) in train_pairs:
                lines.append(f"{qrel.query_id} 0 {qrel.doc_id} {qrel.relevance}\n")
    except Exception as error:  # optional extra: the flattened BEIR train labels remain
        logger.warning(
            "graded NFCorpus train labels unavailable (%s: %s); train qrels stay at grade 1",
            type(error).__name__,
            error,
        )
        return
    path = work / GRADED_TRAIN_QRELS
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines), encoding="utf-8")


@dataclass(frozen=True)
class NFCorpus:
    """NFCorpus in BEIR layout: documents, queries and qrels per split."""

    root: Path
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def locate(cls, explicit: Path | None = None, settings: CommonSettings | None = None) -> NFCorpus:
        """Find the data (see ``find_nfcorpus``) and wrap it."""
        return cls(find_nfcorpus(explicit, settings))

    @property
    def corpus_path(self) -> Path:
        """``corpus.jsonl`` or ``corpus.jsonl.gz`` inside ``root`` (not both)."""
        path = beir_corpus_file(self.root)
        if path is None:
            raise NFCorpusNotFoundError(f"{self.root} has no corpus.jsonl[.gz].\n" + HOW_TO_GET)
        return path

    def documents(self, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
        """Stream the corpus."""
        return read_corpus(self.corpus_path, strict=strict, report=report)

    def all_queries(self) -> dict[str, str]:
        """Every query id -> text (all splits)."""
        if "queries" not in self._cache:
            self._cache["queries"] = read_queries(self.root / "queries.jsonl")
        return self._cache["queries"]

    def qrels_path(self, split: str) -> Path:
        """The qrels file ``qrels(split)`` reads: graded original train labels when present."""
        _check_split(split)
        graded = self.root / GRADED_TRAIN_QRELS
        if split == "train" and graded.is_file():
            return graded
        return self.root / "qrels" / f"{split}.tsv"

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        """Query id -> {doc id: grade} of a split (cached; do not modify)."""
        key = ("qrels", split)
        if key not in self._cache:
            self._cache[key] = read_qrels(self.qrels_path(split))
        return self._cache[key]

    def queries(self, split: str) -> dict[str, str]:
        """Query id -> text for the queries that have qrels in ``split``."""
        judged = self.qrels(split)
        every = self.all_queries()
        missing = [q for q in judged if q not in every]
        if missing:
            logger.warning(
                "%d %s query ids have qrels but no text in %s (e.g. %s); left out",
                len(missing),
                split,
                self.root / "queries.jsonl",
                missing[0],
            )
        return {q: every[q] for q in judged if q in every}


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise UnknownSplitError(f"unknown NFCorpus split {split!r}; choose from {list(SPLITS)}")
