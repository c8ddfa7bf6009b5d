"""Several checkpoints served as one ranker: the scorer, and how the settings name its members."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from es_rerank.lex import LEX3
from worker.ensemble import EnsembleScorer, ensemble_scores
from worker.model import DeltaConfig, DeltaModel
from worker.scorer import DeltaScorer
from worker.settings import WorkerSettings


def _scorer(seed: int, vectors: np.ndarray) -> DeltaScorer:
    torch.manual_seed(seed)
    model = DeltaModel(DeltaConfig(embedding_dim=vectors.shape[1], lex_names=LEX3), vectors).eval()
    return DeltaScorer.from_model(model, "cpu")


def _requests(rng: np.random.Generator, n_words: int) -> list:
    requests = []
    for n in (7, 1, 12):
        query = np.zeros(7, dtype=np.int64)
        query[:3] = rng.integers(2, n_words, size=3)
        docs = rng.integers(2, n_words, size=(n, 50))
        docs[:, 40:] = 0  # padding at the end of every document
        requests.append((query, docs, rng.normal(size=(n, 3)).astype(np.float32)))
    return requests


def test_ensemble_scores_are_the_mean_of_standardised_member_scores():
    rng = np.random.default_rng(3)
    vectors = rng.normal(0, 0.3, size=(40, 16)).astype(np.float32)
    vectors[0] = 0
    members = [_scorer(seed, vectors) for seed in (1, 2, 3)]
    requests = _requests(rng, len(vectors))
    scores = EnsembleScorer(members).score_many(requests)

    for request, got in zip(requests, scores):
        per_member = [member.score(*request) for member in members]
        expected = np.mean([(s - s.mean()) / s.std() if s.std() > 0 else s - s.mean() for s in per_member], axis=0)
        assert got.dtype == np.float32 and got.shape == (len(request[1]),)
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.all(scores[1] == 0)  # one document: nothing to rank it against
    np.testing.assert_array_equal(EnsembleScorer(members).score(*requests[2]), scores[2])


def test_members_on_different_scales_count_equally():
    scaled = [np.array([1.0, 2.0, 3.0]), np.array([300.0, 100.0, 200.0])]
    # standardised: [-1.22, 0, 1.22] and [1.22, -1.22, 0] -> the large-scale member does not dominate
    np.testing.assert_allclose(ensemble_scores([[scaled[0]], [scaled[1]]])[0], [0.0, -0.6123724, 0.6123724], atol=1e-6)


def test_an_ensemble_needs_two_members_on_one_device():
    vectors = np.random.default_rng(0).normal(size=(10, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="at least two"):
        EnsembleScorer([_scorer(1, vectors)])


def test_checkpoint_setting_names_the_members_comma_separated(tmp_path):
    assert WorkerSettings(home=tmp_path).checkpoint_paths == (tmp_path / "models" / "delta-32-lex3.pt",)
    settings = WorkerSettings(home=tmp_path, checkpoint=f"{tmp_path}/a.pt, {tmp_path}/b.pt")
    assert settings.checkpoint_paths == (tmp_path / "a.pt", tmp_path / "b.pt")
    assert settings.checkpoint_path == tmp_path / "a.pt"
    with pytest.raises(ValidationError, match="names one checkpoint twice"):
        WorkerSettings(checkpoint="a.pt,a.pt")
    with pytest.raises(ValidationError, match="names one checkpoint twice"):
        WorkerSettings(checkpoint=[tmp_path / "a.pt", tmp_path / "x" / ".." / "a.pt"])
    with pytest.raises(ValidationError, match="a directory; point it to the .pt file"):
        WorkerSettings(checkpoint=f"a.pt,{tmp_path}")
