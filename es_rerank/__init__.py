"""es-rerank: BM25 retrieval reranked by the Delta-32-Lex3 model.

The library's entry point is ``open_search`` (``es_rerank.ranking.library``): the served pipeline
over a home folder's index, its stages chosen by ``PipelineOptions`` and ``Switch``; ``SetupError``
(``OptionsError`` for contradicting options) says what stops it. They are imported on first use,
so that ``import es_rerank.text`` and ``esrr --help`` load no pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from es_rerank.errors import OptionsError, SetupError

if TYPE_CHECKING:
    from es_rerank.ranking.assemble import PipelineOptions, Switch
    from es_rerank.ranking.library import open_search

__all__ = ["OptionsError", "PipelineOptions", "SetupError", "Switch", "open_search"]


def __getattr__(name: str) -> Any:
    """``open_search``, ``PipelineOptions`` and ``Switch``, imported when first asked for."""
    if name == "open_search":
        from es_rerank.ranking.library import open_search

        return open_search
    if name in ("PipelineOptions", "Switch"):
        from es_rerank.ranking import assemble

        return getattr(assemble, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
