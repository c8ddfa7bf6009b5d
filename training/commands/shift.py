"""``esrr shift``: shifted copies of NFCorpus (long queries, blank titles, held-out topics, pseudo-queries)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click

from es_rerank.cli_options import writable_dir
from training.commands.workspace import as_cli_error

if TYPE_CHECKING:
    from es_rerank.stats import Document
    from index_setup.nfcorpus import NFCorpus
    from training.shift import Condition


class JudgedNFCorpus(NamedTuple):
    """NFCorpus's documents, every query and each split's judgments, read once for all the conditions."""

    documents: list[Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]


def pseudo_query_condition(name: str, text_data: Path, seed: int) -> Condition:
    """A pseudo-query condition from another biomedical text under ``text_data``: titles as queries."""
    from es_rerank.stats import Document
    from index_setup.text_sources import SOURCES
    from training.shift import PSEUDO_CONDITIONS, pseudo_queries

    source = next(s for s in SOURCES if s.name == PSEUDO_CONDITIONS[name])
    files = source.files(text_data)
    if not files:
        raise click.ClickException(f"no {source.name} text ({source.pattern}) under {text_data}; pass --text-data DIR")
    texts = [t for path in files for t in source.reader(path)]
    return pseudo_queries(name, [Document(t.doc_id, t.parts[0], " ".join(t.parts[1:])) for t in texts], seed=seed)


def nfcorpus_condition(name: str, nfcorpus: NFCorpus, judged: JudgedNFCorpus, seed: int) -> Condition:
    """One of the NFCorpus conditions: vid-desc, no-titles or topic-disjoint."""
    from index_setup.readers import read_queries
    from training.shift import SPLITS, no_titles, topic_disjoint, vid_desc

    documents, queries, qrels = judged
    if name == "vid-desc":
        originals = nfcorpus.root / "original" / "queries"
        return vid_desc(documents, {s: read_queries(originals / f"{s}.vid-desc.queries") for s in SPLITS}, qrels)
    if name == "no-titles":
        return no_titles(documents, queries, qrels)
    return topic_disjoint(documents, queries, qrels, seed)


@click.command(name="shift")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder that receives one BEIR folder per condition.",
)
@click.option(
    "--condition",
    "conditions",
    multiple=True,
    type=click.Choice(["vid-desc", "no-titles", "topic-disjoint", "ohsumed-pseudo", "bc5cdr-pseudo"]),
    help="Conditions to write (default: the three NFCorpus ones).",
)
@click.option(
    "--text-data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The folder of the other biomedical text (the pseudo-query conditions; default: the one "
    "beside NFCorpus, ../shared/data).",
)
@click.option("--seed", default=13, show_default=True, type=click.IntRange(0), help="Seed of the splits and draws.")
def shift(data: Path | None, out: Path, conditions: tuple[str, ...], text_data: Path | None, seed: int) -> None:
    """Write shifted copies of NFCorpus (long queries, blank titles, held-out topics) for `esrr eval --data`."""
    from index_setup.nfcorpus import NFCorpus
    from index_setup.text_sources import TextSourceError
    from training.shift import CONDITIONS, PSEUDO_CONDITIONS, SPLITS, write_condition

    writable_dir(out, "pass a folder you can write to as --out")
    with as_cli_error(FileNotFoundError, ValueError, TextSourceError):
        nfcorpus = NFCorpus.locate(data)
        judged = JudgedNFCorpus(  # read in this order before: documents, judgments, queries
            documents=list(nfcorpus.documents()),
            qrels={split: nfcorpus.qrels(split) for split in SPLITS},
            queries=nfcorpus.all_queries(),
        )
        for name in conditions or CONDITIONS:
            if name in PSEUDO_CONDITIONS:
                condition = pseudo_query_condition(name, text_data or nfcorpus.root.parent, seed)
            else:
                condition = nfcorpus_condition(name, nfcorpus, judged, seed)
            target = write_condition(condition, out)
            counts = ", ".join(f"{len(condition.qrels[s])} {s}" for s in SPLITS)
            click.echo(f"{name}: {len(condition.documents)} documents, {counts} queries -> {target}")
