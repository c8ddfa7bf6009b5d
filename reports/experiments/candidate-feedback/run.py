"""Dev-only: do the candidates' own texts, with no judgments, add to a ranker's order?

    ESRR_HOME=artifacts python reports/experiments/candidate-feedback/run.py [CHECKPOINT ...]

Pseudo-relevance feedback within one query's BM25 top-500 (the cluster hypothesis: the
relevant documents of a topic resemble each other more than they resemble the rest):

    score(d) = z(base)(d) + beta * z(feedback)(d)      z: standardised within the query

tfidf is (1 + log tf) * idf over title + abstract, L2-normalised, so it reads the whole
abstract, where the Delta stage reads the first 50 tokens; the grid keeps every term of a
document, then the adopted point is rerun with each document cut to its heaviest T terms
(what is served: T = 50). Three kinds of vector and use:

    sparse     the tfidf vector, feedback from the centroid of the top-k;
    dense      the idf-weighted mean of the word2vec vectors of title + abstract (unit
               length; UNK words left out), feedback from the centroid of the top-k;
    neighbours each candidate's own k nearest candidates by tfidf cosine vote with their
               z(base), weighted by that cosine: no single top-k, so a relevant document
               the base ranker put low can still be lifted by relevant neighbours
               (es_rerank/ranking/feedback.py, the one adopted);
    neighbours_over_k  the same votes divided by k instead of by the neighbours' summed
               cosine, so that weak neighbours vote weakly (a reviewer's suggestion).

The base rankers are BM25, every checkpoint given and, with more than one, their
ensemble; ``-`` alone gives BM25 only. Writes every row to ``results.jsonl`` beside this
file (kinds sparse/dense/neighbours/neighbours_over_k: the grid; terms: the cut; votes: each base with the
judged-neighbour votes, without and with the adopted feedback) and prints each base's
best point and the points best on average over the models. Test is never read.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import sparse

from es_rerank.embeddings import UNK
from es_rerank.ranking.feedback import (
    TERMS_PER_DOCUMENT,
    FeedbackParams,
    document_vectors,
    nearest_hits,
    neighbour_votes,
    with_feedback,
)
from es_rerank.ranking.neighbours import JudgedNeighbours, fuse, standardised
from es_rerank.stats import CorpusStats
from worker.ensemble import ensemble_scores
from worker.inputs import term_rows
from worker.model import Checkpoint
from worker.training.cli import open_workspace
from worker.training.data import QueryCandidates
from worker.training.metrics import PAPER_NDCG20, mean_metric
from worker.training.train import model_score_fn, score_candidates

HERE = Path(__file__).parent
TOP_K = (3, 5, 10, 20, 50)
BETAS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
KINDS = ("sparse", "dense", "neighbours", "neighbours_over_k")


def dense_rows(
    stats: CorpusStats, rows: np.ndarray, idf: np.ndarray, term_vectors: np.ndarray, known: np.ndarray
) -> np.ndarray:
    """[n, dim] idf-weighted mean word vector of title + abstract, unit length (UNK words left out)."""
    out = np.zeros((len(rows), term_vectors.shape[1]), dtype=np.float32)
    for i, row in enumerate(rows):
        terms = stats.doc_terms(int(row))
        ids = np.concatenate([terms.title_ids, terms.abstract_ids])
        ids = ids[known[ids]]
        if len(ids):
            mean = (idf[ids, None] * term_vectors[ids]).sum(axis=0)
            out[i] = mean / max(np.linalg.norm(mean), 1e-9)
    return out


def votes_over_k(vectors: sparse.csr_matrix, base: np.ndarray, k: int) -> np.ndarray:
    """Like ``neighbour_votes`` but divided by k, not the neighbours' summed cosine: weak neighbours vote weakly."""
    nearest, cosines = nearest_hits(vectors, k)
    return (cosines * standardised(base)[nearest]).sum(axis=1) / max(nearest.shape[1], 1)


def feedback(vectors: sparse.csr_matrix, base: np.ndarray, k: int) -> np.ndarray:
    """Cosine of every candidate to the centroid of the base ranker's top-k."""
    if vectors.shape[0] == 0:
        return np.zeros(0)
    top = np.argsort(-base, kind="stable")[:k]
    centroid = np.asarray(vectors[top].mean(axis=0)).ravel()
    norm = np.linalg.norm(centroid)
    return np.asarray(vectors @ (centroid / norm)).ravel() if norm > 0 else np.zeros(vectors.shape[0])


def rows_for(
    name: str, base: list[np.ndarray], vectors: dict[str, list], qrels: dict, dev: list[QueryCandidates]
) -> list[dict]:
    """The grid of (kind, k, beta) for one base ranker."""
    out = []
    for kind in KINDS:
        for k in TOP_K:
            if kind == "neighbours":
                fb = [neighbour_votes(v, b, k) for v, b in zip(vectors["sparse"], base)]
            elif kind == "neighbours_over_k":
                fb = [votes_over_k(v, b, k) for v, b in zip(vectors["sparse"], base)]
            else:
                fb = [feedback(v, b, k) for v, b in zip(vectors[kind], base)]
            for beta in BETAS:
                fused = [(standardised(b) + beta * standardised(f)).astype(np.float32) for b, f in zip(base, fb)]
                out.append(
                    {
                        "base": name,
                        "kind": kind,
                        "k": k,
                        "beta": beta,
                        "dev_ndcg20": round(mean_metric(PAPER_NDCG20, qrels, dev, fused), 4),
                    }
                )
    return out


def window_vectors(stats: CorpusStats, dev: list[QueryCandidates], terms: int = TERMS_PER_DOCUMENT) -> list:
    """Each dev window's ``document_vectors``, as ``esrr search`` and ``esrr eval`` build them."""
    return [document_vectors([stats.doc_terms(int(r)) for r in c.stats_rows], stats, terms) for c in dev]


def terms_rows(
    stats: CorpusStats,
    dev: list[QueryCandidates],
    qrels: dict,
    bases: dict[str, list[np.ndarray]],
    params: FeedbackParams,
) -> list[dict]:
    """The served feedback (k, weight) with each document's vector cut to its heaviest T terms, and its times.

    window_vectors_ms: document_vectors of one dev window, mean; ms_per_query: votes and fusion.
    """
    out = []
    for terms in (len(stats.vocab), 50, 30, 20, 10):
        start = time.perf_counter()
        hits = window_vectors(stats, dev, terms)
        window_ms = 1000 * (time.perf_counter() - start) / len(dev)
        for name, base in bases.items():
            start = time.perf_counter()
            fed = [with_feedback(b, h, params) for b, h in zip(base, hits)]
            ms = 1000 * (time.perf_counter() - start) / len(dev)
            out.append(
                {
                    "base": name,
                    "kind": "terms",
                    "terms_per_document": terms,
                    "ms_per_query": round(ms, 2),
                    "window_vectors_ms": round(window_ms, 2),
                    "dev_ndcg20": round(mean_metric(PAPER_NDCG20, qrels, dev, fed), 4),
                }
            )
            print(out[-1])
    return out


def print_choice(rows: list[dict], model_bases: list[str]) -> None:
    """The (kind, k, beta) points with the best mean over the model bases (the served default's choice)."""
    points = {}
    for row in rows:
        if row["base"] in model_bases and row["kind"] in KINDS:
            points.setdefault((row["kind"], row["k"], row["beta"]), []).append(row["dev_ndcg20"])
    means = sorted(((float(np.mean(v)), point) for point, v in points.items()), reverse=True)
    for mean, point in means[:8]:
        print(f"mean over {len(model_bases)} model bases {mean:.4f} at kind, k, beta = {point}")


def with_votes_rows(work, dev: list[QueryCandidates], bases: dict[str, list[np.ndarray]]) -> list[dict]:
    """Dev NDCG@20 of each base fused with the judged-neighbour votes, without and with the served feedback."""
    path = work.settings.neighbours_path
    if not path.is_file():
        print(f"no votes at {path}: build them with `esrr neighbours build` to compare with votes")
        return []
    out = []
    neighbours = JudgedNeighbours.load(path)
    queries, qrels = work.nfcorpus.queries("dev"), work.nfcorpus.qrels("dev")
    params = work.settings.feedback
    votes = [neighbours.scores(queries[c.query_id], c.doc_ids) for c in dev]
    hits = window_vectors(work.backend.stats, dev)
    for name, base in bases.items():
        plain = [fuse(b, v, neighbours.params.weight) for b, v in zip(base, votes)]
        fed = [fuse(with_feedback(b, h, params), v, neighbours.params.weight) for b, h, v in zip(base, hits, votes)]
        out.append(
            {
                "base": name,
                "kind": "votes",
                "votes_dev_ndcg20": round(mean_metric(PAPER_NDCG20, qrels, dev, plain), 4),
                "feedback_then_votes_dev_ndcg20": round(mean_metric(PAPER_NDCG20, qrels, dev, fed), 4),
            }
        )
        print(out[-1])
    return out


def main(checkpoints: list[Path]) -> None:
    work = open_workspace(None)
    dev_qrels = work.nfcorpus.qrels("dev")
    dev = work.split_candidates("dev", progress=False)
    stats = work.backend.stats
    idf = stats.idf(np.arange(len(stats.vocab)))
    rows_of_term = term_rows(stats.vocab.terms, work.embeddings)
    term_vectors = np.asarray(work.embeddings.vectors, dtype=np.float32)[rows_of_term]
    known = rows_of_term > UNK
    vectors = {
        "sparse": window_vectors(stats, dev, terms=len(stats.vocab)),
        "dense": [dense_rows(stats, c.stats_rows, idf, term_vectors, known) for c in dev],
    }
    bases = {"BM25": [c.bm25 for c in dev]}
    models = {}
    for path in checkpoints if checkpoints != [Path("-")] else []:
        model = Checkpoint.load(path).build_model(work.embeddings.vectors)
        models[path.stem] = score_candidates(model_score_fn(model), dev, work.doc_rows)
    bases.update(models)
    if len(models) > 1:
        bases["ensemble"] = ensemble_scores(list(models.values()))
    rows = []
    for name, base in bases.items():
        rows += rows_for(name, base, vectors, dev_qrels, dev)
    rows += terms_rows(work.backend.stats, dev, dev_qrels, bases, work.settings.feedback)
    print_choice(rows, [name for name in bases if name != "BM25"])
    rows += with_votes_rows(work, dev, bases)
    with (HERE / "results.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    for name in bases:
        for kind in KINDS:
            mine = [r for r in rows if r["base"] == name and r["kind"] == kind]
            plain = next(r for r in mine if r["beta"] == 0.0)
            best = max(mine, key=lambda r: r["dev_ndcg20"])
            print(
                f"{name} {kind}: alone {plain['dev_ndcg20']}, best k={best['k']} beta={best['beta']}: "
                f"{best['dev_ndcg20']}"
            )


if __name__ == "__main__":
    main([Path(arg) for arg in sys.argv[1:]])
