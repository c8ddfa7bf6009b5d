"""Evaluation as in Table 2 of the paper, on BM25 top-500 reranking: runs, metrics,
paired t-tests against BM25, per-query wins/ties/losses, a markdown table, charts and a
plain verdict on whether the served default helps the collection."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ir_measures import R
from scipy import stats as scipy_stats

from es_rerank.embeddings import Embeddings
from es_rerank.lex import BM25Params, lex_features
from es_rerank.stats import CorpusStats
from es_rerank.text import embedding_token, embedding_tokens, tokenize
from training.data import QueryCandidates
from training.metrics import (
    HEADLINE,
    MEASURE_LABELS,
    REPORT_MEASURES,
    Qrels,
    Run,
    per_query,
    run_from_scores,
    write_trec_run,
)

BASELINE = "BM25"
SIGNIFICANCE = 0.01  # the paper's 99% confidence, for the table's marks
VERDICT_SIGNIFICANCE = 0.05  # the verdict's: a change this unlikely by chance is one a user should act on
TIE = 1e-9  # per-query values closer than this are a tie
PAPER_TITLE_BM25 = BM25Params(k1=2.0, b=0.75)  # section 4.3.1
_NO_DISTANCE = 1e6  # WMD of a title without any known word: ranked below every real distance


@dataclass
class EvalRow:
    """One ranker's mean metrics, per-query values and paired t-test against BM25."""

    name: str
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    p_values: dict[str, float]
    wins: tuple[int, int, int] | None = None  # queries better / equal / worse than the baseline on HEADLINE


def _natural_key(doc_id: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", doc_id))


def reverse_doc_id_scores(candidates: Sequence[QueryCandidates]) -> list[np.ndarray]:
    """The uninformed ranker: decreasing document id within the candidates."""
    out = []
    for cand in candidates:
        order = sorted(range(len(cand.doc_ids)), key=lambda i: _natural_key(cand.doc_ids[i]), reverse=True)
        scores = np.empty(len(order), dtype=np.float32)
        scores[order] = -np.arange(len(order), dtype=np.float32)
        out.append(scores)
    return out


def title_bm25_scores(
    candidates: Sequence[QueryCandidates], queries: Mapping[str, str], stats: CorpusStats
) -> list[np.ndarray]:
    """BM25 on the title alone (k1=2.0, b=0.75, the paper's best lexical baseline)."""
    out = []
    for cand in candidates:
        terms = [stats.doc_terms(int(r)) for r in cand.stats_rows]
        query_ids = stats.vocab.lookup(tokenize(queries[cand.query_id]))
        out.append(lex_features(query_ids, terms, stats, ["title_bm25"], PAPER_TITLE_BM25)[:, 0])
    return out


def wmd_title_scores(
    candidates: Sequence[QueryCandidates], queries: Mapping[str, str], stats: CorpusStats, embeddings: Embeddings
) -> list[np.ndarray]:
    """Word Mover's Distance between query and title (the paper's WMD-Title), negated as a score.

    gensim's ``wmdistance`` over our word2vec vectors (POT solves the transport);
    out-of-vocabulary words are ignored, and a title with no known word ranks last.
    """
    from gensim.models import KeyedVectors

    words = embeddings.vocab[2:]  # without PAD and UNK
    vectors = KeyedVectors(vector_size=embeddings.dim, count=len(words))
    vectors.add_vectors(words, np.asarray(embeddings.vectors[2:]))
    out = []
    for cand in candidates:
        query = embedding_tokens(tokenize(queries[cand.query_id]))
        scores = np.empty(len(cand.doc_ids), dtype=np.float32)
        for i, row in enumerate(cand.stats_rows):
            title = [embedding_token(stats.vocab.terms[t]) for t in stats.doc_terms(int(row)).title_ids]
            distance = vectors.wmdistance(query, title)
            scores[i] = -distance if np.isfinite(distance) else -_NO_DISTANCE
        out.append(scores)
    return out


def evaluate_runs(runs: Mapping[str, Run], qrels: Qrels, baseline: str = BASELINE) -> list[EvalRow]:
    """Metrics of every run over the judged queries, each t-tested against ``baseline``."""
    rows = []
    for name, run in runs.items():
        values = {str(m): per_query(m, qrels, run) for m in REPORT_MEASURES}
        rows.append(EvalRow(name, {k: float(np.mean(list(v.values()))) for k, v in values.items()}, values, {}))
    base = next((r for r in rows if r.name == baseline), None)
    for row in rows:
        if base is None or row is base:
            continue
        for measure, scores in row.per_query.items():
            queries = sorted(scores)
            a = np.array([scores[q] for q in queries])
            b = np.array([base.per_query[measure][q] for q in queries])
            row.p_values[measure] = float(scipy_stats.ttest_rel(a, b).pvalue) if np.any(a != b) else 1.0
        row.wins = wins_ties_losses(row.per_query[str(HEADLINE)], base.per_query[str(HEADLINE)])
    return rows


def wins_ties_losses(values: Mapping[str, float], baseline: Mapping[str, float]) -> tuple[int, int, int]:
    """Queries where ``values`` beat, tie with, and lose to ``baseline``."""
    differences = [values[q] - baseline[q] for q in baseline]
    return (
        sum(d > TIE for d in differences),
        sum(abs(d) <= TIE for d in differences),
        sum(d < -TIE for d in differences),
    )


def verdict(row: EvalRow, base: EvalRow, collection: str) -> str:
    """One plain line: does ``row`` (the served default) help ``collection`` over ``base`` (BM25) on nDCG@10?"""
    measure, label = str(HEADLINE), MEASURE_LABELS[HEADLINE]
    mine, theirs, p = row.means[measure], base.means[measure], row.p_values.get(measure, 1.0)
    change = (mine / theirs - 1) * 100 if theirs else float("nan")
    won, tied, lost = row.wins or (0, 0, 0)
    figures = (
        f"{label} {mine:.4f} against BM25's {theirs:.4f} ({change:+.1f}%, paired t-test p={p:.2g}; "
        f"{won} queries better, {tied} equal, {lost} worse)"
    )
    if p < VERDICT_SIGNIFICANCE and mine > theirs:
        return f"the reranker helps this collection ({collection}): {row.name}, {figures}."
    if p < VERDICT_SIGNIFICANCE:
        return (
            f"the reranker does not help this collection ({collection}), it hurts it: {row.name}, {figures}; "
            "serve BM25's order here (ESRR_GATEWAY_WINDOW=0, or `esrr search --window 0`)."
        )
    return (
        f"the reranker does not help this collection ({collection}) measurably: {row.name}, {figures}; the "
        f"difference is within chance (p >= {VERDICT_SIGNIFICANCE})."
    )


def adaptation_verdict(rows: Sequence[EvalRow], served: str, adapted: str, collection: str) -> str:
    """One plain line: does the adapted model's default (row ``adapted``) rank better than the served one's?"""
    by_name = {r.name: r for r in rows}
    measure, label = str(HEADLINE), MEASURE_LABELS[HEADLINE]
    mine, theirs = by_name[adapted].per_query[measure], by_name[served].per_query[measure]
    queries = sorted(theirs)
    a, b = np.array([mine[q] for q in queries]), np.array([theirs[q] for q in queries])
    p = float(scipy_stats.ttest_rel(a, b).pvalue) if np.any(a != b) else 1.0
    won, tied, lost = wins_ties_losses(mine, theirs)
    change = (a.mean() / b.mean() - 1) * 100 if b.mean() else float("nan")
    figures = (
        f"{label} {a.mean():.4f} against the served model's {b.mean():.4f} ({change:+.1f}%, paired t-test "
        f"p={p:.2g}; {won} queries better, {tied} equal, {lost} worse)"
    )
    if p < VERDICT_SIGNIFICANCE and a.mean() > b.mean():
        return f"the adapted model helps this collection ({collection}): {adapted}, {figures}."
    if p < VERDICT_SIGNIFICANCE:
        return f"the adapted model hurts this collection ({collection}): {adapted}, {figures}; keep the served one."
    return (
        f"the adapted model does not help this collection ({collection}) measurably: {adapted}, {figures}; "
        f"the difference is within chance (p >= {VERDICT_SIGNIFICANCE})."
    )


def markdown_table(
    rows: Sequence[EvalRow], baseline: str = BASELINE, recall: float | None = None, depth: int = 500
) -> str:
    """Table 2-style markdown: metric means, relative change vs BM25, significance marks, wins/ties/losses."""
    measures = [str(m) for m in REPORT_MEASURES]
    header = (
        "| ranker | "
        + " | ".join(MEASURE_LABELS[m] for m in REPORT_MEASURES)
        + f" | {MEASURE_LABELS[HEADLINE]} better/equal/worse |"
    )
    lines = [header, "|" + "---|" * (len(measures) + 2)]
    base = next((r for r in rows if r.name == baseline), None)
    for row in rows:
        cells = []
        for m in measures:
            cell = f"{row.means[m]:.4f}"
            if base is not None and row is not base:
                change = (row.means[m] / base.means[m] - 1) * 100 if base.means[m] else float("nan")
                p = row.p_values.get(m, 1.0)
                mark = ("+" if change > 0 else "-") if p < SIGNIFICANCE else "="
                cell += f" ({change:+.1f}%, {mark}, p={p:.1g})"
            cells.append(cell)
        cells.append("/".join(map(str, row.wins)) if row.wins is not None else "")
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    notes = [
        f"\n'+'/'-': significant change vs {baseline} (paired t-test, p < {SIGNIFICANCE}); '=': not "
        f"significant. The last column counts the queries each ranker ranks better, equally and worse than "
        f"{baseline} on {MEASURE_LABELS[HEADLINE]}."
    ]
    if recall is not None:
        notes.append(
            f"First stage ({baseline} top-{depth}) Recall@{depth}: {recall:.4f}; every row reorders "
            "that window, so it is every row's recall at the window."
        )
    return "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


def plot_chart(
    rows: Sequence[EvalRow], path: Path, split: str = "test", collection: str = "NFCorpus", depth: int = 500
) -> None:
    """Grouped bar chart of the metrics per ranker, one colour per ranker, the legend beside the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [str(m) for m in REPORT_MEASURES]
    width = 0.8 / len(rows)
    if len(rows) <= 20:
        # Integers index a listed map's own colours: its first ones, one per ranker.
        colours = plt.get_cmap("tab20" if len(rows) > 10 else "tab10")(np.arange(len(rows)))
    else:  # a qualitative map would repeat colours
        colours = plt.get_cmap("turbo")(np.linspace(0.05, 0.95, len(rows)))
    fig, ax = plt.subplots(figsize=(13, max(4.5, 1.0 + 0.2 * len(rows))))  # tall enough for every legend entry
    for i, row in enumerate(rows):
        x = np.arange(len(measures)) + i * width
        ax.bar(x, [row.means[m] for m in measures], width, label=row.name, color=colours[i % len(colours)])
    ax.set_xticks(np.arange(len(measures)) + 0.4 - width / 2, [MEASURE_LABELS[m] for m in REPORT_MEASURES])
    ax.set_ylabel(f"mean over {collection} {split} queries")
    ax.set_title(f"Reranking BM25 top-{depth} on {collection} {split}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_per_query(row: EvalRow, base: EvalRow, path: Path, collection: str) -> None:
    """Each query's change in nDCG@10 from ``base`` to ``row``, sorted: where a ranker wins and loses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measure = str(HEADLINE)
    changes = np.sort([row.per_query[measure][q] - base.per_query[measure][q] for q in base.per_query[measure]])
    colours = np.where(changes > TIE, "tab:green", np.where(changes < -TIE, "tab:red", "tab:gray"))
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(np.arange(len(changes)), changes, width=1.0, color=colours)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("queries, sorted by the change")
    ax.set_ylabel(f"{MEASURE_LABELS[HEADLINE]} change against {base.name}")
    won, tied, lost = row.wins or (0, 0, 0)
    ax.set_title(f"{row.name} on {collection}: {won} better, {tied} equal, {lost} worse")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_tag(row: str) -> str:
    """A row's TREC run tag and file stem: its name with each run of characters outside [A-Za-z0-9.-] as '_'."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", row)  # a tag with spaces breaks the six-column run format


def write_report(
    rows: Sequence[EvalRow],
    runs: Mapping[str, Run],
    out_dir: Path,
    recall: float,
    command: str,
    machine: str,
    runs_dir: Path | None = None,
    split: str = "test",
    collection: str = "NFCorpus",
    depth: int = 500,
    served_default: str | None = None,
) -> str | None:
    """Write table.md, results.json, chart.png (and TREC run files to ``runs_dir``); return the verdict.

    With ``served_default`` (a row's name), the verdict on it against BM25 ends table.md, and
    per-query.png shows its per-query changes.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, recall=recall, depth=depth)
    base = next((r for r in rows if r.name == BASELINE), None)
    served = next((r for r in rows if r.name == served_default), None)
    said = verdict(served, base, f"{collection} {split}") if served is not None and base is not None else None
    ending = f"\nVerdict: {said}\n" if said else ""
    (out_dir / "table.md").write_text(
        f"Command: `{command}`  \nMachine: {machine}  \nCollection: {collection}, "
        f"{split} split, {len(base.per_query[str(HEADLINE)]) if base else 0} judged "
        f"queries\n\n{table}{ending}",
        encoding="utf-8",
    )
    (out_dir / "results.json").write_text(
        json.dumps(
            {
                "command": command,
                "machine": machine,
                "collection": collection,
                "split": split,
                "depth": depth,
                f"recall@{depth}": recall,
                "served_default": served_default,
                "verdict": said,
                "rows": [
                    {
                        "name": r.name,
                        "means": r.means,
                        "p_values": r.p_values,
                        "wins_ties_losses": list(r.wins) if r.wins else None,
                    }
                    for r in rows
                ],
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    plot_chart(rows, out_dir / "chart.png", split, collection, depth)
    if served is not None and base is not None:
        plot_per_query(served, base, out_dir / "per-query.png", f"{collection} {split}")
    if runs_dir is not None:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for name, run in runs.items():
            write_trec_run(run, runs_dir / f"{run_tag(name)}.run", run_tag(name))
    return said


def first_stage_recall(qrels: Qrels, run: Run, depth: int = 500) -> float:
    """Mean recall at ``depth`` (the window) of the first stage over the judged queries."""
    return float(np.mean(list(per_query(R @ depth, qrels, run).values())))


__all__ = [
    "adaptation_verdict",
    "evaluate_runs",
    "markdown_table",
    "plot_chart",
    "plot_per_query",
    "run_tag",
    "verdict",
    "wins_ties_losses",
    "write_report",
    "reverse_doc_id_scores",
    "title_bm25_scores",
    "wmd_title_scores",
    "first_stage_recall",
    "run_from_scores",
]
