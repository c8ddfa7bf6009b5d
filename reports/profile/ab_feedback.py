"""Candidate feedback's step, served against an older ``feedback.py``, alternated window by window (thread CPU).

    git show 841026a:es_rerank/ranking/feedback.py > /tmp/feedback_841026a.py
    python reports/profile/ab_feedback.py --old /tmp/feedback_841026a.py --queries 100 --rounds 3

On the NFCorpus dev queries whose window is full (500 hits): each version's ``DocumentVectorCache`` is first
filled with every window (as a serving process's is after a while) and the served kernel compiled, then for each
window, the two versions taking turns (and turns at going first), the thread CPU of

- ``vectors``: the cache's matrix of the window (the pipeline's "feedback vectors" clock);
- ``vectors, cold``: ``document_vectors`` of the window, what the cache builds for documents it does not hold;
- ``nearest hits``: each hit's k nearest other hits (k served, ``ESRR_FEEDBACK_K``);
- ``with_feedback``: the nearest hits and the votes (the "feedback votes" clock);
- ``the step``: both clocks' work, ``vectors`` then ``with_feedback``.

The old file is loaded as a module of its own beside the served package (it imports the unchanged rest of it).
Last, every window's neighbours and fed scores of the two versions are compared.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import numpy as np
from micro import paired  # the sibling script (its folder is on the path when run as a script)


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file at ``path`` as a fresh module called ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise click.BadParameter(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def full_windows(queries: int) -> tuple[Any, Any, list[tuple[list[str], list[Any], np.ndarray]]]:
    """The served settings (``ESRR_*``), the embedded index's statistics, and the full windows (ids, ``DocTerms``,
    BM25 scores) of the first ``queries`` dev queries that fill one."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings

    settings = load_settings(GatewaySettings)
    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    windows = [
        ([hit.doc_id for hit in hits], [hit.terms for hit in hits], np.array([hit.score for hit in hits]))
        for text in dev_query_texts(None, settings, 324)
        if len(hits := text_hits(backend, text, settings.gateway_window)) == settings.gateway_window
    ][:queries]
    return settings, backend.stats, windows


@click.command()
@click.option("--old", "old_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--queries", default=100, show_default=True, help="Full windows to use, the first dev queries'.")
@click.option("--rounds", default=3, show_default=True, help="Passes over the windows, each timed.")
def main(old_path: Path, queries: int, rounds: int) -> None:
    """Each pair's thread CPU per window (p50, mean), the ratios, and whether the results agree."""
    import es_rerank.ranking.feedback as new
    from es_rerank.machine import machine_description
    from es_rerank.ranking.similar_hits import warm_up

    old = load_module(old_path, "feedback_old")
    settings, stats, windows = full_windows(queries)
    params = new.FeedbackParams.from_settings(settings)
    caches = {
        version: module.DocumentVectorCache(settings.feedback_cache_documents)
        for version, module in (("new", new), ("old", old))
    }
    warm_up()
    for ids, docs, _ in windows:
        for cache in caches.values():
            cache.vectors(ids, docs, stats)
    matrices = {
        version: [cache.vectors(ids, docs, stats) for ids, docs, _ in windows] for version, cache in caches.items()
    }

    def step(module: ModuleType, version: str):
        def run(window: tuple) -> np.ndarray:
            ids, docs, scores = window
            return module.with_feedback(scores, caches[version].vectors(ids, docs, stats), params)

        return run

    indexed = list(enumerate(windows))
    results: dict[str, dict[str, list[np.ndarray]]] = {}
    for _ in range(rounds):
        for pair, spent in {
            "vectors": paired(
                {
                    "served": lambda w: caches["new"].vectors(w[1][0], w[1][1], stats),
                    "old": lambda w: caches["old"].vectors(w[1][0], w[1][1], stats),
                },
                indexed,
            ),
            "vectors, cold": paired(
                {
                    "served": lambda w: new.document_vectors(w[1][1], stats),
                    "old": lambda w: old.document_vectors(w[1][1], stats),
                },
                indexed,
            ),
            "nearest hits": paired(
                {
                    "served": lambda w: new.nearest_hits(matrices["new"][w[0]], params.k),
                    "old": lambda w: old.nearest_hits(matrices["old"][w[0]], params.k),
                },
                indexed,
            ),
            "with_feedback": paired(
                {
                    "served": lambda w: new.with_feedback(w[1][2], matrices["new"][w[0]], params),
                    "old": lambda w: old.with_feedback(w[1][2], matrices["old"][w[0]], params),
                },
                indexed,
            ),
            "the step": paired({"served": step(new, "new"), "old": step(old, "old")}, windows),
        }.items():
            for version, ms in spent.items():
                results.setdefault(pair, {}).setdefault(version, []).append(ms)

    click.echo(
        f"{machine_description()} | {len(windows)} dev queries with a full window of {settings.gateway_window}, "
        f"k {params.k}, {rounds} rounds, thread CPU per window | old: {old_path.name}"
    )
    for pair, spent in results.items():
        a, b = (np.concatenate(spent[version]) for version in ("served", "old"))
        by_round = ", ".join(f"{x.mean() / y.mean():.2f}" for x, y in zip(spent["served"], spent["old"]))
        click.echo(
            f"{pair:<14} served: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | old: p50 {np.median(b):.3f} ms, "
            f"mean {b.mean():.3f} | served / old: p50 {np.median(a) / np.median(b):.2f}, "
            f"means {a.mean() / b.mean():.2f} (rounds {by_round})"
        )
    neighbours = sum(
        not np.array_equal(new.nearest_hits(x, params.k)[0], old.nearest_hits(y, params.k)[0])
        for x, y in zip(matrices["new"], matrices["old"])
    )
    fed = [(step(new, "new")(w), step(old, "old")(w)) for w in windows]
    differ, largest = sum(not np.array_equal(x, y) for x, y in fed), max(np.abs(x - y).max() for x, y in fed)
    click.echo(
        f"windows whose neighbours differ: {neighbours} of {len(windows)}; whose scores differ in any bit: "
        f"{differ}, largest difference {largest:.2g}"
    )


if __name__ == "__main__":
    main()
