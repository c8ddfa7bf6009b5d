"""Option types and helpers that several ``esrr`` sub-commands share (settings, output paths, signals).

Kept apart from ``es_rerank.cli``, the composition root, so that a package's commands
import these without importing the command tree that imports them.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

BACKEND_OPTION = click.option(
    "--backend",
    type=click.Choice(["embedded", "elasticsearch", "opensearch"]),
    default=None,
    help="Search backend (default: ESRR_BACKEND, else embedded).",
)

SettingsT = TypeVar("SettingsT", bound="CommonSettings")


@overload
def load_settings(cls: None = None, **overrides: Any) -> CommonSettings: ...
@overload
def load_settings(cls: type[SettingsT], **overrides: Any) -> SettingsT: ...
def load_settings(cls: type[CommonSettings] | None = None, **overrides: Any) -> CommonSettings:
    """Settings from ``ESRR_*`` (plus non-None overrides); a bad value is a clear CLI error.

    ``cls`` defaults to ``CommonSettings``; pydantic is imported here, not with the
    module, so that ``esrr --help`` stays instant.
    """
    from pydantic import ValidationError

    from es_rerank.settings import CommonSettings, settings_problems

    try:
        return (cls or CommonSettings)(**{k: v for k, v in overrides.items() if v is not None})
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

    return click.option(
        "--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None, callback=check, help=help
    )


def vote_options(defaults: Any) -> Callable[[Callable], Callable]:
    """The judged-neighbour votes' ``--k``, ``--power``, ``--weight`` and ``--confidence``, defaulting to
    ``defaults`` (a ``ranking.neighbours.NeighbourParams``): for each command that builds a votes file."""
    from es_rerank.settings import MAX_VOTE_WEIGHT

    options = [
        click.option(
            "--k",
            type=click.IntRange(1, 1000),
            default=defaults.k,
            show_default=True,
            help="Most similar judged queries that vote.",
        ),
        click.option(
            "--power",
            type=FiniteFloat(0, 10, min_open=True),
            default=defaults.power,
            show_default=True,
            help="Similarity exponent of a vote.",
        ),
        click.option(
            "--weight",
            type=FiniteFloat(0, MAX_VOTE_WEIGHT, min_open=True),
            default=defaults.weight,
            show_default=True,
            help="Weight of the vote beside the ranker's standardised score.",
        ),
        click.option(
            "--confidence",
            type=FiniteFloat(0, 10),
            default=defaults.confidence,
            show_default=True,
            help="Exponent of the nearest judged query's similarity that scales a query's votes (0: none).",
        ),
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


class FiniteFloat(click.FloatRange):
    """A float range that also refuses nan and inf (click's FloatRange lets them through)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The number, or a usage error for nan and inf."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


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
