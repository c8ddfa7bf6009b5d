"""The training room's public functions for experiments (the scripts under reports/): what they may import.

Everything else in ``training`` may change without notice; a script that needs more asks for it here,
and ``tests/training/test_api.py`` holds the scripts to this list.
"""

from training.collection import JudgedCollection
from training.commands.variants import checkpoint_path
from training.commands.workspace import Workspace, open_workspace, split_queries
from training.data import DocumentRows, QueryCandidates, build_candidates, select_features
from training.metrics import PAPER_NDCG20, mean_metric, per_query, run_from_scores
from training.train import TrainConfig, model_score_fn, score_candidates, train_model

__all__ = [
    "PAPER_NDCG20",
    "DocumentRows",
    "JudgedCollection",
    "QueryCandidates",
    "TrainConfig",
    "Workspace",
    "build_candidates",
    "checkpoint_path",
    "mean_metric",
    "model_score_fn",
    "open_workspace",
    "per_query",
    "run_from_scores",
    "score_candidates",
    "select_features",
    "split_queries",
    "train_model",
]
