"""The benchmarks' query load: timed passes over the NFCorpus dev queries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings


def dev_query_options(command: Callable) -> Callable:
    """The benchmarks' ``--rounds``, ``--queries`` and ``--data``: timed passes over the NFCorpus dev queries."""
    for option in reversed(
        [
            click.option(
                "--rounds",
                default=3,
                show_default=True,
                type=click.IntRange(min=1),
                help="Timed passes over the dev queries.",
            ),
            click.option(
                "--queries",
                default=324,
                show_default=True,
                type=click.IntRange(min=1),
                help="Dev queries to use, the first ones by id.",
            ),
            click.option(
                "--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory."
            ),
        ]
    ):
        command = option(command)
    return command


def dev_query_texts(data: Path | None, settings: CommonSettings, n: int) -> list[str]:
    """The texts of the first ``n`` NFCorpus dev queries by id (the benchmarks' load), or a CLI error."""
    from index_setup.nfcorpus import NFCorpus

    try:
        texts = [text for _, text in sorted(NFCorpus.locate(data, settings).queries("dev").items())][:n]
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if not texts:
        raise click.ClickException(
            "no dev query has both judgments (qrels/dev.tsv) and text (queries.jsonl); "
            "check those two files of the NFCorpus folder"
        )
    return texts
