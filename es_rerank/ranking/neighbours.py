"""Judged neighbours: documents judged relevant for the training queries most like a query.

A query-to-query nearest-neighbour vote over relevance judgments, the offline
counterpart of "what did users pick for similar searches" in a search log. It is
not textual relevance (the Delta model's job) but a second, independent signal:
NutritionFacts pages on related topics cite the same studies, and so do the
judgments of their queries. Written by hand because it is a few lines of sparse
arithmetic over ~2,600 short queries; an ANN or vector library would add a
dependency for nothing.

Similarity is the cosine of IDF-weighted query-term sets (IDF over the training
queries, our tokenizer); a document's score is the sum over the ``k`` most similar
training queries of ``similarity ** power * grade``, divided by the query's
largest score, then scaled by the similarity of the nearest training query to the power
``confidence``, so it lies in [0, 1] and is only as strong as the best match: a query whose
nearest training query shares only a common word gets weak votes, where the per-query
scaling alone would give its top document a full vote (on a topic-disjoint split of NFCorpus
those votes cost the served default 1.7 points of nDCG@10 on dev; docs/quality.md).

Judgments name documents by id, so votes mean something only over the corpus they were
made for: the file records that corpus (``CorpusIdentity``: its number of documents, a
digest of its document ids, and the index build it was checked against), and
``JudgedNeighbours.mismatch`` says why it does not belong to a served index (another
corpus, or a file written before the record existed), in which case the pipeline does
not apply it. Ids alone are no proof: another collection may reuse ids like "MED-123".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from es_rerank.lex import standardised  # re-exported: the guard, the feedback and ensembles import it from here
from es_rerank.ranking.ranker_name import Refinement
from es_rerank.settings import MAX_VOTE_WEIGHT
from es_rerank.stats import CorpusStats
from es_rerank.text import tokenize

log = logging.getLogger(__name__)

FUSED_ROW_SUFFIX = Refinement.NEIGHBOURS.suffix  # how search output and eval rows name a ranker fused with the votes
PARAM_NAMES = ("k", "power", "weight", "confidence")
OPTIONAL_PARAMS = {"confidence": 0.0}  # files written before it: the votes as they were then


class NeighboursError(ValueError):
    """A judged-neighbours file cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class NeighbourParams:
    """Voters (k), the similarity exponent of a vote, the vote's weight beside the ranker (``fuse``), and the
    exponent of the nearest training query's similarity that scales a query's votes (0: no scaling)."""

    # Chosen on NFCorpus dev (reports/experiments/judged-neighbours/): the best point for
    # Delta-32-Lex3, inside a plateau (k 20-100, power 3-4, weight 4-6) within 0.003 of it.
    k: int = 50
    power: float = 3.0
    weight: float = 6.0
    # Chosen on dev under shift (docs/quality.md): of 0, 1 and 2, the best worst-case gain over NFCorpus
    # and its vid-desc, no-titles and topic-disjoint copies.
    confidence: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise NeighboursError(f"k must be a whole number of at least 1, got {self.k!r}")
        for name in ("power", "weight"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value > 0)
            ):
                raise NeighboursError(f"{name} must be a positive number, got {value!r}")
        if self.weight > MAX_VOTE_WEIGHT:
            raise NeighboursError(
                f"weight must be at most {MAX_VOTE_WEIGHT:g}, got {self.weight!r}: beyond it the "
                "votes alone decide the order"
            )
        value = self.confidence
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise NeighboursError(f"confidence must be a number of at least 0, got {value!r}")


def relevant_judgments(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Query id -> its judgments of relevant documents (grade above 0); queries judging none relevant are left out.

    The one relevance threshold of the package: graded judgments name non-relevant documents with 0.
    """
    relevant = {q: {d: g for d, g in docs.items() if g > 0} for q, docs in qrels.items()}
    return {q: docs for q, docs in relevant.items() if docs}


def doc_ids_digest(doc_ids: Sequence[str]) -> str:
    """sha256 of the sorted document ids, one per line: the same set of ids in any order gives the same digest."""
    digest = hashlib.sha256()
    for doc_id in sorted(doc_ids):
        digest.update(doc_id.encode("utf-8") + b"\n")
    return digest.hexdigest()


@dataclass(frozen=True)
class CorpusIdentity:
    """Which corpus a votes file was built for: its size, its ids' digest, and the index build checked."""

    n_docs: int
    doc_ids_sha256: str
    index_version: str = ""
    build_id: str = ""

    @classmethod
    def of(cls, stats: CorpusStats) -> CorpusIdentity:
        """The identity of the corpus that ``stats`` describe."""
        return cls(stats.n_docs, doc_ids_digest(stats.doc_ids), stats.version, stats.build_id)

    def mismatch(self, stats: CorpusStats) -> str | None:
        """Why ``stats`` describe another corpus (None: the same documents, whichever build)."""
        if self.build_id and self.build_id == stats.build_id:
            return None
        # Counted first: a digest of a large index's ids is only worth computing when the sizes agree.
        if stats.n_docs == self.n_docs and doc_ids_digest(stats.doc_ids) == self.doc_ids_sha256:
            return None
        other = "other document ids" if stats.n_docs == self.n_docs else f"{stats.n_docs} documents"
        return (
            f"built for another corpus ({self.n_docs} documents, index {self.index_version or 'unnamed'}); the "
            f"served index {stats.version} holds {other}"
        )


class JudgedNeighbours:
    """Training queries with their judged documents, and the vote of the most similar ones."""

    def __init__(
        self,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        params: NeighbourParams = NeighbourParams(),
        corpus: CorpusIdentity | None = None,
    ) -> None:
        self.params = params
        self.corpus = corpus
        self._mismatches: dict[str, str | None] = {}  # build id -> mismatch, a few builds at most
        self._mismatch_lock = threading.Lock()
        self.judged = relevant_judgments({q: qrels[q] for q in queries if q in qrels})
        self.query_ids = sorted(self.judged)
        self.texts = {q: queries[q] for q in self.query_ids}
        terms = [set(tokenize(self.texts[q])) for q in self.query_ids]
        document_frequency = Counter(t for ts in terms for t in ts)
        self.idf = {t: math.log(len(terms) / df) for t, df in document_frequency.items()}
        # term -> [(training query index, normalised weight)]: the similarity is a sparse dot product
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for index, ts in enumerate(terms):
            weights = self._weights(ts)
            for term, weight in weights.items():
                self.postings[term].append((index, weight))
        # The same as arrays, so that a search adds them up in numpy (in the same order, to the same bits).
        self._posting_arrays = {
            term: (np.array([i for i, _ in found], dtype=np.intp), np.array([w for _, w in found], dtype=np.float64))
            for term, found in self.postings.items()
        }
        self._documents = sorted({doc_id for docs in self.judged.values() for doc_id in docs})
        self._document_row = {doc_id: row for row, doc_id in enumerate(self._documents)}
        self._judged_rows = [
            np.array([self._document_row[d] for d in self.judged[q]], dtype=np.intp) for q in self.query_ids
        ]
        self._judged_grades = [np.array(list(self.judged[q].values()), dtype=np.float64) for q in self.query_ids]

    def _weights(self, terms: set[str]) -> dict[str, float]:
        raw = {t: self.idf[t] for t in terms if self.idf.get(t, 0.0) > 0}
        norm = math.sqrt(sum(w * w for w in raw.values())) or 1.0
        return {t: w / norm for t, w in raw.items()}

    def similar(self, text: str, exclude: str | None = None) -> list[tuple[str, float]]:
        """The ``k`` training queries most similar to ``text`` (never ``exclude``), best first."""
        return [(self.query_ids[i], s) for i, s in self._similar(text, exclude)]

    def _similar(self, text: str, exclude: str | None) -> list[tuple[int, float]]:
        """``similar`` as training query indices."""
        indices, products = [], []
        for term, weight in self._weights(set(tokenize(text))).items():
            found = self._posting_arrays.get(term)
            if found is not None:
                indices.append(found[0])
                products.append(weight * found[1])
        if not indices:
            return []
        touched = np.concatenate(indices)
        # bincount adds in the order given, term after term: the sums a loop over the postings makes.
        similarity = np.bincount(touched, weights=np.concatenate(products), minlength=len(self.query_ids))
        candidates = np.unique(touched)
        if exclude is not None and exclude in self.texts:
            candidates = candidates[candidates != self.query_ids.index(exclude)]
        best = candidates[np.lexsort((candidates, -similarity[candidates]))][: self.params.k]
        return [(int(i), float(similarity[i])) for i in best]

    def scores(self, text: str, doc_ids: Sequence[str], exclude: str | None = None) -> np.ndarray:
        """float32 [n] vote for each of ``doc_ids``, in [0, 1]; ``exclude`` leaves a training query out."""
        voters = self._similar(text, exclude)
        if not voters:
            return np.zeros(len(doc_ids), dtype=np.float32)
        # Each voter's judged documents weighted by its similarity, added up in voter order (as a loop would).
        rows = np.concatenate([self._judged_rows[i] for i, _ in voters])
        weights = np.concatenate([similarity**self.params.power * self._judged_grades[i] for i, similarity in voters])
        votes = np.bincount(rows, weights=weights, minlength=len(self._documents))
        top = float(votes.max())
        where = np.fromiter((self._document_row.get(d, -1) for d in doc_ids), dtype=np.intp, count=len(doc_ids))
        out = np.where(where >= 0, votes[where], 0.0)
        if top <= 0:
            return out.astype(np.float32)
        nearest = min(voters[0][1], 1.0)  # a cosine; rounding may pass 1 by an ulp
        return (out / top * nearest**self.params.confidence).astype(np.float32)

    def mismatch(self, stats: CorpusStats) -> str | None:
        """Why these votes must not be applied to the index ``stats`` describe (None: they belong to it).

        Cached per index build: a served index is checked once, and again after a reindex.
        """
        with self._mismatch_lock:
            if stats.build_id in self._mismatches:
                return self._mismatches[stats.build_id]
        problem: str | None
        if self.corpus is None:
            problem = (
                "the votes file does not say which corpus it was built for (written before votes recorded "
                "it); rebuild it with `esrr neighbours build`"
            )
        else:
            problem = self.corpus.mismatch(stats)
            if problem is not None:
                problem += "; build votes from this corpus's judgments with `esrr neighbours build --data DIR`"
        if problem is not None:  # once per index build and process
            log.warning("judged neighbours not applied to index %s: %s", stats.version, problem)
        with self._mismatch_lock:
            if len(self._mismatches) >= 8:
                self._mismatches.clear()
            self._mismatches[stats.build_id] = problem
        return problem

    def judged_documents(self) -> set[str]:
        """Every document some training query judges relevant."""
        return {doc_id for docs in self.judged.values() for doc_id in docs}

    def save(self, path: Path) -> None:
        """Write the training queries, judgments, parameters and the corpus they belong to as JSON (atomically)."""
        payload = {
            "kind": "judged-neighbours",
            "params": asdict(self.params),
            "queries": self.texts,
            "qrels": self.judged,
            **({"corpus": asdict(self.corpus)} if self.corpus is not None else {}),
        }
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path) -> JudgedNeighbours:
        """Read a file written by ``save``; a damaged one is a NeighboursError naming the fix."""
        fix = "rebuild it with `esrr neighbours build`"
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise NeighboursError(f"{path} cannot be read as judged neighbours ({error}); {fix}") from None
        if not isinstance(payload, dict) or payload.get("kind") != "judged-neighbours":
            raise NeighboursError(f"{path} is not a judged-neighbours file; {fix}")
        try:
            params, queries, qrels = payload["params"], payload["queries"], payload["qrels"]
            _check_saved(params, queries, qrels)
            corpus = _saved_corpus(payload.get("corpus"))
            return cls(queries, qrels, NeighbourParams(**{**OPTIONAL_PARAMS, **params}), corpus)
        except (NeighboursError, KeyError, TypeError) as error:
            raise NeighboursError(f"{path} holds damaged judged neighbours ({error}); {fix}") from None


def _check_saved(params: object, queries: object, qrels: object) -> None:
    """Raise TypeError unless the saved parts have the types ``save`` writes (JSON allows any)."""
    required = [name for name in PARAM_NAMES if name not in OPTIONAL_PARAMS]
    if not isinstance(params, dict) or not set(required) <= set(params) <= set(PARAM_NAMES):
        raise TypeError(f"params must hold {', '.join(required)} (and may hold {', '.join(OPTIONAL_PARAMS)})")
    if not isinstance(queries, dict) or not all(isinstance(t, str) for t in queries.values()):
        raise TypeError("queries must map query ids to texts")
    if not isinstance(qrels, dict) or not all(_whole_grades(docs) for docs in qrels.values()):
        raise TypeError("qrels must map query ids to {document id: whole grade from 0 to 2**53}")


def _saved_corpus(corpus: object) -> CorpusIdentity | None:
    """The recorded corpus (None in files written before it was recorded); TypeError if malformed."""
    if corpus is None:
        return None
    fields = ("n_docs", "doc_ids_sha256", "index_version", "build_id")
    if (
        not isinstance(corpus, dict)
        or sorted(corpus) != sorted(fields)
        or type(corpus["n_docs"]) is not int
        or not all(isinstance(corpus[name], str) for name in fields[1:])
    ):
        raise TypeError(f"corpus must hold exactly {', '.join(fields)}")
    return CorpusIdentity(**corpus)


def _whole_grades(docs: object) -> bool:
    # bool is no grade; below 2**53 a grade is exactly a float, so votes stay finite
    return isinstance(docs, dict) and all(type(g) is int and 0 <= g < 2**53 for g in docs.values())


def fuse(scores: np.ndarray, votes: np.ndarray, weight: float) -> np.ndarray:
    """One query's ranking scores standardised within the query, plus ``weight`` times the neighbour votes."""
    scores, votes = np.asarray(scores, dtype=np.float64), np.asarray(votes, dtype=np.float64)
    if scores.shape != votes.shape or scores.ndim != 1:
        raise ValueError(f"one vote per score expected, got scores {scores.shape} and votes {votes.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite numbers to be fused with votes")
    return (standardised(scores) + weight * votes).astype(np.float32)
