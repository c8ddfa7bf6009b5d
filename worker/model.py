"""The Delta relevance model (Mohan et al., WWW 2018, section 3), reference implementation.

Shapes: B batch, N document tokens (50), M query tokens (7), V embedding size
(300), F conv filters (32), L Lex features. Token id 0 is padding everywhere;
the word vectors are pre-trained word2vec and stay frozen (section 3).

This module is the readable reference; ``worker.scorer`` is the fast serving
path and is tested to produce the same scores.
"""

from __future__ import annotations

import errno
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from es_rerank.lex import KNOWN_FEATURES, LEX3, LEX3_WINDOW

PAD_ID = 0
COS_EPS = 1e-8  # the Delta stage's cosine: F.cosine_similarity's eps (the fast scorer uses the same)
PROX_EPS = 1e-8  # |d| + |q*| is clamped to this in the normalised proximity
CHECKPOINT_FORMAT = 1


@dataclass(frozen=True)
class DeltaConfig:
    """Hyper-parameters of section 4.2; the variants of Tables 2 and 6 are flags."""

    embedding_dim: int = 300  # V
    doc_len: int = 50  # N
    query_len: int = 7  # M
    n_filters: int = 32  # n_f
    kernel_width: int = 3  # k
    n_conv: int = 3  # N_C
    hidden: tuple[int, ...] = (32, 16)  # K_1, K_2; K_3 = 1 (N_F = 3)
    leaky_slope: float = 0.3
    dropout: float = 0.5  # tuned on dev (reports/tuning.md)
    lex_names: tuple[str, ...] = ()  # () = Delta-32; LEX3 = Delta-32-Lex3
    use_difference: bool = True  # Table 6: "no Difference vectors" sets False
    use_delta_features: bool = True  # Table 6: "no Delta features" sets False

    def __post_init__(self) -> None:
        sizes = {
            "embedding_dim": self.embedding_dim,
            "doc_len": self.doc_len,
            "query_len": self.query_len,
            "n_filters": self.n_filters,
            "kernel_width": self.kernel_width,
            "n_conv": self.n_conv,
        }
        problems = [f"{name}={value}" for name, value in sizes.items() if not isinstance(value, int) or value < 1]
        if not self.hidden or min(self.hidden) < 1:
            problems.append(f"hidden={self.hidden}")
        if problems:
            raise ValueError(f"DeltaConfig sizes must be positive integers: {', '.join(problems)}")
        if not self.use_difference and not self.use_delta_features:
            raise ValueError("DeltaConfig needs the difference vectors, the Delta features or both")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"DeltaConfig dropout must be in [0, 1), got {self.dropout}")
        unknown = [name for name in self.lex_names if name not in KNOWN_FEATURES]
        if unknown:
            raise ValueError(f"unknown Lex feature(s) {unknown}; known: {', '.join(KNOWN_FEATURES)}")

    @property
    def delta_width(self) -> int:
        """Channels of the Delta matrix: V difference values (if used) plus 3 features."""
        return 3 * self.use_delta_features + (self.embedding_dim if self.use_difference else 0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeltaConfig:
        """Inverse of ``dataclasses.asdict``."""
        data = dict(data, hidden=tuple(data["hidden"]), lex_names=tuple(data["lex_names"]))
        return cls(**data)


VARIANTS: dict[str, dict[str, Any]] = {
    "delta-32": {},
    "delta-32-lex3": {"lex_names": LEX3},
    "delta-32-no-difference": {"use_difference": False},
    "delta-32-no-delta-features": {"use_delta_features": False},
    # Not the paper's: Lex3 standardised within each query's window (es_rerank.lex), for collections
    # and query lengths that put the paper's BM25 off its training scale.
    "delta-32-lex3-window": {"lex_names": LEX3_WINDOW},
}


def delta_matrix(
    doc: torch.Tensor, query: torch.Tensor, doc_mask: torch.Tensor, query_mask: torch.Tensor, config: DeltaConfig
) -> torch.Tensor:
    """The unparameterised Delta stage (section 3.2): [B, N, V] x [B, M, V] -> [B, N, C]."""
    distances = torch.cdist(doc, query)  # [B, N, M]
    distances = distances.masked_fill(~query_mask[:, None, :], float("inf"))
    closest = distances.argmin(dim=2)  # [B, N]
    q_star = torch.gather(query, 1, closest[:, :, None].expand(-1, -1, doc.shape[2]))  # [B, N, V]
    difference = doc - q_star  # [B, N, V]
    parts = [difference] if config.use_difference else []
    if config.use_delta_features:
        distance = difference.norm(dim=2, keepdim=True)  # [B, N, 1]
        cosine = F.cosine_similarity(doc, q_star, dim=2, eps=COS_EPS)[:, :, None]  # [B, N, 1]
        norms = doc.norm(dim=2, keepdim=True) + q_star.norm(dim=2, keepdim=True)
        proximity = 1 - distance / norms.clamp_min(PROX_EPS)  # [B, N, 1]
        parts += [cosine, distance, proximity]
    return torch.cat(parts, dim=2) * doc_mask[:, :, None]  # [B, N, C], padding zeroed


class DeltaModel(nn.Module):
    """Delta stage -> 3 masked conv layers -> max-pool -> [pooled, Lex] -> 3 dense layers."""

    # Buffers (register_buffer), declared for the type checker as PyTorch documents.
    embeddings: torch.Tensor
    lex_mean: torch.Tensor
    lex_std: torch.Tensor

    def __init__(self, config: DeltaConfig, embeddings: np.ndarray | torch.Tensor) -> None:
        super().__init__()
        self.config = config
        with warnings.catch_warnings():
            # A read-only memory map is shared, not copied; the frozen table is never written.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            vectors = torch.as_tensor(np.asarray(embeddings), dtype=torch.float32)
        if vectors.shape[1] != config.embedding_dim:
            raise ValueError(
                f"embeddings have {vectors.shape[1]} dimensions, the config expects "
                f"{config.embedding_dim}; use the embeddings the model was trained with"
            )
        # Frozen and not saved in checkpoints: they come from the versioned embeddings artifact.
        self.register_buffer("embeddings", vectors, persistent=False)
        widths = [config.delta_width] + [config.n_filters] * config.n_conv
        self.convs = nn.ModuleList(
            nn.Conv1d(c_in, c_out, config.kernel_width, padding="same") for c_in, c_out in zip(widths[:-1], widths[1:])
        )
        self.dropout = nn.Dropout(config.dropout)
        n_lex = len(config.lex_names)
        sizes = [config.n_filters + n_lex, *config.hidden, 1]
        self.dense = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        # Lex features are standardised with training-set statistics stored in the checkpoint.
        self.register_buffer("lex_mean", torch.zeros(n_lex))
        self.register_buffer("lex_std", torch.ones(n_lex))

    def forward(self, doc_ids: torch.Tensor, query_ids: torch.Tensor, lex: torch.Tensor | None = None) -> torch.Tensor:
        """Scores [B] for doc ids [B, N], query ids [B, M] and Lex features [B, L]."""
        doc_mask = doc_ids != PAD_ID  # [B, N]
        query_mask = query_ids != PAD_ID  # [B, M]
        doc = self.embeddings[doc_ids]  # [B, N, V]
        query = self.embeddings[query_ids]  # [B, M, V]
        y = delta_matrix(doc, query, doc_mask, query_mask, self.config)  # [B, N, C]
        y = y.transpose(1, 2)  # [B, C, N] for Conv1d
        mask = doc_mask[:, None, :].to(y.dtype)  # [B, 1, N]
        for conv in self.convs:
            y = F.leaky_relu(conv(y), self.config.leaky_slope) * mask  # [B, F, N]
        y = self.dropout(y)
        y = y.masked_fill(mask == 0, float("-inf")).amax(dim=2)  # [B, F]
        y = torch.where(torch.isinf(y), torch.zeros_like(y), y)  # an all-padding document pools to 0
        if self.config.lex_names:
            if lex is None or lex.shape[-1] != len(self.config.lex_names):
                raise ValueError(
                    f"this model reads the Lex features {list(self.config.lex_names)}: pass lex as "
                    f"[B, {len(self.config.lex_names)}], got {None if lex is None else list(lex.shape)}"
                )
            y = torch.cat([y, (lex - self.lex_mean) / self.lex_std], dim=1)  # [B, F + L]
        for layer in self.dense:
            y = F.leaky_relu(layer(y), self.config.leaky_slope)
        return y[:, 0]  # [B]

    def conv_parameters(self) -> list[nn.Parameter]:
        """Convolution weights and biases (their own L2 coefficient in training, biases included)."""
        return list(self.convs.parameters())

    def dense_parameters(self) -> list[nn.Parameter]:
        """Feed-forward weights and biases (their own L2 coefficient in training, biases included)."""
        return list(self.dense.parameters())


class CheckpointError(ValueError):
    """A checkpoint file is missing pieces, damaged, or of another model or format."""


SavedModelT = TypeVar("SavedModelT", bound="SavedModel")


@dataclass
class SavedModel:
    """Weights with the config and the data versions needed to rebuild and trust them.

    Subclasses name the model (``MODEL``), how to retrain it (``TRAIN_COMMAND``) and the
    dataclass of their config (``CONFIG``, read back with ``config_from_dict``).
    """

    MODEL: ClassVar[str]
    TRAIN_COMMAND: ClassVar[str]
    CONFIG: ClassVar[type]

    config: Any
    state_dict: dict[str, torch.Tensor]
    embeddings_version: str
    stats_version: str
    metrics: dict[str, float] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write the checkpoint (config as a plain dict, loadable with weights_only)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written beside the target, then renamed: a worker loading the served model never
        # sees half a file, and a failed write (disk full) leaves the old checkpoint in place.
        partial = path.with_name(f".{path.name}.partial")
        try:
            torch.save(
                {
                    "format": CHECKPOINT_FORMAT,
                    "model": self.MODEL,
                    "config": asdict(self.config),
                    "state_dict": self.state_dict,
                    "embeddings_version": self.embeddings_version,
                    "stats_version": self.stats_version,
                    "metrics": self.metrics,
                },
                partial,
            )
            os.replace(partial, path)
        except (OSError, RuntimeError) as error:  # torch reports a full disk as a RuntimeError
            partial.unlink(missing_ok=True)
            raise OSError(errno.EIO, f"cannot write the checkpoint ({error})", str(path)) from None

    @classmethod
    def load(cls: type[SavedModelT], path: Path) -> SavedModelT:
        """Read a checkpoint written by ``save``."""
        if not path.is_file():
            raise FileNotFoundError(f"no model checkpoint at {path}; train one with `{cls.TRAIN_COMMAND}`")
        damaged = f"{path} is not a readable es-rerank checkpoint"
        fix = f"retrain with `{cls.TRAIN_COMMAND}` or point to the .pt it wrote"
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises many kinds (zip, unpickling, EOF) for a damaged file
            # Only the kind: torch's own text suggests weights_only=False, which is unsafe advice here.
            raise CheckpointError(f"{damaged} (torch.load: {type(error).__name__}); {fix}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{damaged} (it holds a {type(data).__name__}); {fix}")
        model = data.get("model", "delta")  # Delta checkpoints written before the field existed
        if model != cls.MODEL:
            raise CheckpointError(f"{path} is a {model} checkpoint, not a {cls.MODEL} model's")
        if data.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(
                f"checkpoint {path} has format {data.get('format')}; this code reads format "
                f"{CHECKPOINT_FORMAT}, retrain with `{cls.TRAIN_COMMAND}`"
            )
        try:
            config = cls.config_from_dict(data["config"])
            versions = data["embeddings_version"], data["stats_version"]
            state_dict, metrics = data["state_dict"], data["metrics"]
        except (KeyError, TypeError) as error:
            raise CheckpointError(f"{damaged} (missing or unknown field: {error}); {fix}") from None
        except ValueError as error:  # the config's own checks
            raise CheckpointError(f"{damaged} ({error}); {fix}") from None
        if (
            not all(isinstance(v, str) and v for v in versions)
            or not isinstance(state_dict, dict)
            or not all(isinstance(value, torch.Tensor) for value in state_dict.values())
        ):
            raise CheckpointError(f"{damaged} (versions must be names, state_dict a mapping of tensors); {fix}")
        not_finite = sorted(
            name
            for name, value in state_dict.items()
            if value.is_floating_point() and not bool(torch.isfinite(value).all())
        )
        if not_finite:  # a diverged run's weights would score every document nan or inf
            raise CheckpointError(
                f"checkpoint {path} holds weights that are not finite numbers "
                f"({', '.join(not_finite[:3])}{', ...' if len(not_finite) > 3 else ''}): the "
                f"training that wrote it diverged or the file is damaged; {fix}"
            )
        return cls(config, state_dict, *versions, metrics)

    @classmethod
    def config_from_dict(cls, data: dict[str, Any]) -> Any:
        """The config object ``save`` wrote as a dict."""
        return cls.CONFIG(**data)


@dataclass
class Checkpoint(SavedModel):
    """A trained Delta model's weights with everything needed to rebuild and trust it."""

    MODEL: ClassVar[str] = "delta"
    TRAIN_COMMAND: ClassVar[str] = "esrr train"
    CONFIG: ClassVar[type] = DeltaConfig

    config: DeltaConfig

    @classmethod
    def config_from_dict(cls, data: dict[str, Any]) -> DeltaConfig:
        """The DeltaConfig ``save`` wrote as a dict (its tuples come back as lists)."""
        return DeltaConfig.from_dict(data)

    def build_model(self, embeddings: np.ndarray) -> DeltaModel:
        """A DeltaModel in eval mode with these weights over the given embedding table."""
        model = DeltaModel(self.config, embeddings)
        model.load_state_dict(self.state_dict)
        return model.eval()
