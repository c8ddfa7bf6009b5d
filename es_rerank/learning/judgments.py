"""Graded judgments from a fitted click model, with the evidence each rests on, and the votes built from them.

A (query, document) pair's grade comes from its attractiveness (the click model's estimate
of P(click | examined)) against the mean attractiveness of every shown result, ``mean``:

- grade 2 from two thirds of the way from the mean to certainty, ``mean + 2 (1 - mean) / 3``;
- grade 1 above a third of the way, ``mean + (1 - mean) / 3``;
- grade 0 (judged not relevant) otherwise.

So a document people click clearly more often than the average result they look at is
relevant, whatever the site's overall click rate. Thirds, not the mean itself: on NFCorpus
dev (never test), with votes learned from ~9,400 informational sessions, nDCG@10 was 0.2790 with
the mean and halfway as thresholds, 0.2841 with thirds (0.2835 to 0.2849 with thresholds near
them), 0.2820 and 0.2781 with stricter ones; at 20,000 sessions the mean and thirds tie
(docs/learning.md). Early on, the mean lets one lucky click of a non-relevant result count. The two
thresholds can be set instead. A pair is judged only when it rests on at least
``min_sessions`` sessions; a grade above 0 also needs ``min_clicks`` clicks. Queries are
their texts (the events carry no query id); a click query is named ``click-`` and 12 hex digits of
its text's SHA-256, or, combined with judgments made by people (qrels), by the id of
the judged query with the same text, its grade being the higher of the two.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from es_rerank.learning.click_model import FittedClickModel
from es_rerank.learning.clicklog import ClickLog


@dataclass(frozen=True)
class GradeRule:
    """When a pair is judged and with which grade; thresholds of None are taken from the mean attractiveness."""

    min_sessions: int = 1
    min_clicks: int = 1
    grade_1: float | None = None
    grade_2: float | None = None

    def thresholds(self, mean: float) -> tuple[float, float]:
        """The attractiveness above which a pair is grade 1, and at or above which it is grade 2."""
        one = mean + (1.0 - mean) / 3.0 if self.grade_1 is None else self.grade_1
        two = one + (1.0 - one) / 2.0 if self.grade_2 is None else self.grade_2
        return one, max(two, one)


@dataclass(frozen=True)
class ClickJudgments:
    """Judged pairs (parallel arrays) and what they rest on; ``query``/``doc`` index the log's texts and ids."""

    query: np.ndarray
    doc: np.ndarray
    grade: np.ndarray
    attractiveness: np.ndarray
    sessions: np.ndarray
    impressions: np.ndarray
    clicks: np.ndarray
    examinations: np.ndarray  # expected: the examination probabilities of the places it was shown at, summed
    mean_attractiveness: float
    thresholds: tuple[float, float]


def judge(log: ClickLog, model: FittedClickModel, rule: GradeRule = GradeRule()) -> ClickJudgments:
    """The pairs of ``log`` that rest on enough sessions, graded by ``model``'s attractiveness under ``rule``."""
    n_pairs = len(log.pair_query)
    impressions = np.bincount(log.pair, minlength=n_pairs)
    clicks = np.bincount(log.pair, weights=log.clicked, minlength=n_pairs).astype(np.int64)
    examinations = np.bincount(log.pair, weights=model.examination[model.classes], minlength=n_pairs)
    sessions = _distinct_per(log.pair, log.session, n_pairs)
    alpha = model.attractiveness
    mean = float(alpha[log.pair].mean()) if len(log.pair) else 0.0
    one, two = rule.thresholds(mean)
    grade = np.where(alpha >= two, 2, np.where(alpha > one, 1, 0))
    grade = np.where(clicks >= rule.min_clicks, grade, 0)
    keep = sessions >= rule.min_sessions
    return ClickJudgments(
        log.pair_query[keep],
        log.pair_doc[keep],
        grade[keep],
        alpha[keep],
        sessions[keep],
        impressions[keep],
        clicks[keep],
        examinations[keep],
        mean,
        (one, two),
    )


def _distinct_per(group: np.ndarray, member: np.ndarray, n_groups: int) -> np.ndarray:
    """How many distinct ``member`` values each group holds."""
    if not len(group):
        return np.zeros(n_groups, dtype=np.int64)
    combined = np.unique(group * (int(member.max()) + 1) + member)
    return np.bincount(combined // (int(member.max()) + 1), minlength=n_groups)


def click_query_id(text: str) -> str:
    """The id a query known only by its text gets: ``click-`` and 12 hex digits of its SHA-256."""
    return "click-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class VotesInput:
    """Query texts and graded judgments for ``JudgedNeighbours``, and where each judgment came from."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    from_clicks: int  # relevant judgments taken from clicks (a pair also judged by people counts here too)
    from_qrels: int  # relevant judgments taken from the qrels
    merged_queries: int  # click queries whose text a judged query has


def votes_input(
    log: ClickLog,
    judged: ClickJudgments,
    in_index: set[str] | None = None,
    queries: Mapping[str, str] | None = None,
    qrels: Mapping[str, Mapping[str, int]] | None = None,
) -> VotesInput:
    """The relevant click judgments (documents outside ``in_index`` left out), alone or merged with ``qrels``
    of ``queries`` (by query text; a pair judged both ways keeps the higher grade)."""
    texts: dict[str, str] = {}
    grades: dict[str, dict[str, int]] = {}
    by_text: dict[str, str] = {}
    from_qrels = 0
    for query_id, text in (queries or {}).items():
        judged_docs = {doc: int(grade) for doc, grade in (qrels or {}).get(query_id, {}).items() if grade > 0}
        if judged_docs:
            texts[query_id] = text
            grades[query_id] = judged_docs
            by_text.setdefault(" ".join(text.split()), query_id)
            from_qrels += len(judged_docs)
    from_clicks, merged = 0, set()
    for query, doc, grade in zip(judged.query.tolist(), judged.doc.tolist(), judged.grade.tolist()):
        doc_id = log.documents[doc]
        if grade <= 0 or (in_index is not None and doc_id not in in_index):
            continue
        text = log.queries[query]
        known = by_text.get(text)
        if known is None:
            query_id = click_query_id(text)
        else:
            query_id = known
            merged.add(query_id)
        texts[query_id] = text
        judged_docs = grades.setdefault(query_id, {})
        judged_docs[doc_id] = max(judged_docs.get(doc_id, 0), grade)
        from_clicks += 1
    return VotesInput(texts, grades, from_clicks, from_qrels, len(merged))


def summary(log: ClickLog, judged: ClickJudgments) -> dict:
    """What the judgments rest on: totals, and per grade the pairs and the quartiles of their sessions and clicks."""
    per_grade = {}
    for grade in (2, 1, 0):
        chosen = judged.grade == grade
        per_grade[str(grade)] = {
            "judgments": int(chosen.sum()),
            "queries": int(len(np.unique(judged.query[chosen]))),
            "sessions_quartiles": _quartiles(judged.sessions[chosen]),
            "clicks_quartiles": _quartiles(judged.clicks[chosen]),
            "sessions_total": int(judged.sessions[chosen].sum()),
            "clicks_total": int(judged.clicks[chosen].sum()),
        }
    relevant = judged.grade > 0
    return {
        "impressions": log.impressions,
        "sessions": log.sessions,
        "clicks": log.clicks,
        "orphan_clicks": log.orphan_clicks,
        "queries": len(log.queries),
        "shown_results": int(len(log.pair)),
        "pairs": int(len(log.pair_query)),
        "judged_pairs": int(len(judged.grade)),
        "judged_queries": int(len(np.unique(judged.query))),
        "queries_with_relevant": int(len(np.unique(judged.query[relevant]))),
        "mean_attractiveness": round(judged.mean_attractiveness, 4),
        "thresholds": {"grade_1_above": round(judged.thresholds[0], 4), "grade_2_from": round(judged.thresholds[1], 4)},
        "by_grade": per_grade,
    }


def _quartiles(values: np.ndarray) -> list[float]:
    if not len(values):
        return []
    return [float(q) for q in np.percentile(values, [0, 25, 50, 75, 100])]


def judgment_rows(log: ClickLog, judged: ClickJudgments) -> list[str]:
    """The judgments as TSV lines (a header first): query text, document, grade, attractiveness, and evidence."""
    lines = ["query_id\tquery\tdoc\tgrade\tattractiveness\tsessions\timpressions\tclicks\texaminations"]
    for index in np.lexsort((judged.doc, judged.query)):
        text = log.queries[judged.query[index]]
        lines.append(
            f"{click_query_id(text)}\t{' '.join(text.split())}\t{log.documents[judged.doc[index]]}\t"
            f"{judged.grade[index]}\t{judged.attractiveness[index]:.4f}\t{judged.sessions[index]}\t"
            f"{judged.impressions[index]}\t{judged.clicks[index]}\t{judged.examinations[index]:.2f}"
        )
    return lines
