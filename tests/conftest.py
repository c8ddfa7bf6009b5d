"""Shared tiny-corpus fixtures (hand-checkable numbers for statistics and Lex tests)."""

from __future__ import annotations

import pytest

from es_rerank.stats import CorpusStats, Document, build_stats

# Lexical tokens: a 3 title + 6 abstract, b 2 + 7, c 2 + 0 (no abstract).
TINY_DOCS = (
    Document("a", "Vitamin D deficiency", "Vitamin D deficiency causes bone loss."),
    Document("b", "Bone health", "Calcium and vitamin K support bone health."),
    Document("c", "Breast cancer", ""),
)


@pytest.fixture
def tiny_docs() -> list[Document]:
    """Three documents; see ``TINY_DOCS``."""
    return list(TINY_DOCS)


@pytest.fixture
def tiny_stats(tiny_docs: list[Document]) -> CorpusStats:
    """``build_stats`` over the tiny corpus, version ``"tiny"``."""
    return build_stats("tiny", tiny_docs)
