"""DRMM (Guo et al., CIKM 2016), the histogram baseline of the Delta paper's Table 2.

For every query term, the cosine similarities between its vector and every word of
the document (title + abstract, all of it, not the first 50 words) are counted in
``n_bins`` bins over [-1, 1), with exact matches of the same lexical term in a bin
of their own; counts are log-scaled (DRMM's LCH histogram). A small feed-forward
network maps each term's histogram to a score, and a softmax over the query
terms' idf (DRMM's term gating) weighs them. It trains with the Delta model's
triples, loss and optimiser (``fit_pairwise``), so the comparison is like for like.

Words the embeddings do not know get a zero vector (cosine 0) instead of the
shared random UNK vector, which would make every pair of rare words look alike;
they still match exactly when they are the same term.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from es_rerank.embeddings import UNK, Embeddings
from es_rerank.payload import QUERY_LEN
from es_rerank.stats import CorpusStats
from es_rerank.text import embedding_tokens, tokenize
from training.data import QueryCandidates
from training.train import TrainConfig, TrainResult, fit_pairwise, set_seeds
from worker.model import SavedModel


@dataclass(frozen=True)
class DRMMConfig:
    """DRMM's sizes: LCH histograms of 30 bins, a 30-5-1 tanh network, M query terms."""

    n_bins: int = 30
    hidden: int = 5
    query_len: int = QUERY_LEN


@dataclass
class QueryHistograms:
    """One query's DRMM inputs for its candidates."""

    histograms: np.ndarray  # float16 [n, M, n_bins] log(1 + count)
    idf: np.ndarray  # float32 [M], 0 on padding
    mask: np.ndarray  # bool [M], False on padding


class HistogramBuilder:
    """Builds LCH matching histograms from the index statistics and the embeddings."""

    def __init__(self, stats: CorpusStats, embeddings: Embeddings, config: DRMMConfig = DRMMConfig()) -> None:
        self.stats, self.embeddings, self.config = stats, embeddings, config
        self.unit = self._unit_vectors(stats.vocab.terms)  # [n_terms, V]

    def _unit_vectors(self, tokens: Sequence[str]) -> np.ndarray:
        """[len(tokens), V] unit vectors of lexical tokens; zero rows for words without a vector."""
        rows = self.embeddings.lookup(embedding_tokens(list(tokens)))
        vectors = np.asarray(self.embeddings.vectors, dtype=np.float32)[rows]
        vectors[rows == UNK] = 0.0
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-8)

    def query(self, text: str, stats_rows: np.ndarray) -> QueryHistograms:
        """Histograms [n, M, n_bins] of the query's first M terms against each candidate document."""
        cfg = self.config
        tokens = tokenize(text)[: cfg.query_len]
        m = len(tokens)
        term_ids = self.stats.vocab.lookup(tokens).astype(np.int64)  # negative: not in the corpus
        query_unit = self._unit_vectors(tokens)  # [m, V]
        docs = [self.stats.doc_terms(int(r)) for r in stats_rows]
        words = [np.concatenate([d.title_ids, d.abstract_ids]).astype(np.int64) for d in docs]
        flat = np.concatenate(words) if words else np.zeros(0, np.int64)  # [T]
        doc_of = np.repeat(np.arange(len(docs)), [len(w) for w in words])  # [T]
        cosine = (self.unit @ query_unit.T)[flat]  # [n_terms, m] -> [T, m]
        bins = np.clip(((cosine + 1.0) / 2.0 * (cfg.n_bins - 1)).astype(np.int64), 0, cfg.n_bins - 2)
        bins[flat[:, None] == term_ids[None, :]] = cfg.n_bins - 1  # exact match bin
        cells = (doc_of[:, None] * cfg.query_len + np.arange(m)[None, :]) * cfg.n_bins + bins  # [T, m]
        counts = np.bincount(cells.ravel(), minlength=len(docs) * cfg.query_len * cfg.n_bins)
        histograms = np.log1p(counts.reshape(len(docs), cfg.query_len, cfg.n_bins)).astype(np.float16)
        mask = np.arange(cfg.query_len) < m
        idf = np.zeros(cfg.query_len, dtype=np.float32)
        idf[:m] = self.stats.idf(term_ids, "text")
        return QueryHistograms(histograms, idf, mask)


def build_histograms(
    candidates: Sequence[QueryCandidates], queries: Mapping[str, str], builder: HistogramBuilder, progress: bool = True
) -> list[QueryHistograms]:
    """DRMM inputs for every query's candidates."""
    return [
        builder.query(queries[c.query_id], c.stats_rows)
        for c in tqdm(candidates, desc="histograms", unit="query", disable=not progress)
    ]


class DRMM(nn.Module):
    """Per-term histogram network and idf term gating: score = sum_i g_i * z_i."""

    def __init__(self, config: DRMMConfig = DRMMConfig()) -> None:
        super().__init__()
        self.config = config
        self.matching = nn.Sequential(
            nn.Linear(config.n_bins, config.hidden), nn.Tanh(), nn.Linear(config.hidden, 1), nn.Tanh()
        )
        self.gate = nn.Parameter(torch.ones(1))  # g = softmax(gate * idf) over the real query terms

    def forward(self, histograms: torch.Tensor, idf: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Scores [B] of histograms [B, M, n_bins], idf [B, M] and query masks [B, M]."""
        z = self.matching(histograms)[:, :, 0]  # [B, M]
        # A finite fill (not -inf) keeps an all-padding query's softmax, and its gradient, free of NaN.
        gates = (self.gate * idf).masked_fill(~mask, -1e9).softmax(dim=1) * mask  # [B, M]
        return (gates * z).sum(dim=1)  # a query without terms scores 0


def _stack(
    inputs: Sequence[QueryHistograms], query_index: np.ndarray, doc_index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    histograms = np.stack([inputs[q].histograms[d] for q, d in zip(query_index, doc_index)]).astype(np.float32)
    idf = np.stack([inputs[q].idf for q in query_index])
    mask = np.stack([inputs[q].mask for q in query_index])
    return torch.from_numpy(histograms), torch.from_numpy(idf), torch.from_numpy(mask)


def drmm_scores(model: DRMM, inputs: Sequence[QueryHistograms]) -> list[np.ndarray]:
    """Scores of every query's candidates."""
    model.eval()
    out = []
    with torch.no_grad():
        for query in inputs:
            n = len(query.histograms)
            out.append(
                model(
                    torch.from_numpy(query.histograms.astype(np.float32)),
                    torch.from_numpy(np.repeat(query.idf[None], n, axis=0)),
                    torch.from_numpy(np.repeat(query.mask[None], n, axis=0)),
                ).numpy()
            )
    return out


def train_drmm(
    train: Sequence[QueryCandidates],
    train_inputs: Sequence[QueryHistograms],
    dev: Sequence[QueryCandidates],
    dev_inputs: Sequence[QueryHistograms],
    dev_qrels: Mapping[str, Mapping[str, int]],
    settings: TrainConfig,
    config: DRMMConfig = DRMMConfig(),
    progress: bool = True,
) -> TrainResult:
    """Train DRMM with the shared pairwise loop (Adagrad, L2 as for dense layers), early-stopped on dev."""
    set_seeds(settings.seed)
    model = DRMM(config)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=settings.learning_rate, weight_decay=settings.l2_dense)
    return fit_pairwise(
        model,
        optimizer,
        train,
        lambda q, d: model(*_stack(train_inputs, q, d)),
        lambda: drmm_scores(model, dev_inputs),
        dev,
        dict(dev_qrels),
        settings,
        progress,
    )


@dataclass
class DRMMCheckpoint(SavedModel):
    """A trained DRMM with the versions of the embeddings and statistics it was trained on."""

    MODEL: ClassVar[str] = "drmm"
    TRAIN_COMMAND: ClassVar[str] = "esrr train --variant drmm"
    CONFIG: ClassVar[type] = DRMMConfig

    config: DRMMConfig

    def build_model(self) -> DRMM:
        """The DRMM in eval mode with these weights."""
        model = DRMM(self.config)
        model.load_state_dict(self.state_dict)
        return model.eval()
