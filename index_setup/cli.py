"""Admin commands: ``esrr index build|reindex|versions|use|prune|stats``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from es_rerank.cli_options import BACKEND_OPTION, sigterm_as_exit
from es_rerank.settings import CommonSettings, missing_from_home


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


def _build(backend: str | None, data: Path | None, strict: bool, version: str | None, require_existing: bool) -> None:
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
                raise click.ClickException(
                    missing_from_home(
                        f"no embedded index in {root.absolute()} to replace", "run `esrr index build` first"
                    )
                )
            result = build_embedded_index(documents, root, version=version)
            click.echo(
                f"built embedded index {result.version}: {result.n_docs} documents, "
                f"{result.n_terms} terms in {result.seconds:.1f} s at {result.directory}"
            )
        else:
            from es_rerank.backends.es_client import connect, translate_errors
            from es_rerank.backends.es_layout import alias_targets
            from index_setup.es_index import load_index

            client = connect(settings)
            if require_existing:
                with translate_errors(client):
                    served = alias_targets(client, settings.es_alias)
                if not served:
                    raise click.ClickException(
                        f"no Elasticsearch index behind the alias {settings.es_alias!r} "
                        "to replace; run `esrr index build` first"
                    )
            load_result = load_index(client, documents, settings, version=version)
            click.echo(f"loaded Elasticsearch index {load_result}")
    except DamagedFileError as error:  # what was read before the damage is no load to report
        raise click.ClickException(f"{error}; nothing was swapped in, the served index stays as it was") from None
    except CorpusFormatError as error:  # a malformed record stops only a --strict load
        loaded = f"\n{report.summary()}" if report is not None else ""
        raise click.ClickException(
            f"{error}; fix or remove the record, or load without --strict to skip bad "
            f"records (they are then counted and reported){loaded}"
        ) from None
    except (BackendError, FileNotFoundError, FileExistsError, ValueError) as error:
        about_the_corpus = (
            report is not None and isinstance(error, ValueError) and not isinstance(error, VersionNameError)
        )
        loaded = f"\n{report.summary()}" if report is not None and about_the_corpus else ""
        raise click.ClickException(f"{error}{loaded}") from None
    if report is not None:  # set by _documents, which raised otherwise
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
    for option in reversed(
        [
            BACKEND_OPTION,
            click.option(
                "--data",
                type=click.Path(exists=True, path_type=Path),
                default=None,
                help="Corpus: a BEIR directory, corpus.jsonl[.gz], PubMed XML (.xml[.gz]) or a "
                "directory of PubMed baseline files (default: NFCorpus).",
            ),
            click.option("--strict", is_flag=True, help="Fail on the first malformed record instead of skipping it."),
            click.option(
                "--version",
                "version",
                default=None,
                callback=_version_name,
                help="Version name (default: a UTC timestamp).",
            ),
        ]
    ):
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
        from es_rerank.backends.es_client import connect
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
        from es_rerank.backends.embedded_version import current_version as embedded_current
        from es_rerank.versions import CURRENT_FILE
        from index_setup.embedded_index import list_versions, unfinished_builds

        root = settings.indexes_dir / "embedded"
        all_versions = list_versions(root)
        try:
            current = embedded_current(root) if all_versions else None
        except BackendError as error:  # versions but no usable CURRENT: list them, none marked as served
            current = None
            if (root / CURRENT_FILE).exists():
                click.echo(f"warning: {error}", err=True)
        if current is not None and current not in all_versions:
            click.echo(
                f"warning: {root / CURRENT_FILE} names {current}, which is not a complete version here: "
                "nothing is served; serve one with `esrr index use VERSION`",
                err=True,
            )
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
            from es_rerank.backends.es_client import connect
            from index_setup.es_index import use_version

            use_version(connect(settings), settings, version)
    except (BackendError, FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"serving {version}")


@index.command()
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    default=None,
    help="Newest versions to keep (the served one always stays); default: ESRR_ES_KEEP_VERSIONS (2).",
)
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
            from es_rerank.backends.es_client import connect
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
