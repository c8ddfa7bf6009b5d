"""Model inputs for training and evaluation: candidates per query, triples, batches.

Candidates come from the first stage (BM25 top-``depth`` through a search
backend), so training negatives and evaluation reranking see the same documents
as serving. Every document's first-50 embedding rows are computed once per corpus
(``DocumentRows``); per query only stats row indices and Lex features are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from tqdm import tqdm

from es_rerank.backends.base import SearchBackend, text_hits
from es_rerank.embeddings import Embeddings
from es_rerank.lex import lex_features
from es_rerank.payload import QUERY_LEN
from es_rerank.ranking.neighbours import relevant_judgments
from es_rerank.stats import FIRST_TOKENS, CorpusStats
from es_rerank.text import embedding_tokens, tokenize
from worker.inputs import query_rows, term_rows

NEGATIVE_SAMPLING = ("uniform", "rank")
# Non-relevant documents per relevant one in sample_groups; 16 did no better on dev (reports/experiments/listwise-loss).
SOFTMAX_NEGATIVES = 8


class DocumentRows:
    """[n_docs, N] embedding rows of every document's first N tokens, 0-padded."""

    def __init__(self, stats: CorpusStats, embeddings: Embeddings) -> None:
        rows_of_term = term_rows(stats.vocab.terms, embeddings)
        self.rows = np.zeros((stats.n_docs, FIRST_TOKENS), dtype=np.int32)
        lengths = np.diff(np.asarray(stats.first_ptr))
        positions = np.arange(len(stats.first_values)) - np.repeat(np.asarray(stats.first_ptr[:-1]), lengths)
        self.rows[np.repeat(np.arange(stats.n_docs), lengths), positions] = rows_of_term[np.asarray(stats.first_values)]

    def __getitem__(self, stats_rows: np.ndarray) -> np.ndarray:
        return self.rows[stats_rows].astype(np.int64)


class TrainingError(ValueError):
    """Training cannot go on (no triples, a loss that is not a number); the message names the cause."""


@dataclass
class QueryCandidates:
    """One query's candidate documents with everything the model and metrics need."""

    query_id: str
    query_rows: np.ndarray  # int64 [M]
    doc_ids: list[str]
    stats_rows: np.ndarray  # int64 [n] rows into CorpusStats / DocumentRows
    lex: np.ndarray  # float32 [n, L]
    bm25: np.ndarray  # float32 [n] first-stage score (0 for judged documents not retrieved)
    grades: np.ndarray  # int64 [n] relevance grade, 0 if unjudged


def build_candidates(
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    backend: SearchBackend,
    embeddings: Embeddings,
    lex_names: Sequence[str],
    depth: int = 500,
    add_judged: bool = False,
    progress: bool = True,
) -> list[QueryCandidates]:
    """Retrieve BM25 top-``depth`` per query; ``add_judged`` also adds unretrieved relevant docs (training)."""
    stats = backend.stats
    out = []
    for query_id in tqdm(sorted(queries), desc="candidates", unit="query", disable=not progress):
        text = queries[query_id]
        judged = qrels.get(query_id, {})
        hits = text_hits(backend, text, depth)  # the body a client sends for the words
        doc_ids = [h.doc_id for h in hits]
        terms = [h.terms for h in hits]
        bm25 = [h.score for h in hits]
        if add_judged:
            retrieved = set(doc_ids)
            for doc_id in sorted(set(relevant_judgments({query_id: judged}).get(query_id, {})) - retrieved):
                doc_ids.append(doc_id)
                terms.append(stats.doc_terms(stats.row(doc_id)))
                bm25.append(0.0)
        query_ids = stats.vocab.lookup(tokenize(text))
        out.append(
            QueryCandidates(
                query_id=query_id,
                query_rows=query_rows(embedding_tokens(tokenize(text)), embeddings, QUERY_LEN),
                doc_ids=doc_ids,
                stats_rows=np.asarray([stats.row(d) for d in doc_ids], dtype=np.int64),
                lex=lex_features(query_ids, terms, stats, lex_names),
                bm25=np.asarray(bm25, dtype=np.float32),
                grades=np.asarray([judged.get(d, 0) for d in doc_ids], dtype=np.int64),
            )
        )
    return out


def lex_statistics(candidates: Sequence[QueryCandidates]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation (floored at 1e-6) of the Lex features over all candidates."""
    lex = np.concatenate([c.lex for c in candidates])
    return lex.mean(axis=0), np.maximum(lex.std(axis=0), 1e-6)


def select_features(
    candidates: Sequence[QueryCandidates], available: Sequence[str], wanted: Sequence[str]
) -> list[QueryCandidates]:
    """The candidates (whose Lex columns are ``available``) with only the ``wanted`` features, in that order."""
    missing = [name for name in wanted if name not in available]
    if missing:
        raise ValueError(f"Lex feature(s) {missing} were not computed; the candidates carry {list(available)}")
    columns = [list(available).index(name) for name in wanted]
    return [replace(c, lex=c.lex[:, columns]) for c in candidates]


def scaled_relevance(grades: np.ndarray) -> np.ndarray:
    """srel of section 4.1: 0 if not relevant, else 1 + 99 * grade / sum of the query's grades."""
    total = grades[grades > 0].sum()
    return np.where(grades > 0, 1.0 + 99.0 * grades / max(total, 1), 0.0)


@dataclass
class Triples:
    """Training triples (Q, D+, D-) as indices into a candidate list, with loss weights."""

    query: np.ndarray  # int64 [T] index into the candidate list
    positive: np.ndarray  # int64 [T] index into that query's candidates
    negative: np.ndarray  # int64 [T]
    weight: np.ndarray  # float32 [T] sqrt(srel+ - srel-) (section 4.2.1)

    def as_groups(self) -> Groups:
        """The triples as groups of two: D+ then D-."""
        return Groups(self.query, np.stack([self.positive, self.negative], axis=1), self.weight)


@dataclass
class Groups:
    """Training groups (Q, D+, D-_1..D-_K) as indices into a candidate list, with loss weights."""

    query: np.ndarray  # int64 [G] index into the candidate list
    docs: np.ndarray  # int64 [G, 1 + K] index into that query's candidates, D+ first
    weight: np.ndarray  # float32 [G]


def sample_triples(
    candidates: Sequence[QueryCandidates],
    rng: np.random.Generator,
    max_positives: int | None = None,
    negatives: str = "uniform",
    negatives_per_positive: int = 1,
) -> Triples:
    """Balanced triples: relevant documents each meet one sampled less-relevant one per epoch.

    Per query, as many non-relevant documents (unjudged or grade 0 within the BM25
    top-``depth``) are drawn as there are relevant ones (section 4.2's balancing);
    each relevant document is paired with one of them and, where the query has
    graded levels, with one randomly chosen document of a lower non-zero grade.
    ``max_positives`` caps the relevant documents drawn per query and epoch (a
    fresh draw each epoch), so queries with hundreds of judgments do not dominate.
    ``negatives="uniform"`` draws them uniformly from the top-``depth``; ``"rank"``
    draws with probability proportional to 1 / (BM25 rank + 10), so the
    non-relevant documents that compete for the top of the list are seen more.
    ``negatives_per_positive`` > 1 pairs each relevant document with that many
    non-relevant ones per epoch (1 is the paper's balance).
    """
    _check_sampling(negatives)
    parts: list[tuple[np.ndarray, ...]] = []
    for qi, cand in enumerate(candidates):
        srel = scaled_relevance(cand.grades)
        sampled = _draw(cand, rng, max_positives, negatives, negatives_per_positive)
        if sampled is None:
            continue
        positives, drawn = sampled
        pos, neg = [np.repeat(positives, negatives_per_positive)], [rng.permutation(drawn)]
        for grade in np.unique(cand.grades[positives])[1:]:
            higher = positives[cand.grades[positives] == grade]
            lower = np.flatnonzero((cand.grades > 0) & (cand.grades < grade))
            pos.append(higher)
            neg.append(rng.choice(lower, size=len(higher)))
        p, n = np.concatenate(pos), np.concatenate(neg)
        parts.append((np.full(len(p), qi), p, n, np.sqrt(srel[p] - srel[n])))
    if not parts:
        raise TrainingError(
            "no training triples: no train query has a relevant document among its BM25 "
            "candidates; check qrels/train.tsv against queries.jsonl and the index"
        )
    q, p, n, w = (np.concatenate(column) for column in zip(*parts))
    order = rng.permutation(len(q))
    return Triples(q[order], p[order], n[order], w[order].astype(np.float32))


def sample_groups(
    candidates: Sequence[QueryCandidates],
    rng: np.random.Generator,
    max_positives: int | None = None,
    negatives: str = "uniform",
    negatives_per_positive: int = SOFTMAX_NEGATIVES,
) -> Groups:
    """Listwise groups: each relevant document with ``negatives_per_positive`` non-relevant ones of its query.

    Positives, the negative pool (unjudged or grade 0 within the BM25 top-``depth``),
    ``max_positives`` and ``negatives`` are as in ``sample_triples``; the weight is
    sqrt(srel+), the recipe's sqrt(srel+ - srel-) with srel- = 0.
    """
    _check_sampling(negatives)
    parts: list[tuple[np.ndarray, ...]] = []
    for qi, cand in enumerate(candidates):
        sampled = _draw(cand, rng, max_positives, negatives, negatives_per_positive)
        if sampled is None:
            continue
        positives, drawn = sampled
        docs = np.concatenate([positives[:, None], drawn.reshape(len(positives), negatives_per_positive)], axis=1)
        parts.append((np.full(len(positives), qi), docs, np.sqrt(scaled_relevance(cand.grades)[positives])))
    if not parts:
        raise TrainingError(
            "no training groups: no train query has a relevant document among its BM25 "
            "candidates; check qrels/train.tsv against queries.jsonl and the index"
        )
    q, d, w = (np.concatenate(column) for column in zip(*parts))
    order = rng.permutation(len(q))
    return Groups(q[order], d[order], w[order].astype(np.float32))


def _check_sampling(negatives: str) -> None:
    if negatives not in NEGATIVE_SAMPLING:
        raise ValueError(f"unknown negative sampling {negatives!r}; choose one of {NEGATIVE_SAMPLING}")


def _draw(
    cand: QueryCandidates, rng: np.random.Generator, max_positives: int | None, negatives: str, per_positive: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """A query's relevant documents (at most ``max_positives``) and ``per_positive`` non-relevant draws for each.

    None when the query has no relevant or no non-relevant candidate.
    """
    positives = np.flatnonzero(cand.grades > 0)
    if max_positives is not None and len(positives) > max_positives:
        positives = np.sort(rng.choice(positives, size=max_positives, replace=False))
    pool = np.flatnonzero((cand.grades == 0) & (cand.bm25 > 0))
    if len(positives) == 0 or len(pool) == 0:
        return None
    n_drawn = per_positive * len(positives)
    drawn = rng.choice(
        pool,
        size=n_drawn,
        replace=len(pool) < n_drawn,
        p=_rank_weights(cand.bm25, pool) if negatives == "rank" else None,
    )
    return positives, drawn


def _rank_weights(bm25: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Sampling probabilities of ``pool`` proportional to 1 / (BM25 rank + 10)."""
    ranks = np.empty(len(bm25), dtype=np.float64)
    ranks[np.argsort(-bm25, kind="stable")] = np.arange(len(bm25))
    weights = 1.0 / (ranks[pool] + 10.0)
    return weights / weights.sum()


def batch_inputs(
    candidates: Sequence[QueryCandidates], doc_rows: DocumentRows, query_index: np.ndarray, doc_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack (doc rows [B, N], query rows [B, M], lex [B, L]) for (query, candidate) pairs."""
    stats_rows = np.fromiter(
        (candidates[q].stats_rows[d] for q, d in zip(query_index, doc_index)), dtype=np.int64, count=len(query_index)
    )
    queries = np.stack([candidates[q].query_rows for q in query_index])
    lex = np.stack([candidates[q].lex[d] for q, d in zip(query_index, doc_index)])
    return doc_rows[stats_rows], queries, lex
