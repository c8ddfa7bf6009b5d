"""The ``esrr`` command: assembles the sub-commands each package defines.

Sub-commands are imported only when invoked, so ``esrr index ...`` never loads
torch and ``esrr --help`` is instant.
"""

from __future__ import annotations

import errno
import importlib
import math
import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import click

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

SettingsT = TypeVar("SettingsT", bound="CommonSettings")


def load_settings(cls: type[SettingsT] | None = None, **overrides: object) -> SettingsT:
    """Settings from ``ESRR_*`` (plus non-None overrides); a bad value is a clear CLI error.

    ``cls`` defaults to ``CommonSettings``; pydantic is imported here, not with the
    module, so that ``esrr --help`` stays instant.
    """
    from pydantic import ValidationError

    from es_rerank.settings import CommonSettings, settings_problems

    cls = cls or CommonSettings
    try:
        return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as error:
        raise click.ClickException(settings_problems(error)) from None


def writable_dir(path: Path, fix: str) -> Path:
    """``path`` created if missing and checked to be a folder this process can write in, so that a bad
    output location fails before the long work, not after it; ``fix`` ends the error message."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        problem = f"{blocker} is a file, not a folder" if blocker is not None else error.strerror
        raise click.ClickException(f"cannot write in {path}: {problem}; {fix}") from None
    return path


def writable_file(path: Path, fix: str) -> Path:
    """``path`` checked to be a file this process can write (its folder created if missing), before the work."""
    if path.is_dir():
        raise click.ClickException(f"cannot write {path}: it is a folder; {fix}")
    writable_dir(path.parent, fix)
    if path.exists() and not os.access(path, os.W_OK):
        raise click.ClickException(f"cannot write {path}: permission denied; {fix}")
    return path


def json_out_option(help: str) -> Callable[[Callable], Callable]:
    """The benchmarks' ``--json-out FILE``, checked writable as the command line is read, before any timing."""
    def check(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        return None if value is None else writable_file(value, "pass a file path you can write to as --json-out")

    return click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        callback=check, help=help)


def dev_query_options(command: Callable) -> Callable:
    """The benchmarks' ``--rounds``, ``--queries`` and ``--data``: timed passes over the NFCorpus dev queries."""
    for option in reversed([
        click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1),
                     help="Timed passes over the dev queries."),
        click.option("--queries", default=324, show_default=True, type=click.IntRange(min=1),
                     help="Dev queries to use, the first ones by id."),
        click.option("--data", type=click.Path(exists=True, path_type=Path), default=None,
                     help="NFCorpus directory."),
    ]):
        command = option(command)
    return command


def dev_query_texts(data: Path | None, settings: "CommonSettings", n: int) -> list[str]:
    """The texts of the first ``n`` NFCorpus dev queries by id (the benchmarks' load), or a CLI error."""
    from index_setup.nfcorpus import NFCorpus

    try:
        texts = [text for _, text in sorted(NFCorpus.locate(data, settings).queries("dev").items())][:n]
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if not texts:
        raise click.ClickException("no dev query has both judgments (qrels/dev.tsv) and text (queries.jsonl); "
                                   "check those two files of the NFCorpus folder")
    return texts


class FiniteFloat(click.FloatRange):
    """A float range that also refuses nan and inf (click's FloatRange lets them through)."""

    name = "finite float range"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The number, or a usage error for nan and inf."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use.

    ``lazy_subcommands`` maps a name to ``(module:attribute, one-line help)``; the
    help line lets ``--help`` list commands without importing them.
    """

    def __init__(self, *args, lazy_subcommands: dict[str, tuple[str, str]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Loaded and lazy sub-commands, sorted."""
        return sorted([*super().list_commands(ctx), *self.lazy_subcommands])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The sub-command, importing a lazy one only now."""
        if name not in self.lazy_subcommands:
            return super().get_command(ctx, name)
        module_name, attribute = self.lazy_subcommands[name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def invoke(self, ctx: click.Context) -> object:
        """Run the sub-command; a file-system error (read-only ESRR_HOME, a file where a folder
        belongs) becomes a clear CLI error instead of a traceback."""
        try:
            return super().invoke(ctx)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):  # often raised without a file name
                raise click.ClickException(f"{error.strerror} ({error.filename or 'while writing'}); free "
                                           "space where ESRR_HOME and --out point, or point them elsewhere") from None
            if error.filename is None:  # sockets and the like: not a path problem, keep the traceback
                raise
            raise click.ClickException(
                f"cannot use {error.filename}: {error.strerror}; check that ESRR_HOME and the paths given "
                "exist where they should and are writable") from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The help listing; lazy commands show their registered short help, without an import."""
        rows = [(name, self.lazy_subcommands[name][1] if name in self.lazy_subcommands
                 else self.commands[name].get_short_help_str())
                for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy_subcommands={
    "index": ("index_setup.cli:index", "Load the corpus; build, replace and inspect indexes."),
    "search": ("index_setup.cli:search", "Search the served index from the shell (reranked when a model is trained)."),
    "embeddings": ("index_setup.embeddings:embeddings", "Train and inspect the word2vec embeddings."),
    "neighbours": ("index_setup.neighbours:neighbours",
                   "Build the judged-neighbours votes from NFCorpus train judgments."),
    "train": ("worker.training.cli:train", "Train a Delta model on NFCorpus train, early-stopped on dev."),
    "select-features": ("worker.training.cli:select_features",
                        "Greedy Lex-feature selection on NFCorpus dev (section 5.1)."),
    "eval": ("worker.training.cli:evaluate", "Evaluate BM25 and the Delta models on NFCorpus test."),
    "worker": ("worker.cli:worker", "Run the Celery scoring worker."),
    "serve": ("es_rerank.gateway.cli:serve", "Serve an Elasticsearch-shaped _search over HTTP, reranked by the workers."),
})
@click.version_option(package_name="es-rerank")
def main() -> None:
    """es-rerank: BM25 retrieval reranked by the Delta-32-Lex3 model."""


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """While inside, SIGTERM exits through ``finally`` and ``except BaseException`` blocks, as Ctrl-C does.

    `timeout`, `docker stop` and systemd stop with SIGTERM, which by default kills Python
    without any cleanup: a build would leave its half-written version behind. Only the
    default action is replaced (an ignored SIGTERM stays ignored), and only around work
    that cleans up after itself: elsewhere threads would delay the exit.
    """
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@main.group(cls=LazyGroup, lazy_subcommands={
    "index": ("index_setup.bench:bench_index", "Tokenize+statistics rate, index build time, BM25 latency."),
    "score": ("worker.bench:bench_score", "Reference vs fast Delta scorer latency, throughput and RSS."),
    "search": ("worker.bench_search:bench_search", "Per-stage latency of the served search on the dev queries."),
    "roundtrip": ("worker.bench_roundtrip:bench_roundtrip",
                  "rerank.score through the broker against a running worker: latency and throughput."),
    "http": ("es_rerank.gateway.bench:bench_http", "A running gateway's latency and searches/s over HTTP."),
})
def bench() -> None:
    """Benchmarks that print measured figures (see the README for how they were run)."""
