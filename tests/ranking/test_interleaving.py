"""Team-draft interleaving and its verdict (``es_rerank.ranking.interleaving``), pure."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_rerank.ranking.interleaving import CANDIDATE, SERVED, Verdict, team_draft, verdict, winner

rankings = st.lists(st.integers(0, 30), unique=True, max_size=15)


@given(rankings, rankings, st.integers(0, 20), st.integers(0, 2**32))
def test_each_team_shows_its_own_best_unshown_documents_taking_turns(served, candidate, k, seed):
    shown = team_draft(served, candidate, k, random.Random(seed))
    docs = [doc for doc, _ in shown]
    assert len(docs) == len(set(docs)) == min(k, len(set(served) | set(candidate)))
    for team, ranking in ((SERVED, served), (CANDIDATE, candidate)):
        picked = [doc for doc, by in shown if by == team]
        assert picked == [doc for doc in ranking if doc in picked]  # in the team's own order
        for at, (doc, by) in enumerate(shown):  # a pick is the team's highest document not shown before it
            if by == team:
                before = {earlier for earlier, _ in shown[:at]}
                assert doc == next(d for d in ranking if d not in before)
    counts = [sum(by == team for _, by in shown) for team in (SERVED, CANDIDATE)]
    if all(doc in candidate for doc in served) and all(doc in served for doc in candidate):
        assert abs(counts[0] - counts[1]) <= 1  # the same documents: the turns alternate


def test_the_coin_decides_who_picks_first_about_half_the_time():
    firsts = [team_draft("abc", "cba", 1, random.Random(seed))[0] for seed in range(2000)]
    assert 900 < sum(team == SERVED for _, team in firsts) < 1100
    assert {doc for doc, team in firsts if team == SERVED} == {"a"}


def test_a_click_credits_the_team_that_picked_the_document():
    teams = [SERVED, CANDIDATE, CANDIDATE, SERVED]
    assert winner(teams, [2]) == CANDIDATE and winner(teams, [1, 4, 2]) == SERVED
    assert winner(teams, [1, 2]) is None and winner(teams, []) is None
    assert winner(teams, [2, 2, 2, 1]) is None  # a position clicked twice counts once
    assert winner(teams, [9]) is None and winner([None, CANDIDATE], [1, 2]) == CANDIDATE  # unknown: no credit


def test_the_verdict_counts_and_tests_the_candidate():
    teams = [SERVED, CANDIDATE]
    outcomes = [(teams, [2])] * 30 + [(teams, [1])] * 10 + [(teams, [1, 2])] * 5 + [(teams, [])] * 7
    found = verdict(outcomes)
    assert (found.impressions, found.wins, found.losses, found.ties, found.unclicked) == (52, 30, 10, 5, 7)
    assert found.p_value == pytest.approx(0.002221, rel=1e-3)  # binomial, 30 of 40, two-sided
    assert found.preference == pytest.approx((30 + 2.5) / 45 - 0.5)
    assert found.promotable(0.05) and not found.promotable(0.001)
    assert not Verdict(10, 0, 0, 0, 10).promotable(0.05) and Verdict(10, 0, 0, 0, 10).p_value == 1.0
    assert not verdict([(teams, [1])] * 40).promotable(0.05)  # significant, but for the served ranker


def test_a_ranker_against_itself_is_a_tie():
    rng = random.Random(7)
    ranking = list(range(20))
    outcomes = []
    for _ in range(2000):
        shown = team_draft(ranking, ranking, 10, rng)
        clicked = [position for position in range(1, 11) if rng.random() < 0.5 / position]
        outcomes.append(([team for _, team in shown], clicked))
    assert verdict(outcomes).p_value > 0.01
