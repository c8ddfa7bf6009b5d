"""The dev evidence behind each transfer choice, on NFCorpus and its three shifted copies (dev queries only).

    python reports/experiments/transfer/choices.py > reports/transfer/dev/choices.md

Run after `run.sh dev` (which builds the shifted copies and the topic-disjoint home). For the
seed-13 paper and window models of each condition's home it measures, as nDCG@10 change
against BM25 with a paired t-test:

- the Lex features' scale: each window's mean feature in the model's training units
  ((mean - training mean) / training standard deviation), averaged over the queries, and the
  share of full windows (at least 100 documents) with a feature more than 1.5 units off
  (what the worker's scale check counts, worker/served_checks.py);
- which 7 query words the model reads: the paper's first 7, or the 7 distinct words of
  highest idf (in their order);
- the BM25 guard's weight: z(model) + w z(BM25), alone and with the candidate feedback;
- a per-query agreement test: does the Spearman correlation of model and BM25 scores over the
  window find the queries the model hurts (correlation of the two over queries, and the
  change if queries below a threshold kept BM25's order);
- the judged-neighbour votes' confidence exponent (0, 1, 2) over the served stages before them.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from ir_measures import nDCG
from scipy import stats

from es_rerank.backends.base import text_hits
from es_rerank.embeddings import load_current
from es_rerank.lex import KNOWN_FEATURES, WINDOW_SUFFIX
from es_rerank.ranking.assemble import served_pipeline
from es_rerank.ranking.feedback import FeedbackParams, document_vectors, with_feedback
from es_rerank.ranking.guard import guarded
from es_rerank.ranking.neighbours import fuse
from es_rerank.text import embedding_tokens, tokenize
from training.api import (
    DocumentRows,
    JudgedCollection,
    build_candidates,
    model_score_fn,
    per_query,
    run_from_scores,
    score_candidates,
    select_features,
)
from worker.inputs import query_rows
from worker.local import LocalReranker
from worker.model import Checkpoint
from worker.served_checks import MIN_WINDOW, SCALE_LIMIT
from worker.settings import WorkerSettings

HOME = Path("artifacts")
CONDITIONS = {
    "standard": (Path("../shared/data/nfcorpus"), HOME),
    "vid-desc": (HOME / "shifted" / "vid-desc", HOME),
    "no-titles": (HOME / "shifted" / "no-titles", HOME),
    "topic-disjoint": (HOME / "shifted" / "topic-disjoint", HOME / "topic-disjoint"),
}
MODELS = ("delta-32-lex3", "delta-32-lex3-window")
GUARD_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
CONFIDENCES = (0.0, 1.0, 2.0)
MEASURE = nDCG @ 10


def change(values: np.ndarray, base: np.ndarray) -> str:
    """Mean change against the baseline, in percent, with a paired t-test."""
    p = stats.ttest_rel(values, base).pvalue if np.any(values != base) else 1.0
    return f"{(values.mean() / base.mean() - 1) * 100:+.1f}% (p={p:.2g})"


def highest_idf_rows(text: str, stats_, embeddings) -> np.ndarray:
    """The rows of the query's 7 distinct words of highest idf (words the corpus lacks last), in query order."""
    tokens = tokenize(text)
    ids = stats_.vocab.lookup(tokens)
    idf = np.where(ids >= 0, stats_.idf(ids), -1.0)
    chosen, seen = [], set()
    for i in np.argsort(-idf, kind="stable"):
        if tokens[i] not in seen:
            seen.add(tokens[i])
            chosen.append(int(i))
    return query_rows(embedding_tokens([tokens[i] for i in sorted(chosen[:7])]), embeddings, 7)


def condition_lines(name: str, data: Path, home: Path) -> list[str]:
    """Every measurement of one condition, as markdown lines."""
    settings = WorkerSettings(home=home, checkpoint=())
    embeddings = load_current(settings)
    collection = JudgedCollection.locate(data, "dev")
    backend, _ = collection.backend(settings, progress=False)
    rows = DocumentRows(backend.stats, embeddings)
    checkpoints = {m: Checkpoint.load(settings.models_dir / f"{m}.pt") for m in MODELS}
    names = [f for f in KNOWN_FEATURES if any(f in c.config.lex_names for c in checkpoints.values())]
    candidates = [
        c
        for c in build_candidates(collection.queries, collection.qrels, backend, embeddings, names, progress=False)
        if len(c.doc_ids)
    ]
    judged = {c.query_id: collection.qrels[c.query_id] for c in candidates}
    vectors = [
        document_vectors([backend.stats.doc_terms(int(r)) for r in c.stats_rows], backend.stats) for c in candidates
    ]
    feedback = FeedbackParams.from_settings(settings)

    def ndcg(scores: list[np.ndarray]) -> np.ndarray:
        values = per_query(MEASURE, judged, run_from_scores(candidates, scores))
        return np.array([values[c.query_id] for c in candidates])

    bm25 = ndcg([c.bm25 for c in candidates])
    lines = [f"### {name} (dev, {len(candidates)} queries with hits; BM25 {bm25.mean():.4f})", ""]
    lines += ["| model | measure | result |", "|---|---|---|"]
    for model, checkpoint in checkpoints.items():
        mine = select_features(candidates, names, checkpoint.config.lex_names)
        mean = checkpoint.state_dict["lex_mean"].numpy()
        std = checkpoint.state_dict["lex_std"].numpy()
        per_window = np.array([(c.lex.mean(axis=0) - mean) / std for c in mine])
        scale = ", ".join(f"{f} {u:+.2f}" for f, u in zip(checkpoint.config.lex_names, per_window.mean(axis=0)))
        full = np.array([len(c.doc_ids) >= MIN_WINDOW for c in mine])
        paper_scale = [j for j, f in enumerate(checkpoint.config.lex_names) if not f.endswith(WINDOW_SUFFIX)]
        drifting = (np.abs(per_window[full][:, paper_scale]).max(axis=1) > SCALE_LIMIT).mean() if paper_scale else 0.0
        lines.append(
            f"| {model} | window mean feature, training units; full windows past {SCALE_LIMIT:g} | {scale}; "
            f"{drifting:.0%} of {full.sum()} |"
        )
        score = model_score_fn(checkpoint.build_model(embeddings.vectors))
        model_scores = score_candidates(score, mine, rows)
        alone = ndcg(model_scores)
        lines.append(f"| {model} | query words: first 7 (paper) | {change(alone, bm25)} |")
        idf_first = [
            replace(c, query_rows=highest_idf_rows(collection.queries[c.query_id], backend.stats, embeddings))
            for c in mine
        ]
        lines.append(
            f"| {model} | query words: 7 of highest idf | "
            f"{change(ndcg(score_candidates(score, idf_first, rows)), bm25)} |"
        )
        for weight in GUARD_WEIGHTS:
            blended = [guarded(s, c.bm25, weight) for s, c in zip(model_scores, candidates)]
            fed = [with_feedback(s, v, feedback) for s, v in zip(blended, vectors)]
            lines.append(
                f"| {model} | BM25 guard {weight:g}: alone; with feedback | {change(ndcg(blended), bm25)}; "
                f"{change(ndcg(fed), bm25)} |"
            )
        rho = np.array(
            [stats.spearmanr(s, c.bm25).statistic if len(s) > 2 else 1.0 for s, c in zip(model_scores, candidates)]
        )
        rho = np.nan_to_num(rho, nan=1.0)
        gain = alone - bm25
        agreement = stats.spearmanr(gain, rho).statistic
        tests = "; ".join(
            f"below {tau:g}: {(rho < tau).sum()} queries, {change(np.where(rho < tau, bm25, alone), bm25)}"
            for tau in (0.3, 0.5)
        )
        lines.append(
            f"| {model} | agreement test: correlation of gain and Spearman(model, BM25) {agreement:+.2f} "
            f"| BM25's order {tests} |"
        )
    lines += ["", *vote_lines(settings, collection, backend, bm25, candidates), ""]
    return lines


def vote_lines(
    settings: WorkerSettings, collection: JudgedCollection, backend, bm25: np.ndarray, candidates
) -> list[str]:
    """The served stages (the window model, guard, feedback) with votes of each confidence exponent."""
    pipeline = served_pipeline(settings, 500, backend=backend, local_reranker=lambda: LocalReranker(settings))
    if pipeline.neighbours is None:
        return ["(no votes file in this home)"]
    runs: dict[float, dict[str, dict[str, float]]] = {c: {} for c in CONFIDENCES}
    try:
        for candidate in candidates:
            text = collection.queries[candidate.query_id]
            window = text_hits(backend, text, 500)
            scored = pipeline.score_window(text, window, backend.stats)
            before = scored.stages[-2][1] if scored.skipped is None else scored.stages[-1][1]
            doc_ids = [h.doc_id for h in window]
            for confidence in CONFIDENCES:
                votes = copy.copy(pipeline.neighbours)
                votes.params = replace(votes.params, confidence=confidence)
                fused = fuse(before, votes.scores(text, doc_ids), votes.params.weight)
                runs[confidence][candidate.query_id] = dict(zip(doc_ids, map(float, fused)))
    finally:
        pipeline.reranker.close()
    judged = {c.query_id: collection.qrels[c.query_id] for c in candidates}
    out = [f"Served stages of {settings.checkpoint_path.name} + judged-neighbour votes, by confidence exponent: "]
    for confidence, run in runs.items():
        values = per_query(MEASURE, judged, run)
        out.append(f"{confidence:g}: {change(np.array([values[c.query_id] for c in candidates]), bm25)}; ")
    return ["".join(out)]


def main() -> None:
    """Print the markdown of every condition."""
    torch.set_num_threads(1)
    print(
        "nDCG@10 change against BM25 on the dev queries, paired t-test; "
        "`python reports/experiments/transfer/choices.py`.\n"
    )
    for name, (data, home) in CONDITIONS.items():
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        print("\n".join(condition_lines(name, data, home)), flush=True)


if __name__ == "__main__":
    main()
