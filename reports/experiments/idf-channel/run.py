"""Dev-only: does the Delta stage gain from knowing how rare the query word it matched is?

    ESRR_HOME=artifacts OMP_NUM_THREADS=1 python reports/experiments/idf-channel/run.py SEED [LOSS]

In the paper's Delta stage every document word is paired with its closest query word,
and the convolutions see the difference vector, cosine, distance and proximity of that
pair, but not which query word it was: a close match to "the" and one to "curcumin"
look alike, and only the Lex features carry IDF. Here two channels are added to the
Delta matrix (so the first convolution reads C + 2 columns): the IDF of the closest query
word and the same IDF where the match is exact (distance 0), both divided by 10. IDF is
that of the index statistics; a word's embedding row takes the largest IDF of the
lexical terms that map to it (a word in no NFCorpus document: the IDF of document
frequency 0), and PAD and UNK get 0 (an UNK pair is not a match).
Everything else is the recipe (``LOSS`` hinge by default). Not the paper's model: a
variant to see whether the floor is within reach of one more input. Appends one JSON
line per run to ``results.jsonl`` beside this file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from es_rerank.embeddings import UNK
from es_rerank.lex import LEX3
from es_rerank.text import embedding_tokens
from worker.inputs import term_rows
from worker.model import PAD_ID, DeltaConfig, DeltaModel, delta_matrix
from worker.training.cli import open_workspace
from worker.training.data import batch_inputs
from worker.training.train import TrainConfig, delta_optimizer, fit_pairwise, new_delta_model

HERE = Path(__file__).parent
IDF_SCALE = 10.0


class IdfDeltaModel(DeltaModel):
    """DeltaModel whose Delta matrix also carries the matched query word's IDF and its exact-match IDF."""

    def __init__(self, config: DeltaConfig, embeddings: np.ndarray, idf_of_row: np.ndarray) -> None:
        super().__init__(config, embeddings)
        self.register_buffer("idf_of_row", torch.as_tensor(idf_of_row / IDF_SCALE, dtype=torch.float32),
                             persistent=False)
        first = self.convs[0]
        self.convs[0] = nn.Conv1d(first.in_channels + 2, first.out_channels, config.kernel_width, padding="same")

    def forward(self, doc_ids: torch.Tensor, query_ids: torch.Tensor, lex: torch.Tensor | None = None) -> torch.Tensor:
        doc_mask, query_mask = doc_ids != PAD_ID, query_ids != PAD_ID  # [B, N], [B, M]
        doc, query = self.embeddings[doc_ids], self.embeddings[query_ids]  # [B, N, V], [B, M, V]
        y = delta_matrix(doc, query, doc_mask, query_mask, self.config)  # [B, N, C]
        distances = torch.cdist(doc, query).masked_fill(~query_mask[:, None, :], float("inf"))  # [B, N, M]
        nearest, closest = distances.min(dim=2)  # [B, N] each
        idf = torch.gather(self.idf_of_row[query_ids], 1, closest) * doc_mask  # [B, N]
        exact = idf * (nearest < 1e-5)  # [B, N]
        y = torch.cat([y, idf[:, :, None], exact[:, :, None]], dim=2).transpose(1, 2)  # [B, C + 2, N]
        mask = doc_mask[:, None, :].to(y.dtype)  # [B, 1, N]
        for conv in self.convs:
            y = F.leaky_relu(conv(y), self.config.leaky_slope) * mask  # [B, F, N]
        y = self.dropout(y)
        y = y.masked_fill(mask == 0, float("-inf")).amax(dim=2)  # [B, F]
        y = torch.where(torch.isinf(y), torch.zeros_like(y), y)
        y = torch.cat([y, (lex - self.lex_mean) / self.lex_std], dim=1)  # [B, F + L]
        for layer in self.dense:
            y = F.leaky_relu(layer(y), self.config.leaky_slope)
        return y[:, 0]  # [B]


def idf_per_row(work) -> np.ndarray:
    """float [embedding rows] the largest text IDF of the lexical terms that map to each row; PAD, UNK 0."""
    stats = work.backend.stats
    terms = list(stats.vocab.terms)
    rows = term_rows(embedding_tokens(terms), work.embeddings)
    # A word no indexed document holds has document frequency 0: BM25's largest IDF.
    idf = np.full(len(work.embeddings.vectors), np.log1p((stats.n_docs + 0.5) / 0.5))
    seen = np.zeros(len(idf), dtype=np.float64)
    np.maximum.at(seen, rows, stats.idf(np.arange(len(terms))))
    idf[np.unique(rows)] = seen[np.unique(rows)]
    idf[[PAD_ID, UNK]] = 0.0
    return idf


def main(seed: int, loss: str = "hinge") -> None:
    work = open_workspace(None)
    dev_qrels = work.nfcorpus.qrels("dev")
    train, dev = work.split_candidates("train", progress=False), work.split_candidates("dev", progress=False)
    config = DeltaConfig(lex_names=LEX3, embedding_dim=work.embeddings.vectors.shape[1])
    settings = replace(TrainConfig(), seed=seed, loss=loss)
    # The recipe's seeding and Lex standardisation, then the wider model in its place.
    base, _ = new_delta_model(config, work.embeddings.vectors, train, settings)
    model = IdfDeltaModel(config, work.embeddings.vectors, idf_per_row(work))
    model.lex_mean.copy_(base.lex_mean)
    model.lex_std.copy_(base.lex_std)
    optimizer = delta_optimizer(model, settings)

    def score_pairs(query_index: np.ndarray, doc_index: np.ndarray) -> torch.Tensor:
        docs, query_rows, lex = batch_inputs(train, work.doc_rows, query_index, doc_index)
        return model(torch.from_numpy(docs), torch.from_numpy(query_rows), torch.from_numpy(lex))

    def score_dev() -> list[np.ndarray]:
        out = []
        with torch.no_grad():
            for cand in dev:
                n = len(cand.stats_rows)
                queries = torch.from_numpy(np.repeat(cand.query_rows[None, :], n, axis=0))
                out.append(model(torch.from_numpy(work.doc_rows[cand.stats_rows]), queries,
                                 torch.from_numpy(cand.lex)).numpy())
        return out

    result = fit_pairwise(model, optimizer, train, score_pairs, score_dev, dev, dev_qrels, settings, progress=False)
    row = {"seed": seed, "loss": loss, "dev_per_epoch": [round(h["dev_ndcg20"], 4) for h in result.history],
           "best_epoch": result.best_epoch, "best_dev": round(result.best_dev, 4), "seconds": round(result.seconds)}
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), *sys.argv[2:3])
