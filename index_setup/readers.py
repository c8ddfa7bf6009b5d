"""Corpus, query and relevance-judgment readers (BEIR JSONL, TREC qrels)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

from es_rerank.stats import Document


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def read_beir_corpus(path: Path) -> Iterator[Document]:
    """Stream documents from a BEIR ``corpus.jsonl[.gz]``."""
    with _open_text(path) as lines:
        for line in lines:
            if line.strip():
                record = json.loads(line)
                yield Document(str(record["_id"]), record.get("title", ""), record.get("text", ""))


def read_beir_queries(path: Path) -> dict[str, str]:
    """Query id -> text from a BEIR ``queries.jsonl``."""
    with _open_text(path) as lines:
        return {str(r["_id"]): r["text"] for r in map(json.loads, filter(str.strip, lines))}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Query id -> {doc id: grade} from a BEIR ``qrels/*.tsv`` or a TREC qrels file."""
    qrels: dict[str, dict[str, int]] = {}
    with _open_text(path) as lines:
        for line in lines:
            parts = line.split()
            if not parts or parts[0] == "query-id":
                continue
            if len(parts) == 4:  # TREC: qid iteration docid grade
                qid, _, doc_id, grade = parts
            else:
                qid, doc_id, grade = parts
            qrels.setdefault(qid, {})[doc_id] = int(grade)
    return qrels
