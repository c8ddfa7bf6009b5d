"""The click models (``es_rerank.learning.click_model``): EM recovers the examination and attractiveness that
generated synthetic clicks, and UBM's examination classes follow the clicks above a result."""

from __future__ import annotations

import numpy as np
import pytest

from es_rerank.learning.click_model import examination_classes, fit_click_model

RANKS = 10


def pbm_clicks(seed: int, pairs: int = 60, impressions: int = 6000):
    """Clicks drawn from a known PBM: each impression shows 10 random pairs in a random order."""
    rng = np.random.default_rng(seed)
    gamma = 1.0 / (1.0 + np.arange(RANKS)) ** 0.8
    alpha = rng.uniform(0.05, 0.95, pairs)
    pair = np.concatenate([rng.choice(pairs, RANKS, replace=False) for _ in range(impressions)])
    rank = np.tile(np.arange(RANKS), impressions)
    impression = np.repeat(np.arange(impressions), RANKS)
    clicked = rng.random(len(pair)) < alpha[pair] * gamma[rank]
    return alpha, gamma, pair, rank, clicked, impression


@pytest.mark.parametrize("name", ["pbm", "ubm"])
def test_em_recovers_the_examination_and_attractiveness_that_made_the_clicks(name):
    alpha, gamma, pair, rank, clicked, impression = pbm_clicks(seed=1)
    model = fit_click_model(name, pair, rank, clicked, impression, len(alpha), max_rank=RANKS)
    assert model.converged
    assert np.allclose(model.examination_by_position(), gamma, atol=0.03)
    assert np.abs(model.attractiveness - alpha).max() < 0.1
    assert np.corrcoef(model.attractiveness, alpha)[0, 1] > 0.98


def test_pbm_estimates_are_not_the_raw_click_rates():
    # The correction matters: a pair's click-through rate is its attractiveness times where it was shown.
    alpha, gamma, pair, rank, clicked, impression = pbm_clicks(seed=2)
    raw = np.bincount(pair, weights=clicked) / np.bincount(pair)
    model = fit_click_model("pbm", pair, rank, clicked, impression, len(alpha), max_rank=RANKS)
    assert np.abs(raw - alpha).mean() > 3 * np.abs(model.attractiveness - alpha).mean()


def test_ubm_classes_are_the_position_and_the_distance_to_the_last_click_above():
    # Two impressions of four results, listed out of order: clicks at ranks 1 and 3 of the first, none in the second.
    rank = np.array([3, 0, 1, 2, 0, 1, 2, 3])
    impression = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    clicked = np.array([False, False, True, True, False, False, False, False])
    classes = examination_classes("ubm", rank, clicked, impression, max_rank=4)
    rank_of, distance = classes // 5, classes % 5
    assert rank_of.tolist() == rank.tolist()
    # rank 3 after the click at rank 2 (distance 1); rank 2 after rank 1's (1); rank 1 nothing above (2); rank 0 (1)
    assert distance.tolist() == [1, 1, 2, 1, 1, 2, 3, 4]


def test_dcm_tells_a_skipped_result_from_a_bad_one_when_the_ranking_never_changes():
    # One fixed page per query, cascade users who stop after a click: PBM cannot tell position from attraction;
    # DCM, which takes results above the first click as read, recovers the attraction.
    rng = np.random.default_rng(3)
    queries, sessions = 40, 200
    alpha = rng.uniform(0.1, 0.9, (queries, RANKS))
    pair, rank, clicked, impression = [], [], [], []
    for number in range(queries * sessions):
        query = number % queries
        stopped = False
        for position in range(RANKS):
            click = not stopped and rng.random() < alpha[query, position]
            stopped = stopped or (click and rng.random() < 0.7)
            pair.append(query * RANKS + position), rank.append(position), clicked.append(click)
            impression.append(number)
    arrays = [np.asarray(values) for values in (pair, rank, clicked, impression)]
    truth = alpha.ravel()
    models = {name: fit_click_model(name, *arrays, queries * RANKS, max_rank=RANKS) for name in ("dcm", "ubm", "pbm")}
    # Judged where the evidence suffices: pairs DCM expects to have been read at least 30 times.
    read = np.bincount(arrays[0], weights=models["dcm"].examination[models["dcm"].classes]) >= 30
    error = {name: np.abs(model.attractiveness - truth)[read].mean() for name, model in models.items()}
    assert read.mean() > 0.4 and error["dcm"] < 0.08
    assert error["dcm"] < 0.6 * error["pbm"]


def test_a_model_it_does_not_know_or_a_rank_off_the_page_is_refused():
    one = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="not one of dcm, ubm, pbm"):
        fit_click_model("dbn", one, one, one.astype(bool), one, 1, max_rank=RANKS)
    with pytest.raises(ValueError, match="ranks must lie in 0..9"):
        fit_click_model("pbm", one, one + RANKS, one.astype(bool), one, 1, max_rank=RANKS)
