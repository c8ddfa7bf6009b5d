"""What the training commands share: the data, index and embeddings they read, and their checks of them."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import load_settings
from es_rerank.settings import CommonSettings

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from es_rerank.backends import SearchBackend
    from es_rerank.embeddings import Embeddings
    from es_rerank.stats import CorpusStats
    from index_setup.nfcorpus import NFCorpus
    from training.data import DocumentRows, QueryCandidates
    from training.train import TrainResult


@dataclass
class Workspace:
    """Everything the train and eval commands share: data, index, embeddings."""

    settings: CommonSettings
    nfcorpus_or_none: NFCorpus | None  # None: another judged collection (esrr eval --data)
    backend: SearchBackend
    embeddings: Embeddings
    doc_rows: DocumentRows

    @property
    def nfcorpus(self) -> NFCorpus:
        """The NFCorpus read, or a usage error when this run reads another collection (``esrr eval --data``)."""
        if self.nfcorpus_or_none is None:
            raise click.UsageError(
                "this step reads NFCorpus's splits (queries.jsonl, qrels/SPLIT.tsv), and this run reads another "
                "collection (--data with --queries/--qrels); drop --data to use NFCorpus"
            )
        return self.nfcorpus_or_none

    def split_candidates(
        self, split: str, lex_names: Sequence[str] | None = None, progress: bool = True
    ) -> list[QueryCandidates]:
        """BM25 top-500 candidates of every query of an NFCorpus split, graded, with Lex features (Lex3 by default)."""
        from es_rerank.lex import LEX3
        from training.data import build_candidates

        return build_candidates(
            self.nfcorpus.queries(split),
            self.nfcorpus.qrels(split),
            self.backend,
            self.embeddings,
            LEX3 if lex_names is None else lex_names,
            progress=progress,
        )


def open_workspace(data: Path | None, settings: CommonSettings | None = None) -> Workspace:
    """Locate NFCorpus, the served embedded index and the current embeddings (settings from ESRR_* if not given)."""
    from es_rerank.backends import BackendError, open_backend
    from es_rerank.embeddings import EmbeddingsError, load_current
    from index_setup.nfcorpus import NFCorpus
    from training.data import DocumentRows

    settings = settings or load_settings()
    try:
        nfcorpus = NFCorpus.locate(data, settings)
        backend = open_backend(settings)
        embeddings = load_current(settings)
    except (BackendError, EmbeddingsError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    return Workspace(settings, nfcorpus, backend, embeddings, DocumentRows(backend.stats, embeddings))


@contextmanager
def as_cli_error(*errors: type[Exception]) -> Iterator[None]:
    """Report the given errors as a clean CLI error (their messages name the cause) instead of a traceback."""
    try:
        yield
    except errors as error:
        raise click.ClickException(str(error)) from None


def command_line() -> str:
    """The ``esrr`` command line being run, as the records and reports quote it."""
    return "esrr " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def result_metrics(result: TrainResult) -> dict[str, float]:
    """The figures a checkpoint carries about its training run."""
    return {"dev_ndcg20": result.best_dev, "best_epoch": result.best_epoch, "train_seconds": result.seconds}


def split_queries(work: Workspace, split: str, n: int | None = None) -> dict[str, str]:
    """The split's judged queries with text, the first ``n`` by id if given; a CLI error if there are none."""
    queries = work.nfcorpus.queries(split)
    if not queries:
        raise click.ClickException(
            f"no {split} query has both judgments (qrels/{split}.tsv) and text "
            f"(queries.jsonl) in {work.nfcorpus.root}; check those two files"
        )
    check_judged_are_indexed(
        work.backend.stats, work.nfcorpus.qrels(split), work.nfcorpus.qrels_path(split), work.nfcorpus.root
    )
    return {q: queries[q] for q in sorted(queries)[:n]} if n else queries


def check_judged_are_indexed(
    stats: CorpusStats, qrels: Mapping[str, Mapping[str, int]], qrels_path: Path, corpus: Path
) -> None:
    """A CLI error when the index lacks half or more of the judged relevant documents, a warning for any.

    Scores against an index of another corpus would be near 0 and look like a result.
    """
    from es_rerank.ranking.neighbours import relevant_judgments

    judged = {d for docs in relevant_judgments(qrels).values() for d in docs}
    missing = sorted(d for d in judged if d not in stats)
    if not missing:
        return
    text = (
        f"{len(missing)} of the {len(judged)} documents judged relevant in {qrels_path} "
        f"(e.g. {missing[0]}) are not in the index {stats.version!r} ({stats.n_docs} documents)"
    )
    if 2 * len(missing) >= len(judged):
        raise click.ClickException(
            f"{text}: it holds another corpus. Build the index from this data first: "
            f"`esrr index build --data {corpus}`, or check that the judgments are of "
            f"{corpus}"
        )
    click.echo(f"warning: {text}; they count as not retrieved", err=True)


def with_relevant(candidates: list[QueryCandidates], work: Workspace, split: str) -> list[QueryCandidates]:
    """The candidates, or a CLI error when none is relevant: every metric would be 0 and say nothing."""
    if not any((c.grades > 0).any() for c in candidates):
        nfcorpus = work.nfcorpus_or_none
        judgments = f"{nfcorpus.root}/qrels/{split}.tsv" if nfcorpus is not None else "the judgments"
        raise click.ClickException(
            f"no {split} query has a relevant (grade > 0) document among its BM25 candidates; check that "
            f"{judgments} judge documents of the indexed corpus (`esrr index build`)"
        )
    return candidates


def check_embeddings(path: Path, trained_on: str, current: str) -> None:
    """A CLI error when the checkpoint at ``path`` was trained on other embeddings than the current ones."""
    if trained_on != current:
        raise click.ClickException(
            f"{path} was trained on embeddings {trained_on}, the current ones are {current}; retrain it"
        )
