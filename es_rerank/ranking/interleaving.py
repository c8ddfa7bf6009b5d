"""Team-draft interleaving of two rankings, and the clicks' verdict on them (pure).

Team-draft interleaving (Radlinski, Kurup and Joachims, CIKM 2008): the two rankers take
turns, like captains picking teams, the one with fewer picks first and a coin toss on a
tie; each adds its highest document not yet shown. Every shown document belongs to the team
that picked it, and a click credits that team. One impression is a win for the side with
more clicks, a tie with as many (none included). Over many impressions, the sign test on
wins and losses says whether one ranker is preferred (Chapelle et al., TOIS 2012, found
interleaving needs one to two orders of magnitude fewer impressions than A/B metrics).
Hand-written: the method is a dozen lines, and no maintained library on PyPI provides it.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from scipy.stats import binomtest

SERVED, CANDIDATE = "served", "candidate"  # the teams: the ranker served now, and the one that may replace it
Doc = TypeVar("Doc", bound=Hashable)


def team_draft(served: Sequence[Doc], candidate: Sequence[Doc], k: int, rng: random.Random) -> list[tuple[Doc, str]]:
    """The first ``k`` documents of the two rankings interleaved, each with the team that picked it."""
    shown: list[tuple[Doc, str]] = []
    taken: set[Doc] = set()
    picks = {SERVED: 0, CANDIDATE: 0}
    rankings = {SERVED: list(served), CANDIDATE: list(candidate)}
    next_of = {SERVED: 0, CANDIDATE: 0}
    while len(shown) < k:
        for team in (SERVED, CANDIDATE):  # skip what the other team has shown already
            ranking = rankings[team]
            while next_of[team] < len(ranking) and ranking[next_of[team]] in taken:
                next_of[team] += 1
        left = [team for team in (SERVED, CANDIDATE) if next_of[team] < len(rankings[team])]
        if not left:
            break
        if len(left) == 1:
            team = left[0]
        elif picks[SERVED] != picks[CANDIDATE]:
            team = SERVED if picks[SERVED] < picks[CANDIDATE] else CANDIDATE
        else:
            team = SERVED if rng.random() < 0.5 else CANDIDATE
        doc = rankings[team][next_of[team]]
        shown.append((doc, team))
        taken.add(doc)
        picks[team] += 1
    return shown


def winner(teams: Sequence[str | None], clicked_positions: Sequence[int]) -> str | None:
    """The team with more clicks on one impression (None: a tie); ``teams[i]`` picked position ``i + 1``."""
    credit = {SERVED: 0, CANDIDATE: 0}
    for position in set(clicked_positions):
        team = teams[position - 1] if 1 <= position <= len(teams) else None
        if team in credit:
            credit[team] += 1
    if credit[SERVED] == credit[CANDIDATE]:
        return None
    return SERVED if credit[SERVED] > credit[CANDIDATE] else CANDIDATE


@dataclass(frozen=True)
class Verdict:
    """Interleaved impressions counted: the candidate's wins, losses and ties, and the sign test on them."""

    impressions: int
    wins: int  # the candidate's
    losses: int
    ties: int  # clicked, as much on both sides
    unclicked: int

    @property
    def p_value(self) -> float:
        """Two-sided sign test of wins against losses (1.0 without either)."""
        decided = self.wins + self.losses
        return float(binomtest(self.wins, decided, 0.5).pvalue) if decided else 1.0

    @property
    def preference(self) -> float:
        """Chapelle et al.'s Delta: (wins + ties/2) / clicked impressions - 0.5; above 0 the candidate is preferred."""
        clicked = self.wins + self.losses + self.ties
        return (self.wins + self.ties / 2) / clicked - 0.5 if clicked else 0.0

    def promotable(self, alpha: float) -> bool:
        """Whether the candidate won significantly at level ``alpha``."""
        return self.wins > self.losses and self.p_value < alpha


def verdict(outcomes: Sequence[tuple[Sequence[str | None], Sequence[int]]]) -> Verdict:
    """The verdict over impressions given as (each position's team, the clicked positions)."""
    wins = losses = ties = unclicked = 0
    for teams, clicked in outcomes:
        if not clicked:
            unclicked += 1
            continue
        won = winner(teams, clicked)
        wins += won == CANDIDATE
        losses += won == SERVED
        ties += won is None
    return Verdict(len(outcomes), wins, losses, ties, unclicked)
