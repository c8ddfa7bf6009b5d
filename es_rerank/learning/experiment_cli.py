"""``esrr experiment report`` and ``esrr experiment promote``: an interleaving experiment's verdict from the
stored clicks, and the explicit, atomic promotion of its candidate (docs/learning.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import FiniteFloat, json_out_option

if TYPE_CHECKING:
    from es_rerank.learning.settings import ExperimentSettings
    from es_rerank.ranking.interleaving import Verdict

_EVENTS_HELP = "The event store [ESRR_EVENTS_URL, default <home>/events/events.sqlite3]."
_ALPHA_HELP = "Significance level the candidate's wins must reach to be promoted."


@click.group(name="experiment")
def experiment() -> None:
    """An interleaving experiment (ESRR_EXPERIMENT): its verdict, and promoting its candidate."""


def _settings() -> ExperimentSettings:
    from es_rerank.cli_options import load_settings
    from es_rerank.learning.settings import ExperimentSettings

    return load_settings(ExperimentSettings)


def _verdict(settings: ExperimentSettings, events_url: str | None, name: str) -> tuple[Verdict, dict[str, int], str]:
    """The verdict on experiment ``name`` in the store, the interleaved impressions of every arm there, the store."""
    from es_rerank.learning.experiment import arms, experiment_verdict
    from es_rerank.learning.store import EventStoreError, is_postgres, open_store, sqlite_path

    url = (events_url or settings.events_store_url).strip()
    try:
        if not is_postgres(url) and not sqlite_path(url).is_file():
            raise click.ClickException(
                f"no event store at {sqlite_path(url)}: nothing has been recorded there; "
                "point --events (or ESRR_EVENTS_URL) at the store the gateway writes"
            )
        store = open_store(url)
        try:
            impressions = [impression for impression, _ in store.impressions()]
            clicks = [click_event for click_event, _ in store.clicks()]
        finally:
            store.close()
    except EventStoreError as error:
        raise click.ClickException(f"{error} (--events / ESRR_EVENTS_URL names the store)") from None
    return experiment_verdict(impressions, clicks, name), arms(impressions), url


def _name(settings: ExperimentSettings, name: str | None) -> str:
    from es_rerank.ranking.experiment import parse_experiment

    if name:
        return name.strip()
    spec = parse_experiment(settings.experiment)
    if spec is None:
        raise click.UsageError(
            "no experiment named: pass --name (bm25, votes:FILE NAME) or set ESRR_EXPERIMENT as the gateway has it"
        )
    return spec.name


def _figures(name: str, verdict: Verdict, alpha: float) -> dict:
    return {
        "experiment": name,
        "impressions": verdict.impressions,
        "wins": verdict.wins,
        "ties": verdict.ties,
        "losses": verdict.losses,
        "unclicked": verdict.unclicked,
        "p_value": verdict.p_value,
        "preference": round(verdict.preference, 4),
        "alpha": alpha,
        "promotable": verdict.promotable(alpha),
    }


@experiment.command(name="report")
@click.option(
    "--name",
    default=None,
    help="The experiment (the impressions' arm: bm25, votes:FILE NAME) [default: ESRR_EXPERIMENT's].",
)
@click.option(
    "--alpha", type=FiniteFloat(0, 1, min_open=True, max_open=True), default=0.05, show_default=True, help=_ALPHA_HELP
)
@click.option("--events", "events_url", default=None, help=_EVENTS_HELP)
@json_out_option("Also write the verdict as JSON.")
def report(name: str | None, alpha: float, events_url: str | None, json_out: Path | None) -> None:
    """Impressions, the candidate's wins, ties and losses, the sign test and whether the candidate may be promoted."""
    settings = _settings()
    name = _name(settings, name)
    verdict, found, url = _verdict(settings, events_url, name)
    if not verdict.impressions:
        others = ", ".join(f"{arm} ({count:,})" for arm, count in sorted(found.items())) or "none"
        raise click.ClickException(
            f"no interleaved impression of experiment {name!r} in {url}; experiments there: "
            f"{others}. Serve with ESRR_EXPERIMENT set and let searches come in, or pass --name"
        )
    figures = _figures(name, verdict, alpha)
    side = ("the candidate" if verdict.preference > 0 else "the served ranker") if verdict.preference else "neither"
    click.echo(
        f"experiment {name}: {verdict.impressions:,} interleaved impressions, {verdict.unclicked:,} unclicked\n"
        f"  candidate wins {verdict.wins:,}, ties {verdict.ties:,}, losses {verdict.losses:,}\n"
        f"  sign test p = {verdict.p_value:.3g}; preference {verdict.preference:+.3f} ({side} preferred)"
    )
    if figures["promotable"]:
        click.echo(f"  the candidate won at p < {alpha}: it may be promoted (`esrr experiment promote`)")
    elif verdict.losses > verdict.wins and verdict.p_value < alpha:
        click.echo(f"  the served ranker won at p < {alpha}: keep it; the candidate may not be promoted")
    else:
        click.echo(f"  no significant difference at p < {alpha}: the candidate may not be promoted")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")


@experiment.command(name="promote")
@click.option(
    "--experiment",
    "value",
    default=None,
    help="The experiment as ESRR_EXPERIMENT names it (votes:/path/to/votes.json) [default: ESRR_EXPERIMENT].",
)
@click.option(
    "--alpha", type=FiniteFloat(0, 1, min_open=True, max_open=True), default=0.05, show_default=True, help=_ALPHA_HELP
)
@click.option("--force", is_flag=True, help="Promote even when the report does not say the candidate won.")
@click.option("--events", "events_url", default=None, help=_EVENTS_HELP)
def promote(value: str | None, alpha: float, force: bool, events_url: str | None) -> None:
    """Make the candidate the served ranker: its votes file replaces the served one in one rename, once the report
    says it won (or with --force)."""
    from es_rerank.learning.experiment import replace_atomically
    from es_rerank.ranking.experiment import BM25, ExperimentError, parse_experiment
    from es_rerank.ranking.neighbours import JudgedNeighbours, NeighboursError

    settings = _settings()
    try:
        spec = parse_experiment(value if value is not None else settings.experiment)
    except ExperimentError as error:
        raise click.ClickException(str(error)) from None
    if spec is None:
        raise click.UsageError(
            "no experiment to promote: pass --experiment votes:/path/to/votes.json or set "
            "ESRR_EXPERIMENT as the gateway has it"
        )
    if spec.kind == BM25:
        raise click.ClickException(
            "BM25 has no file to promote: a gateway serves BM25's order with "
            "ESRR_GATEWAY_WINDOW=0 (restart `esrr serve` after setting it)"
        )
    target = settings.neighbours_path
    assert spec.path is not None  # votes always name their file (ExperimentSpec)
    if target.exists() and spec.path.resolve() == target.resolve():
        raise click.ClickException(f"the candidate {spec.path} is the served votes file already; nothing to promote")
    verdict, _, _ = _verdict(settings, events_url, spec.name) if not force else (None, None, None)
    if verdict is not None and not verdict.promotable(alpha):
        raise click.ClickException(
            f"the report does not say {spec.name} won ({verdict.wins:,} wins, {verdict.losses:,} losses over "
            f"{verdict.impressions:,} impressions, p = {verdict.p_value:.3g} at alpha {alpha}); let more searches "
            "come in and see `esrr experiment report`, or pass --force"
        )
    try:
        JudgedNeighbours.load(spec.path)  # a damaged file is refused before it replaces a good one
    except NeighboursError as error:
        raise click.ClickException(str(error)) from None
    replace_atomically(spec.path, target)
    click.echo(
        f"promoted {spec.name}: {spec.path} -> {target} (replaced in one rename). A running gateway read "
        "the votes at start and keeps them: restart `esrr serve` to serve these, and unset ESRR_EXPERIMENT "
        "(its candidate is now the served ranker)"
    )
