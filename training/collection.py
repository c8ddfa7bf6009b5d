"""A judged collection for ``esrr eval --data``: any corpus with queries and relevance judgments.

Accepted layouts: a BEIR folder (``corpus.jsonl[.gz]``, ``queries.jsonl``, ``qrels/<split>.tsv``;
a test split is enough), or a corpus (a BEIR folder or file, PubMed XML) with the queries
(``queries.jsonl``, or ``ID<TAB>TEXT`` lines) and the judgments (BEIR TSV or TREC qrels) named
apart. The collection's corpus gets an embedded index of its own, built on first use under
``$ESRR_HOME/indexes/eval-<name>-<digest>/`` (the digest names the corpus files' path, size and
modification time, so a changed corpus gets a new index) and reused after; the served index is
never touched.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from es_rerank.backends.base import BackendError
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.ranking.neighbours import relevant_judgments
from es_rerank.settings import CommonSettings
from index_setup.readers import beir_corpus_file, pubmed_files, read_corpus, read_qrels, read_queries

QUERY_FILES = ("queries.jsonl", "queries.jsonl.gz", "queries.tsv")
EVAL_INDEX_PREFIX = "eval-"


class CollectionError(ValueError):
    """A judged collection cannot be read or evaluated; the message names the file and the fix."""


@dataclass(frozen=True)
class JudgedCollection:
    """A corpus, the judged queries of one split with their text, and their graded judgments."""

    name: str
    corpus: Path  # what read_corpus reads: a BEIR folder, a corpus file, a PubMed folder or file
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    qrels_path: Path

    @classmethod
    def locate(
        cls, data: Path, split: str = "test", queries: Path | None = None, qrels: Path | None = None
    ) -> JudgedCollection:
        """The collection at ``data``, its queries and ``split``'s judgments (or the files named)."""
        data = Path(data).expanduser()
        queries_path = queries or _queries_file(data)
        qrels_path = qrels or _qrels_file(data, split)
        every_query = read_queries(queries_path)
        every_judgment = read_qrels(qrels_path)
        judged = {q: every_judgment[q] for q in relevant_judgments(every_judgment)}
        if not judged:  # every metric would be 0 and say nothing
            raise CollectionError(
                f"no query in {qrels_path} judges a document relevant (grade > 0); name the "
                "judgments of this collection, with grades above 0 for relevant documents"
            )
        texts = {q: every_query[q] for q in sorted(judged) if q in every_query}
        if not texts:
            raise CollectionError(
                f"none of the {len(judged)} queries judged in {qrels_path} has a text in "
                f"{queries_path}; check that the two files use the same query ids"
            )
        name = (data if data.is_dir() else data.parent).name or "collection"
        return cls(name, data, texts, {q: judged[q] for q in texts}, qrels_path)

    def corpus_files(self) -> list[Path]:
        """The files the corpus is read from (their size and age name its index)."""
        if self.corpus.is_file():
            return [self.corpus]
        beir = beir_corpus_file(self.corpus)
        return [beir] if beir is not None else pubmed_files(self.corpus)

    def index_name(self) -> str:
        """``eval-<name>-<digest>``: a valid version name that changes when a corpus file changes."""
        digest = hashlib.sha256()
        for path in self.corpus_files():
            info = path.stat()
            digest.update(f"{path.resolve()}\t{info.st_size}\t{info.st_mtime_ns}\n".encode())
        slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")[:40] or "collection"
        return f"{EVAL_INDEX_PREFIX}{slug}-{digest.hexdigest()[:12]}"

    def backend(self, settings: CommonSettings, progress: bool = True) -> tuple[EmbeddedBackend, bool]:
        """The collection's own embedded index (built now if missing), and whether it was built now.

        It lives at ``<home>/indexes/<index_name>/<index_name>``: a worker finds statistics by
        version under ``<home>/indexes/*/``, so a scoring process reads them as it reads the served ones.
        """
        from index_setup.embedded_index import build_embedded_index, unfinished_builds

        name = self.index_name()
        root = settings.indexes_dir / name
        try:
            return EmbeddedBackend.open_current(root), False
        except BackendError:
            pass  # not built yet, or a build that did not finish: build it (again)
        if unfinished_builds(root).get(name):  # abandoned: its builder died (a build under way holds its lock)
            shutil.rmtree(root / name)
        build_embedded_index(read_corpus(self.corpus), root, version=name, progress=progress)
        return EmbeddedBackend.open_current(root), True


def _queries_file(data: Path) -> Path:
    if data.is_dir():
        for name in QUERY_FILES:
            if (data / name).is_file():
                return data / name
    raise CollectionError(
        f"no queries file in {data if data.is_dir() else data.parent} (looked for "
        f"{', '.join(QUERY_FILES)} in {data}); pass the queries with --queries FILE "
        "(BEIR queries.jsonl, or ID<TAB>TEXT lines)"
    )


def _qrels_file(data: Path, split: str) -> Path:
    folder = data / "qrels"
    if data.is_dir() and (folder / f"{split}.tsv").is_file():
        return folder / f"{split}.tsv"
    found = sorted(p.stem for p in folder.glob("*.tsv")) if folder.is_dir() else []
    other = f"; {folder} holds {', '.join(found)}: pass --split {found[0]}" if found else ""
    raise CollectionError(
        f"no judgments for the {split} split at {folder / f'{split}.tsv'}{other}, or name a "
        "judgments file with --qrels FILE (BEIR TSV or TREC qrels)"
    )
