"""`esrr search` reranks the BM25 window in-process with the served checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.cli import main
from es_rerank.lex import LEX3, lex_features
from es_rerank.text import embedding_tokens, tokenize
from index_setup.embedded_index import build_embedded_index
from worker.local import rerank_scores
from worker.model import Checkpoint
from worker.settings import WorkerSettings


def _home_with_index(artifacts, corpus_documents, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    build_embedded_index(corpus_documents[:30], home / "indexes" / "embedded", version="local", progress=False)
    return home


def test_rerank_scores_equal_the_reference_model(artifacts, corpus_documents, tmp_path):
    home = _home_with_index(artifacts, corpus_documents, tmp_path)
    backend = EmbeddedBackend.open_current(home / "indexes" / "embedded")
    query = "cancer risk and diet"
    hits = backend.search(query, 20)
    assert len(hits) >= 5
    scores, model_name = rerank_scores(query, hits, backend.stats, WorkerSettings(home=home))
    assert model_name == "delta-32-lex3"

    model = Checkpoint.load(artifacts.checkpoint_path).build_model(artifacts.vectors)
    query_rows = np.zeros((len(hits), 7), dtype=np.int64)
    tokens = embedding_tokens(tokenize(query))[:7]
    query_rows[:, :len(tokens)] = artifacts.embedding_rows(tokens)
    doc_rows = np.zeros((len(hits), 50), dtype=np.int64)
    for i, hit in enumerate(hits):
        words = [backend.stats.vocab.terms[t] for t in hit.terms.first_ids]
        doc_rows[i, :len(words)] = artifacts.embedding_rows(words)
    lex = lex_features(backend.stats.vocab.lookup(tokenize(query)), [h.terms for h in hits], backend.stats, LEX3)
    with torch.inference_mode():
        expected = model(torch.from_numpy(doc_rows), torch.from_numpy(query_rows), torch.from_numpy(lex)).numpy()
    assert np.abs(scores - expected).max() < 1e-4


def test_search_command_prints_the_reranked_window(artifacts, corpus_documents, tmp_path):
    home = _home_with_index(artifacts, corpus_documents, tmp_path)
    result = CliRunner().invoke(main, ["search", "cancer risk and diet", "-k", "5"], env={"ESRR_HOME": str(home)})
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["rank", "delta-32-lex3", "score"]
    model_scores = [float(row.split()[1]) for row in rows]
    assert len(rows) == 5 and model_scores == sorted(model_scores, reverse=True)

    bm25_only = CliRunner().invoke(main, ["search", "cancer risk and diet", "-k", "5", "--no-rerank"],
                                   env={"ESRR_HOME": str(home)})
    assert bm25_only.stdout.splitlines()[0].split()[:3] == ["rank", "BM25", "score"]
