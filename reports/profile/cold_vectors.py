"""The feedback's cold document vectors at 1M documents: where numpy's time went, and served against an old version.

    git show 89ffa9f:es_rerank/ranking/feedback.py > /tmp/feedback_89ffa9f.py
    ESRR_HOME=/tmp/onem-home python reports/profile/cold_vectors.py --old /tmp/feedback_89ffa9f.py --queries 100

On the NFCorpus dev queries whose BM25 window is full (500 hits) on the home of ``ESRR_HOME`` (at 1M documents a
window's documents are nearly all new to the vector cache), thread CPU per window:

- ``split``: the old ``document_vectors`` cut into its steps (the same code, a clock between steps), and the
  served ``heaviest_terms`` likewise (its kernels called in turn; the idf table built before the timing);
- ``document_vectors``: the old function against the served one;
- ``cache, cold``: each version's ``DocumentVectorCache`` (the served bound, ``ESRR_FEEDBACK_CACHE_DOCUMENTS``),
  fresh for each round, given the windows in turn: what a serving process does for the documents it does not hold
  (building their rows and keeping them), with the share of the windows' documents it did not hold;
- ``the step, cold``: that, then ``with_feedback`` (the pipeline's two feedback clocks).

The two versions take turns window by window (and turns at going first); last, every window's matrices of the
two versions are compared bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import numpy as np
from ab_feedback import full_windows, load_module  # sibling scripts (their folder is on the path when run as a script)
from micro import paired
from scipy import sparse

SPLIT = (
    "tokens, keys",
    "key sort",
    "tf runs",
    "weights (log, idf)",
    "heaviest-first argsort",
    "keep the 50",
    "norms",
    "term order, CSR",
)


def split_document_vectors(docs: list, stats, terms_per_document: int = 50) -> np.ndarray:
    """Thread CPU ms of each of the old ``document_vectors``'s steps (89ffa9f's code, clocks between the steps)."""
    clocks = [time.thread_time_ns()]
    n, vocab = len(docs), len(stats.vocab)
    lengths = np.fromiter((len(d.title_ids) + len(d.abstract_ids) for d in docs), np.int64, n)
    tokens = np.concatenate([np.zeros(0, np.int64), *(ids for d in docs for ids in (d.title_ids, d.abstract_ids))])
    keys = np.repeat(np.arange(n, dtype=np.int64) * vocab, lengths) + tokens
    clocks.append(time.thread_time_ns())
    keys.sort()
    clocks.append(time.thread_time_ns())
    new_run = np.ones(len(keys), dtype=bool)
    new_run[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(new_run)
    tf = np.diff(np.append(starts, len(keys))).astype(np.float64)
    doc, term = np.divmod(keys[starts], vocab)
    clocks.append(time.thread_time_ns())
    weights = (1.0 + np.log(tf)) * stats.idf(term)
    clocks.append(time.thread_time_ns())
    span = weights.max() + 1.0 if len(weights) else 1.0
    heaviest_first = np.argsort(doc * span - weights, kind="stable")
    doc, term, weights = doc[heaviest_first], term[heaviest_first], weights[heaviest_first]
    clocks.append(time.thread_time_ns())
    rank_in_document = np.arange(len(doc)) - np.searchsorted(doc, doc)
    keep = rank_in_document < terms_per_document
    doc, term, weights = doc[keep], term[keep], weights[keep]
    clocks.append(time.thread_time_ns())
    norms = np.sqrt(np.bincount(doc, weights * weights, minlength=n))
    weights /= np.where(norms > 0, norms, 1.0)[doc]
    clocks.append(time.thread_time_ns())
    by_term = np.argsort(doc * vocab + term)
    indptr = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(doc, minlength=n), out=indptr[1:])
    sparse.csr_matrix((weights[by_term], term[by_term].astype(np.int32), indptr), shape=(n, vocab))
    clocks.append(time.thread_time_ns())
    return np.diff(clocks) / 1e6


SERVED_SPLIT = ("tokens (Python)", "counting", "weights, keys", "sort keys", "sort by term", "keep the 50")


def split_heaviest_terms(docs: list, stats, terms_per_document: int = 50) -> np.ndarray:
    """Thread CPU ms of each of the served ``heaviest_terms``'s steps (its code, clocks between the steps)."""
    from es_rerank.ranking import heaviest_terms as served

    clocks = [time.thread_time_ns()]
    n, vocab = len(docs), len(stats.vocab)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter((len(d.title_ids) + len(d.abstract_ids) for d in docs), np.int64, n), out=offsets[1:])
    pieces = (ids for d in docs for ids in (d.title_ids, d.abstract_ids))
    tokens = np.concatenate([np.zeros(0, np.int32), *pieces]).astype(np.int32, copy=False)
    clocks.append(time.thread_time_ns())
    table = served._count_table(vocab)
    terms, counts, starts, _ = served._term_counts(tokens, offsets, table, vocab)
    served._COUNT_TABLES.put(table)
    clocks.append(time.thread_time_ns())
    one_plus_log = 1.0 + np.log(np.arange(1, int(counts.max()) + 1, dtype=np.float64))
    shift = max(len(terms), 1).bit_length()
    tables = (one_plus_log, served._idf_table(stats))
    weights, keys, packed = served._weights_and_keys(terms, counts, starts, tables, vocab, shift)
    clocks.append(time.thread_time_ns())
    keys_ascending = np.sort(keys)
    clocks.append(time.thread_time_ns())
    packed.sort()
    by_term = packed & ((1 << shift) - 1)
    clocks.append(time.thread_time_ns())
    served._keep_heaviest(terms, weights, (keys, keys_ascending), by_term, starts, terms_per_document)
    clocks.append(time.thread_time_ns())
    return np.diff(clocks) / 1e6


def same(x: sparse.csr_matrix, y: sparse.csr_matrix) -> bool:
    """Whether two CSR matrices hold the same arrays, dtypes and bits."""
    return (
        x.shape == y.shape
        and all(a.dtype == b.dtype for a, b in ((x.data, y.data), (x.indices, y.indices), (x.indptr, y.indptr)))
        and all(np.array_equal(a, b) for a, b in ((x.data, y.data), (x.indices, y.indices), (x.indptr, y.indptr)))
        and np.array_equal(x.data.view(np.int64), y.data.view(np.int64))
    )


@click.command()
@click.option("--old", "old_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--queries", default=100, show_default=True, help="Full windows to use, the first dev queries'.")
@click.option("--rounds", default=2, show_default=True, help="Passes over the windows, each timed.")
def main(old_path: Path, queries: int, rounds: int) -> None:
    """Print the split, each pair's thread CPU per window (p50, mean), the ratios, and whether the results agree."""
    import es_rerank.ranking.feedback as new
    from es_rerank.machine import machine_description
    from es_rerank.ranking.heaviest_terms import warm_up as warm_vectors
    from es_rerank.ranking.similar_hits import warm_up

    old = load_module(old_path, "feedback_old")
    settings, stats, windows = full_windows(queries)
    params = new.FeedbackParams.from_settings(settings)
    warm_up()
    warm_vectors()
    started = time.thread_time_ns()
    new.document_vectors(windows[0][1], stats)  # the whole vocabulary's idf table, once per build: not timed below
    idf_table_ms = (time.thread_time_ns() - started) / 1e6
    bound = settings.feedback_cache_documents
    modules: dict[str, ModuleType] = {"served": new, "old": old}

    split = np.array([split_document_vectors(docs, stats) for _ in range(rounds) for _, docs, _ in windows])
    served_split = np.array([split_heaviest_terms(docs, stats) for _ in range(rounds) for _, docs, _ in windows])
    results: dict[str, dict[str, list[np.ndarray]]] = {}
    missing: list[float] = []
    for _ in range(rounds):
        caches = {version: module.DocumentVectorCache(bound) for version, module in modules.items()}
        held: set[str] = set()
        for ids, _, _ in windows:
            missing.append(sum(doc_id not in held for doc_id in ids) / len(ids))
            held.update(ids)
        step_caches = {version: module.DocumentVectorCache(bound) for version, module in modules.items()}

        def step(version: str, cache: Any) -> Callable[[tuple], np.ndarray]:
            def run(window: tuple) -> np.ndarray:
                ids, docs, scores = window
                return modules[version].with_feedback(scores, cache.vectors(ids, docs, stats), params)

            return run

        for pair, spent in {
            "document_vectors": paired(
                {version: (lambda w, m=module: m.document_vectors(w[1], stats)) for version, module in modules.items()},
                windows,
            ),
            "cache, cold": paired(
                {version: (lambda w, c=cache: c.vectors(w[0], w[1], stats)) for version, cache in caches.items()},
                windows,
            ),
            "the step, cold": paired({version: step(version, step_caches[version]) for version in modules}, windows),
        }.items():
            for version, ms in spent.items():
                results.setdefault(pair, {}).setdefault(version, []).append(ms)

    click.echo(
        f"{machine_description()} | {stats.n_docs:,} documents | {len(windows)} dev queries with a full window of "
        f"{settings.gateway_window}, {rounds} rounds, thread CPU per window | old: {old_path.name} | cache bound "
        f"{bound:,}, documents new to it: {np.mean(missing):.1%} of a window"
    )
    click.echo(f"the served first window of this statistics build (its idf table built): {idf_table_ms:.1f} ms")
    click.echo("the old document_vectors, split (ms per window):")
    for name, column in zip(SPLIT, split.T):
        click.echo(f"  {name:<24} p50 {np.median(column):7.3f}  mean {column.mean():7.3f}")
    totals = split.sum(axis=1)
    click.echo(f"  {'total':<24} p50 {np.median(totals):7.3f}  mean {totals.mean():7.3f}")
    click.echo("the served heaviest_terms (what document_vectors calls), split (ms per window):")
    for name, column in zip(SERVED_SPLIT, served_split.T):
        click.echo(f"  {name:<24} p50 {np.median(column):7.3f}  mean {column.mean():7.3f}")
    totals = served_split.sum(axis=1)
    click.echo(f"  {'total':<24} p50 {np.median(totals):7.3f}  mean {totals.mean():7.3f}")
    for pair, spent in results.items():
        a, b = (np.concatenate(spent[version]) for version in ("served", "old"))
        by_round = ", ".join(f"{x.mean() / y.mean():.2f}" for x, y in zip(spent["served"], spent["old"]))
        click.echo(
            f"{pair:<16} served: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | old: p50 {np.median(b):.3f} ms, "
            f"mean {b.mean():.3f} | served / old: p50 {np.median(a) / np.median(b):.2f}, "
            f"means {a.mean() / b.mean():.2f} (rounds {by_round})"
        )
    caches = {version: module.DocumentVectorCache(bound) for version, module in modules.items()}
    differ = sum(
        not same(new.document_vectors(docs, stats), old.document_vectors(docs, stats))
        or not same(caches["served"].vectors(ids, docs, stats), caches["old"].vectors(ids, docs, stats))
        for ids, docs, _ in windows
    )
    click.echo(f"windows whose matrices (document_vectors, the cache's) differ in any bit: {differ} of {len(windows)}")


if __name__ == "__main__":
    main()
