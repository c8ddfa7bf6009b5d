"""Shared fixtures: a tiny corpus (hand-checkable statistics and Lex numbers) and free ports."""

from __future__ import annotations

import socket
from typing import Callable

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


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A function returning a loopback TCP port that is free right now (for servers the tests start)."""
    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    return pick
