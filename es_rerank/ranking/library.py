"""The library's entry point: ``es_rerank.open_search``, the served pipeline for a Python program.

The same assembly as ``esrr search`` (``assemble``), from the ``ESRR_*`` settings and a home
folder, with domain errors (``es_rerank.errors.SetupError``) instead of a command line's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from es_rerank.errors import SetupError
from es_rerank.ranking.assemble import PipelineOptions, assemble

if TYPE_CHECKING:
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.settings import BrokerSettings

DEFAULT_WINDOW = 500  # as `esrr search --window`


def open_search(
    home: str | os.PathLike[str] | None = None, options: PipelineOptions | None = None, **settings: Any
) -> SearchPipeline:
    """The served pipeline over the index in ``home`` (``ESRR_HOME`` when None): BM25's top ``options.window`` hits
    (500 by default) reordered by each stage set up there, as ``esrr search`` ranks them.

    Other settings come from the ``ESRR_*`` environment, ``settings`` (field names, as ``backend="embedded"``)
    overriding them. Rank with ``es_rerank.ranking.answer.answer(pipeline, text_request(words))``; close
    ``pipeline.reranker`` when done with one. Raises ``SetupError`` (``OptionsError`` for contradicting
    options) naming the fix.
    """
    loaded = load_settings(home, settings)
    return assemble(loaded, options or PipelineOptions(DEFAULT_WINDOW))


def load_settings(home: str | os.PathLike[str] | None, overrides: dict[str, Any]) -> BrokerSettings:
    """``BrokerSettings`` from the environment, ``home`` and ``overrides``; ``SetupError`` naming a bad one."""
    from pydantic import ValidationError

    from es_rerank.settings import BrokerSettings, settings_problems

    given = {**overrides, **({"home": home} if home is not None else {})}
    try:
        return BrokerSettings(**given)
    except ValidationError as error:
        raise SetupError(settings_problems(error)) from None
