"""An interleaving experiment's verdict from the stored events, and its promotion (``esrr experiment``).

The verdict counts the impressions of one experiment (their ``arm``) whose results carry
teams, credits each click to the team of the result clicked (``interleaving.verdict``) and
tests wins against losses. Promotion makes a votes candidate the served votes file: a copy
written beside it, then renamed over it (``os.replace``), so a gateway or command reading the
file sees the old one or the new one, never a part.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from es_rerank.learning.events import Click, Impression
from es_rerank.ranking.interleaving import Verdict, verdict


def outcomes(
    impressions: Iterable[Impression], clicks: Iterable[Click], arm: str
) -> list[tuple[list[str | None], list[int]]]:
    """Each interleaved impression of ``arm`` as (each result's team in position order, the clicked positions counted
    from 1 on that list): ``interleaving.verdict``'s input. Clicks on other impressions, or on positions the
    impression did not show, are left out."""
    clicked: dict[str, set[int]] = defaultdict(set)
    for click in clicks:
        clicked[click.impression_id].add(click.position)
    found = []
    for impression in impressions:
        if impression.arm != arm or not any(shown.team for shown in impression.results):
            continue
        results = sorted(impression.results, key=lambda shown: shown.position)
        place = {shown.position: index + 1 for index, shown in enumerate(results)}
        on_it = clicked.get(impression.impression_id, ())
        teams: list[str | None] = [shown.team for shown in results]
        found.append((teams, sorted(place[at] for at in on_it if at in place)))
    return found


def experiment_verdict(impressions: Iterable[Impression], clicks: Iterable[Click], arm: str) -> Verdict:
    """The verdict of the clicks on ``arm``'s interleaved impressions."""
    return verdict(outcomes(impressions, clicks, arm))


def arms(impressions: Iterable[Impression]) -> dict[str, int]:
    """How many interleaved impressions each experiment arm has."""
    counted: dict[str, int] = defaultdict(int)
    for impression in impressions:
        if impression.arm is not None and any(shown.team for shown in impression.results):
            counted[impression.arm] += 1
    return dict(counted)


def replace_atomically(source: Path, target: Path) -> None:
    """``target`` becomes a copy of ``source``: written beside it, then renamed over it in one step."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.promoting-{os.getpid()}")
    try:
        shutil.copyfile(source, temporary)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
