"""``esrr search``: the served ranking of one query from the shell, scored by the model in this process
(``worker.local``) or, with ``--worker``, by a running worker through the broker."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from es_rerank.backends.base import MAX_K, MAX_WINDOW
from es_rerank.cli_options import BACKEND_OPTION

if TYPE_CHECKING:
    from es_rerank.ranking.answer import Answer
    from es_rerank.ranking.assemble import PipelineOptions
    from es_rerank.ranking.pipeline import Ranking, SearchPipeline
    from es_rerank.settings import BrokerSettings


def stage_options(command: Callable) -> Callable:
    """The options that turn the served stages on or off: ``--window``, ``--rerank``, ``--feedback``,
    ``--neighbours`` and ``--worker`` (``esrr search`` and ``esrr batch-search``)."""
    for option in reversed(
        [
            click.option(
                "--window",
                default=500,
                show_default=True,
                type=click.IntRange(0, MAX_WINDOW),
                help="BM25 hits the model reranks (0: BM25 order).",
            ),
            click.option(
                "--rerank/--no-rerank",
                default=None,
                help="Rerank with the Delta model (default: when a trained checkpoint exists).",
            ),
            click.option(
                "--feedback/--no-feedback",
                "use_feedback",
                default=None,
                help="Let each hit's most similar hits in the window vote with their scores (default: "
                "when ESRR_FEEDBACK_WEIGHT is above 0).",
            ),
            click.option(
                "--neighbours/--no-neighbours",
                "use_neighbours",
                default=None,
                help="Add the votes of similar training queries' judgments (default: when the votes "
                "file exists and belongs to the served corpus).",
            ),
            click.option(
                "--worker",
                "via_worker",
                is_flag=True,
                help="Have a running worker (`esrr worker start`) score through the broker instead of "
                "loading the model here; past ESRR_SCORE_DEADLINE_S the hits keep BM25's order.",
            ),
        ]
    ):
        command = option(command)
    return command


class _SearchCommand(click.Command):
    """``esrr search``, whose option errors say how to search for a word that starts with a dash."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes its list
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            word = self._dashed_word(given)
            misspelt = isinstance(error, click.NoSuchOption) and error.possibilities
            # "-statin" is no option; "-kinase" reads as -k with the value "inase"
            if word is not None and "=" not in word and not misspelt:
                example = " ".join(["esrr search", *self._options_given(given), "--", f'"{word}"'])
                raise click.UsageError(
                    f"{error.message.rstrip('.')}. A query that starts with a dash goes after "
                    f'"--", options before it, as in: {example}',
                    error.ctx,
                ) from None
            raise

    def _dashed_word(self, args: list[str]) -> str | None:
        """The first argument that starts with a dash and is neither an option nor an option's value."""
        takes_value, rest = self._takes_value(), iter(args)
        for arg in rest:
            name = arg.split("=", 1)[0]
            if name in takes_value:
                if takes_value[name] and "=" not in arg:
                    next(rest, None)
            elif arg.startswith("-") and arg != "--":
                return arg
        return None

    def _takes_value(self) -> dict[str, bool]:
        """Every option name (``--feedback`` and ``--no-feedback`` alike) and whether a value follows it."""
        return {
            name: not getattr(param, "is_flag", False) and not getattr(param, "count", False)
            for param in self.params
            for name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))
        }

    def _options_given(self, args: list[str]) -> list[str]:
        """The options among ``args``, each with its value, quoted for a shell."""
        takes_value = self._takes_value()
        options, rest = [], iter(args)
        for arg in rest:
            name = arg.split("=", 1)[0]
            if name in takes_value:
                options.append(arg)
                if takes_value[name] and "=" not in arg:
                    options.append(next(rest, ""))
        return [shlex.quote(arg) for arg in options]


@click.command(cls=_SearchCommand)
@click.argument("query")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, MAX_K), help="Hits to show.")
@stage_options
@click.option(
    "--json", "as_json", is_flag=True, help="Print an Elasticsearch-shaped _search response (JSON) instead of a table."
)
@BACKEND_OPTION
def search(
    *,
    query: str,
    k: int,
    window: int,
    rerank: bool | None,
    use_feedback: bool | None,
    use_neighbours: bool | None,
    via_worker: bool,
    as_json: bool,
    backend: str | None,
) -> None:
    """Search the served index from the shell: BM25, then the Delta model over the top window."""
    from es_rerank.cli_options import load_settings
    from es_rerank.ranking.assemble import PipelineOptions, Switch
    from es_rerank.ranking.response import ResponseContent, search_response
    from es_rerank.text import tokenize
    from worker.local import LocalReranker
    from worker.settings import WorkerSettings

    if not tokenize(query):
        raise click.UsageError(
            f"the query {query!r} has no words to search for (only spaces or punctuation); give it at least one word"
        )
    settings = load_settings(WorkerSettings, backend=backend)
    options = PipelineOptions(
        window,
        Switch.of(rerank),
        Switch.of(use_feedback),
        Switch.of(use_neighbours),
        via_worker=via_worker,
        local_reranker=lambda: LocalReranker(settings),
    )
    pipeline = assembled(settings, options)
    answered, took_ms = _answer_once(pipeline, query, k)
    ranking, shown = answered.ranking, answered.shown
    if ranking.fallback:
        click.echo(f"(not reranked: {ranking.fallback})", err=True)
    if as_json:
        click.echo(
            json.dumps(
                search_response(
                    ResponseContent(
                        ranking.ranked,
                        pipeline.backend.index,
                        ranking.ranker,
                        ranking.retrieved,
                        ranking.depth,
                        took_ms=took_ms,
                        fallback=ranking.fallback,
                        shown=shown,
                    )
                ),
                indent=2,
            )
        )
        return
    _echo_table(ranking, shown, pipeline.window)


def assembled(settings: BrokerSettings, options: PipelineOptions) -> SearchPipeline:
    """The served pipeline for a command, with a note on stderr when it cannot rerank (no model trained); a
    ``SetupError`` is the command's error (es_rerank.cli)."""
    from es_rerank.ranking.assemble import assemble, model_note

    pipeline = assemble(settings, options)
    note = model_note(settings, options)
    if note is not None:
        click.echo(f"({note})", err=True)
    return pipeline


def _answer_once(pipeline: SearchPipeline, query: str, k: int) -> tuple[Answer, int]:
    """The request a client sends for these words, answered as _search answers it, and its milliseconds; the
    pipeline's reranker is closed after. Stored fields (the title, the metadata) are read for the hits shown only."""
    from es_rerank.backends import BackendError
    from es_rerank.backends.base import QueryRefused
    from es_rerank.payload import PayloadError, WorkerSetupError
    from es_rerank.ranking.answer import answer
    from es_rerank.ranking.request import text_request

    try:
        started = time.perf_counter()
        answered = answer(pipeline, text_request(query, k))
        return answered, round((time.perf_counter() - started) * 1000)
    except (BackendError, PayloadError, WorkerSetupError, QueryRefused) as error:
        raise click.ClickException(str(error)) from None
    finally:
        if pipeline.reranker is not None:
            pipeline.reranker.close()


def _echo_table(ranking: Ranking, shown: list[dict[str, Any]], window: int) -> None:
    """``esrr search``'s table: which ranker ordered the hits, then one line a hit."""
    if not ranking.ranked:
        click.echo("no hits")
        return
    for line in ranked_by(ranking.ranker, min(window, ranking.retrieved), len(ranking.ranked)):
        click.echo(line)
    click.echo(TABLE_HEADER)
    # The same scores as the JSON's _score: the window lifted above the BM25 tail (merge).
    for rank, (item, entry) in enumerate(zip(ranking.ranked, shown), 1):
        title = entry.get("_source", {}).get("title", item.hit.title)
        click.echo(f"{rank:>4}  {item.score:9.3f}  {item.hit.score:8.3f}  {item.hit.doc_id:<12}  {title}")


TABLE_HEADER = f"{'rank':>4}  {'score':>9}  {'BM25':>8}  {'id':<12}  title"


def ranked_by(ranker: str, window: int, shown: int) -> list[str]:
    """The lines above ``esrr search``'s table: which ranker ordered the hits, and what its two score columns are.

    ``ranker`` is the pipeline's name for the stages that scored (``Ranking.ranker``, e.g.
    "delta-32-lex3 + candidate feedback + judged neighbours"; "BM25" when none did),
    ``window`` how many of BM25's top hits they reordered, ``shown`` the rows below.
    """
    if ranker == "BM25":
        return ["ranked by: BM25 (no stage reordered the hits)", "ordered by score: BM25's"]
    rest = ", then the rest in BM25's order" if shown > window else ""
    return [
        f"ranked by: BM25 top {window} → {ranker}{rest}",
        "ordered by score, the last ranker's; the BM25 column is each hit's first-stage score, for comparison",
    ]
