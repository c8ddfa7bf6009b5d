"""Admin commands: ``esrr index build|reindex|versions|use|prune|stats`` and ``esrr search``."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Callable

import click

from es_rerank.backends.base import MAX_K
from es_rerank.cli_options import sigterm_as_exit
from es_rerank.settings import CommonSettings, missing_from_home

BACKEND_OPTION = click.option(
    "--backend", type=click.Choice(["embedded", "elasticsearch"]), default=None,
    help="Search backend (default: ESRR_BACKEND, else embedded).")


def _settings(backend: str | None) -> CommonSettings:
    from es_rerank.cli_options import load_settings

    return load_settings(CommonSettings, backend=backend)


def _documents(data: Path | None, strict: bool):
    """The corpus to load, and the report that counts what was skipped."""
    from index_setup.nfcorpus import find_nfcorpus
    from index_setup.readers import LoadReport, read_corpus

    path = data if data is not None else find_nfcorpus(None)
    report = LoadReport()
    return path, report, read_corpus(path, strict=strict, report=report)


def _build(backend: str | None, data: Path | None, strict: bool, version: str | None,
           require_existing: bool) -> None:
    from es_rerank.backends.base import BackendError
    from es_rerank.versions import VersionNameError
    from index_setup.readers import CorpusFormatError, DamagedFileError

    settings = _settings(backend)
    report = None
    try:
        path, report, documents = _documents(data, strict)
        click.echo(f"loading {path} into the {settings.backend} backend")
        if settings.backend == "embedded":
            from index_setup.embedded_index import build_embedded_index, list_versions

            root = settings.indexes_dir / "embedded"
            if require_existing and not list_versions(root):
                raise click.ClickException(missing_from_home(f"no embedded index in {root.absolute()} to replace",
                                                             "run `esrr index build` first"))
            result = build_embedded_index(documents, root, version=version)
            click.echo(f"built embedded index {result.version}: {result.n_docs} documents, "
                       f"{result.n_terms} terms in {result.seconds:.1f} s at {result.directory}")
        else:
            from es_rerank.backends.elasticsearch import alias_targets, connect, translate_errors
            from index_setup.es_index import load_index

            client = connect(settings)
            if require_existing:
                with translate_errors(client):
                    served = alias_targets(client, settings.es_alias)
                if not served:
                    raise click.ClickException(f"no Elasticsearch index behind the alias {settings.es_alias!r} "
                                               "to replace; run `esrr index build` first")
            result = load_index(client, documents, settings, version=version)
            click.echo(f"loaded Elasticsearch index {result}")
    except DamagedFileError as error:  # what was read before the damage is no load to report
        raise click.ClickException(f"{error}; nothing was swapped in, the served index stays as it was") from None
    except CorpusFormatError as error:  # a malformed record stops only a --strict load
        loaded = f"\n{report.summary()}" if report is not None else ""
        raise click.ClickException(f"{error}; fix or remove the record, or load without --strict to skip bad "
                                   f"records (they are then counted and reported){loaded}") from None
    except (BackendError, FileNotFoundError, FileExistsError, ValueError) as error:
        about_the_corpus = (report is not None and isinstance(error, ValueError)
                            and not isinstance(error, VersionNameError))
        loaded = f"\n{report.summary()}" if about_the_corpus else ""
        raise click.ClickException(f"{error}{loaded}") from None
    click.echo(report.summary())


@click.group()
def index() -> None:
    """Load the corpus, build and replace indexes with their term statistics."""


def _version_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A valid ``--version`` name, refused before any corpus is read."""
    from es_rerank.versions import VersionNameError, check_version

    try:
        return None if value is None else check_version(value)
    except VersionNameError as error:
        raise click.BadParameter(str(error)) from None


def _load_options(command: Callable) -> Callable:
    """The options ``build`` and ``reindex`` share: backend, corpus, strictness, version name."""
    for option in reversed([
        BACKEND_OPTION,
        click.option("--data", type=click.Path(exists=True, path_type=Path), default=None,
                     help="Corpus: a BEIR directory, corpus.jsonl[.gz], PubMed XML (.xml[.gz]) or a "
                          "directory of PubMed baseline files (default: NFCorpus)."),
        click.option("--strict", is_flag=True, help="Fail on the first malformed record instead of skipping it."),
        click.option("--version", "version", default=None, callback=_version_name,
                     help="Version name (default: a UTC timestamp)."),
    ]):
        command = option(command)
    return command


@index.command()
@_load_options
def build(backend: str | None, data: Path | None, strict: bool, version: str | None) -> None:
    """Build a new index version with its statistics and serve it."""
    with sigterm_as_exit():
        _build(backend, data, strict, version, require_existing=False)


@index.command()
@_load_options
def reindex(backend: str | None, data: Path | None, strict: bool, version: str | None) -> None:
    """Replace the served index: build a new version, then swap to it only when complete."""
    with sigterm_as_exit():
        _build(backend, data, strict, version, require_existing=True)


@index.command()
@BACKEND_OPTION
def versions(backend: str | None) -> None:
    """List index versions, marking the one being served."""
    from es_rerank.backends.base import BackendError

    settings = _settings(backend)
    if settings.backend != "embedded":
        from es_rerank.backends.elasticsearch import connect
        from index_setup.es_index import current_version, list_indices, unfinished_loads

        try:
            client = connect(settings)
            current, indices = current_version(client, settings.es_alias), list_indices(client, settings.es_alias)
        except BackendError as error:
            raise click.ClickException(str(error)) from None
        unfinished = unfinished_loads(indices, settings)
        all_versions = [v.version for v in indices if v.version not in unfinished]
        _echo_unfinished(unfinished, "interrupted load")
    else:
        from es_rerank.backends.embedded import current_version
        from es_rerank.versions import CURRENT_FILE
        from index_setup.embedded_index import list_versions, unfinished_builds

        root = settings.indexes_dir / "embedded"
        all_versions = list_versions(root)
        try:
            current = current_version(root) if all_versions else None
        except BackendError as error:  # versions but no usable CURRENT: list them, none marked as served
            current = None
            if (root / CURRENT_FILE).exists():
                click.echo(f"warning: {error}", err=True)
        if current is not None and current not in all_versions:
            click.echo(f"warning: {root / CURRENT_FILE} names {current}, which is not a complete version here: "
                       "nothing is served; serve one with `esrr index use VERSION`", err=True)
        _echo_unfinished(unfinished_builds(root), "interrupted build")
    if not all_versions:
        click.echo("no index versions yet; build one with `esrr index build`", err=True)
    for version in all_versions:
        click.echo(f"{'*' if version == current else ' '} {version}")


def _echo_unfinished(unfinished: dict[str, bool], interrupted: str) -> None:
    """List versions whose build has not finished: abandoned (True) or still running."""
    for name, abandoned in unfinished.items():
        click.echo(f"  {name} ({f'{interrupted}; `esrr index prune` deletes it' if abandoned else 'being built'})")


@index.command()
@click.argument("version")
@BACKEND_OPTION
def use(version: str, backend: str | None) -> None:
    """Serve an existing index version (roll back or forward)."""
    from es_rerank.backends.base import BackendError

    settings = _settings(backend)
    try:
        if settings.backend == "embedded":
            from index_setup.embedded_index import switch_current

            switch_current(settings.indexes_dir / "embedded", version)
        else:
            from es_rerank.backends.elasticsearch import connect
            from index_setup.es_index import use_version

            use_version(connect(settings), settings, version)
    except (BackendError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"serving {version}")


@index.command()
@click.option("--keep", type=click.IntRange(min=0), default=None,
              help="Newest versions to keep (the served one always stays); default: ESRR_ES_KEEP_VERSIONS (2).")
@BACKEND_OPTION
def prune(keep: int | None, backend: str | None) -> None:
    """Delete old index versions and their statistics (and the folders of interrupted builds)."""
    from es_rerank.backends.base import BackendError

    settings = _settings(backend)
    keep = settings.es_keep_versions if keep is None else keep

    def report(version: str, interrupted: bool = False) -> None:
        click.echo(f"deleted {version}{' (an interrupted build)' if interrupted else ''}")

    try:
        if settings.backend == "embedded":
            from index_setup.embedded_index import prune_versions

            prune_versions(settings.indexes_dir / "embedded", keep, on_deleted=report)
        else:
            from es_rerank.backends.elasticsearch import connect
            from index_setup.es_index import delete_old_versions

            for version in delete_old_versions(connect(settings), settings.es_alias, keep, settings):
                report(version)
    except (BackendError, ValueError) as error:
        raise click.ClickException(str(error)) from None


@index.command(name="stats")
@BACKEND_OPTION
def show_stats(backend: str | None) -> None:
    """Print the served index's corpus statistics."""
    from es_rerank.backends import BackendError, open_backend

    try:
        stats = open_backend(_settings(backend)).stats
    except BackendError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"version {stats.version}: {stats.n_docs} documents, {len(stats.vocab)} terms")
    for field in ("title", "abstract", "text"):
        click.echo(f"  {field:<8} average length {stats.avg_length(field):7.1f} tokens")


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
                error.message = (f"{error.message.rstrip('.')}. A query that starts with a dash goes after "
                                 f'"--", options before it, as in: {example}')
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
        return {name: not getattr(param, "is_flag", False) and not getattr(param, "count", False)
                for param in self.params
                for name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))}

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
@click.option("--window", default=500, show_default=True, type=click.IntRange(0, MAX_K),
              help="BM25 hits the model reranks (0: BM25 order).")
@click.option("--rerank/--no-rerank", default=None,
              help="Rerank with the Delta model (default: when a trained checkpoint exists).")
@click.option("--feedback/--no-feedback", "use_feedback", default=None,
              help="Let each hit's most similar hits in the window vote with their scores (default: "
                   "when ESRR_FEEDBACK_WEIGHT is above 0).")
@click.option("--neighbours/--no-neighbours", "use_neighbours", default=None,
              help="Add the votes of similar training queries' judgments (default: when "
                   "`esrr neighbours build` has made the file).")
@click.option("--worker", "via_worker", is_flag=True,
              help="Have a running worker (`esrr worker start`) score through the broker instead of loading "
                   "the model here; past ESRR_SCORE_DEADLINE_S the hits keep BM25's order.")
@click.option("--json", "as_json", is_flag=True,
              help="Print an Elasticsearch-shaped _search response (JSON) instead of a table.")
@BACKEND_OPTION
def search(query: str, k: int, window: int, rerank: bool | None, use_feedback: bool | None,
           use_neighbours: bool | None, via_worker: bool, as_json: bool, backend: str | None) -> None:
    """Search the served index from the shell: BM25, then the Delta model over the top window."""
    from es_rerank.backends import BackendError
    from es_rerank.ranking.response import descending_scores, search_response
    from es_rerank.payload import PayloadError, WorkerSetupError
    from es_rerank.text import tokenize
    from es_rerank.cli_options import load_settings
    from es_rerank.ranking.assemble import served_pipeline
    from worker.local import LocalReranker
    from worker.settings import WorkerSettings

    if not tokenize(query):
        raise click.UsageError(f"the query {query!r} has no words to search for (only spaces or punctuation); "
                               "give it at least one word")
    settings = load_settings(WorkerSettings, backend=backend)
    pipeline = served_pipeline(settings, window, rerank, use_feedback, use_neighbours,
                               via_worker=via_worker, local_reranker=lambda: LocalReranker(settings))
    try:
        started = time.perf_counter()
        ranking = pipeline.rank(query, k)
        took_ms = round((time.perf_counter() - started) * 1000)
    except (BackendError, PayloadError, WorkerSetupError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        if pipeline.reranker is not None:
            pipeline.reranker.close()
    if ranking.fallback:
        click.echo(f"(not reranked: {ranking.fallback})", err=True)
    if as_json:
        click.echo(json.dumps(search_response(ranking.ranked, pipeline.backend.index, took_ms, ranking.retrieved,
                                              ranking.depth, ranking.ranker, ranking.fallback), indent=2))
        return
    if not ranking.ranked:
        click.echo("no hits")
        return
    for line in ranked_by(ranking.ranker, min(pipeline.window, ranking.retrieved), len(ranking.ranked)):
        click.echo(line)
    click.echo(TABLE_HEADER)
    # The same descending scores as the JSON: a BM25 tail below a short window sits under its lowest score.
    for rank, (item, score) in enumerate(zip(ranking.ranked, descending_scores(ranking.ranked)), 1):
        click.echo(f"{rank:>4}  {score:9.3f}  {item.hit.score:8.3f}  {item.hit.doc_id:<12}  {item.hit.title}")


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
    return [f"ranked by: BM25 top {window} → {ranker}{rest}",
            "ordered by score, the last ranker's; the BM25 column is each hit's first-stage score, for comparison"]
