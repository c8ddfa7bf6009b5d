"""Candidate feedback's nearest hits, served against before 591227d (argpartition), in one run.

Served was k argmax passes when ``micro-feedback.txt`` was taken; it is the compiled kernel now
(``similar_hits.py``; ``ab_feedback.py`` compares it with the argmax passes).

On the NFCorpus dev queries whose window is full (500 hits): each window's feedback vectors as a served
search builds them, then each variant's thread CPU, alternated query by query (which goes first alternating
too), for the nearest hits alone and for the whole ``with_feedback``; and how many windows' votes differ.

    python reports/profile/micro_feedback.py --queries 120
"""

from __future__ import annotations

import click
import numpy as np
from micro import paired, patched  # the sibling script (its folder is on the path when run as a script)
from scipy import sparse


def nearest_by_argpartition(vectors: sparse.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``feedback.nearest_hits`` as it was before (591227d): argpartition of the negated similarities."""
    n = vectors.shape[0]
    if n < 2:
        return np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0))
    negated = (vectors @ vectors.T).toarray()
    np.negative(negated, out=negated)
    np.fill_diagonal(negated, np.inf)
    k = min(k, n - 1)
    nearest = np.argpartition(negated, k - 1, axis=1)[:, :k]
    return nearest, np.maximum(-np.take_along_axis(negated, nearest, axis=1), 0.0)


@click.command()
@click.option("--queries", default=120, show_default=True, help="Full windows to use, the first dev queries'.")
def main(queries: int) -> None:
    """Each pair's thread CPU per window (p50, mean) and the ratio of the means."""
    import es_rerank.ranking.feedback as feedback
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description
    from es_rerank.ranking.similar_hits import warm_up

    settings = load_settings(GatewaySettings)
    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    stats, params = backend.stats, feedback.FeedbackParams.from_settings(settings)
    windows = [
        (np.array([hit.score for hit in hits]), feedback.document_vectors([hit.terms for hit in hits], stats))
        for text in dev_query_texts(None, settings, 324)
        if len(hits := text_hits(backend, text, settings.gateway_window)) == settings.gateway_window
    ][:queries]

    warm_up()  # compiled before the timing, as the served pipeline's assembly does

    def before(window: tuple) -> np.ndarray:
        with patched(feedback, "nearest_hits", nearest_by_argpartition):
            return feedback.with_feedback(window[0], window[1], params)

    results = {
        "nearest hits": paired(
            {
                "served": lambda window: feedback.nearest_hits(window[1], params.k),
                "argpartition": lambda window: nearest_by_argpartition(window[1], params.k),
            },
            windows,
        ),
        "with_feedback": paired(
            {"served": lambda window: feedback.with_feedback(window[0], window[1], params), "before": before},
            windows,
        ),
    }
    differ = sum(not np.array_equal(feedback.with_feedback(s, v, params), before((s, v))) for s, v in windows)
    click.echo(f"{machine_description()} | {len(windows)} dev queries with a full window, thread CPU per window")
    for pair, spent in results.items():
        (first, a), (second, b) = spent.items()
        click.echo(
            f"{pair:<14} {first}: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | {second}: p50 "
            f"{np.median(b):.3f} ms, mean {b.mean():.3f} | ratio of the means {a.mean() / b.mean():.2f}"
        )
    click.echo(f"windows whose scores differ in any bit: {differ} of {len(windows)}")


if __name__ == "__main__":
    main()
