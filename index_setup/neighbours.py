"""``esrr neighbours``: build the judged-neighbours file from the NFCorpus train judgments.

Only the train split is read, so ``esrr eval`` on dev or test never sees its own
judgments through the votes. Serving (``esrr search``) and ``esrr eval`` pick the
file up from ``<ESRR_HOME>/models/judged-neighbours.json``. The file records the corpus
of the served index it was built against (``CorpusIdentity``); search and eval apply it
only to an index of that corpus.
"""

from __future__ import annotations

from pathlib import Path

import click

from es_rerank.cli_options import vote_options
from es_rerank.ranking.neighbours import JudgedNeighbours, NeighbourParams
from es_rerank.settings import CommonSettings
from es_rerank.stats import CorpusStats

DEFAULTS = NeighbourParams()


@click.group()
def neighbours() -> None:
    """Votes of similar training queries' judgments, fused with the ranker's scores."""


@neighbours.command()
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="NFCorpus in BEIR layout (default: ../shared/data/nfcorpus).",
)
@vote_options(DEFAULTS)
@click.option(
    "--keep-existing",
    is_flag=True,
    help="Do nothing when a votes file for the served index's corpus exists (scripts/run.sh).",
)
def build(data: Path | None, k: int, power: float, weight: float, confidence: float, keep_existing: bool) -> None:
    """Build the file from NFCorpus train queries and judgments (defaults chosen on dev), for the served index."""
    from es_rerank.cli_options import load_settings
    from es_rerank.ranking.neighbours import CorpusIdentity, NeighboursError
    from index_setup.nfcorpus import NFCorpus

    settings = load_settings()
    try:
        nfcorpus = NFCorpus.locate(data, settings)
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    path = settings.neighbours_path
    if keep_existing and path.is_file():
        try:
            problem = JudgedNeighbours.load(path).mismatch(_served_stats(settings))
        except NeighboursError as error:
            problem = str(error)
        if problem is None:
            click.echo(f"kept {path} (built earlier for this corpus; drop --keep-existing to rebuild)")
            return
        click.echo(f"rebuilding {path}: {problem}")
    built = JudgedNeighbours(
        nfcorpus.queries("train"),
        nfcorpus.qrels("train"),
        NeighbourParams(k=k, power=power, weight=weight, confidence=confidence),
    )
    if len(built.query_ids) < 2:  # with one query every term's IDF is 0: nothing would ever vote
        raise click.ClickException(
            f"{len(built.query_ids)} train queries in {nfcorpus.root} have both a text "
            "and a relevant judgment; votes need at least 2 (check qrels/train.tsv, the "
            "graded train qrels and queries.jsonl)"
        )
    if not any(idf > 0 for idf in built.idf.values()):  # no word in some queries but not all: no query is like another
        raise click.ClickException(
            f"no word of the {len(built.query_ids)} judged train queries in {nfcorpus.root} "
            "tells them apart (they are identical or have no words), so nothing would "
            "ever vote; check queries.jsonl"
        )
    stats = _served_stats(settings)
    judged = built.judged_documents()
    missing = sorted(d for d in judged if d not in stats)
    if 2 * len(missing) >= len(judged):  # votes for documents the index does not hold would never count
        raise click.ClickException(
            f"{len(missing)} of the {len(judged)} documents judged relevant in "
            f"{nfcorpus.qrels_path('train')} (e.g. {missing[0]}) are not in the served index "
            f"{stats.version} ({stats.n_docs} documents): it holds another corpus. Build the "
            f"index of these judgments first: `esrr index build --data {nfcorpus.root}`"
        )
    built.corpus = CorpusIdentity.of(stats)
    path.parent.mkdir(parents=True, exist_ok=True)
    built.save(path)
    judgments = sum(len(docs) for docs in built.judged.values())
    click.echo(
        f"{len(built.query_ids)} train queries, {judgments} relevant judgments, k={k} power={power} "
        f"weight={weight} confidence={confidence}, for index {stats.version} ({stats.n_docs} documents) "
        f"-> {path}"
    )


def _served_stats(settings: CommonSettings) -> CorpusStats:
    """The served index's statistics, whose corpus the votes are built for; a CLI error names the fix."""
    from es_rerank.backends import BackendError, open_backend

    try:
        return open_backend(settings).stats
    except BackendError as error:
        raise click.ClickException(f"{error} (the votes are built for the served index's corpus)") from None
