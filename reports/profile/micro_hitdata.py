"""The hits' data and the order of the top 500, served against before (841026a), in one run (thread CPU).

On the NFCorpus dev queries whose window is full (500 hits), each query's tantivy hits fetched once, then
each pair's variants alternated query by query (which goes first alternating too):

- ``hits' data``: ``CorpusStats.doc_terms_at`` of the window's 500 rows, read together (served) or one
  ``doc_terms`` per row (before);
- ``order``: the top 500 of tantivy's hits by score, then id: ``best_first`` (served: one sort on ready
  keys), numpy (a stable argsort on the scores, the tied hits ordered by id in one Python sort), or
  ``sorted`` of (score, address), row, id tuples with a Python key function (before);
- ``hits``: the 500 ``Hit`` objects, ``unread_hits`` (served) or ``Hit(...)`` each (before);
- ``ranked``: the whole ``EmbeddedBackend._ranked`` (rows, ids, order, hits' data, the ``Hit`` objects)
  served, or as it was before;
- ``first stage``: the whole ``EmbeddedBackend.first_stage`` of the query's prepared body (tantivy's search
  too: the stages.py "BM25 top-500" and "hits' data" together), served or with ``_ranked`` as before.

Then every window's hits of the two ``_ranked`` are compared: ids, scores, addresses, and each part of
each hit's ``DocTerms`` (values and dtype).

    python reports/profile/micro_hitdata.py --queries 120
"""

from __future__ import annotations

from typing import Any

import click
import numpy as np
from micro import paired, patched  # the sibling script (its folder is on the path when run as a script)

PARTS = ("title_ids", "abstract_ids", "first_ids")


def doc_terms_before(stats: Any, rows: Any) -> list:
    """``CorpusStats.doc_terms_at`` before (841026a): one ``doc_terms`` per row."""
    return [stats.doc_terms(int(row)) for row in rows]


def order_before(scored: list, rows: list, ids: list, k: int) -> list:
    """``_ranked``'s order before: a Python sort of (score, address), row, id tuples on (-score, id)."""
    return sorted(zip(scored, rows, ids), key=lambda item: (-item[0][0], item[2]))[:k]


def order_by_numpy(scores: list, ids: list, k: int) -> list:
    """The order ``best_first`` gives, over arrays: a stable argsort on the scores, then the hits in runs of equal
    scores by id, in one Python sort of all of them (grouped again by a stable argsort on their scores)."""
    values = np.array(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    ordered = values[order]
    edges = np.concatenate(([False], ordered[1:] == ordered[:-1], [False]))
    tied = np.flatnonzero(edges[1:] | edges[:-1])
    if len(tied):
        by_id = np.array(sorted(order[tied].tolist(), key=ids.__getitem__), dtype=np.intp)
        order[tied] = by_id[np.argsort(-values[by_id], kind="stable")]
    return order[:k].tolist()


def ranked_before(backend: Any, scored: list, k: int) -> list:
    """``EmbeddedBackend._ranked`` before (841026a)."""
    from es_rerank.backends.base import Hit

    rows = backend._int_values("row", [address for _, address in scored])
    ids = backend._stats.doc_ids_at(rows)
    ranked = order_before(scored, rows, ids, k)
    terms = doc_terms_before(backend._stats, [row for _, row, _ in ranked])
    return [
        Hit(doc_id, float(score), "", data, address)
        for ((score, address), _, doc_id), data in zip(ranked, terms, strict=True)
    ]


def first_stage_before(backend: Any, prepared: Any, k: int) -> Any:
    """``EmbeddedBackend.first_stage`` with ``_ranked`` as before."""
    with patched(backend, "_ranked", lambda scored, k: ranked_before(backend, scored, k)):
        return backend.first_stage(prepared, k)


def same_hits(old: list, new: list) -> bool:
    """Whether two lists of hits agree in ids, scores, addresses and every part of their data, dtype included."""
    return len(old) == len(new) and all(
        a.doc_id == b.doc_id
        and a.score == b.score
        and a.address == b.address
        and all(
            getattr(a.terms, p).dtype == getattr(b.terms, p).dtype
            and np.array_equal(getattr(a.terms, p), getattr(b.terms, p))
            for p in PARTS
        )
        for a, b in zip(old, new)
    )


def _columns(hits: list) -> tuple[list, list, list, list]:
    """The ids, scores, data and addresses of ``hits``, as ``unread_hits`` takes them."""
    return tuple([getattr(hit, name) for hit in hits] for name in ("doc_id", "score", "terms", "address"))  # type: ignore[return-value]


@click.command()
@click.option("--queries", default=120, show_default=True, help="Full windows to use, the first dev queries'.")
def main(queries: int) -> None:
    """Each pair's thread CPU per window (p50, mean), the ratio of the means, and whether the hits agree."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import Hit, text_body, unread_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.backends.embedded_order import best_first
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.machine import machine_description

    settings = load_settings(GatewaySettings)
    backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    stats, k = backend.stats, settings.gateway_window
    windows, texts = [], []
    for text in dev_query_texts(None, settings, 324):
        scored, _ = backend._top(backend.prepare(text_body(text)).query, k)
        if len(scored) >= k and len(windows) < queries:
            rows = backend._int_values("row", [address for _, address in scored])
            windows.append((scored, rows, stats.doc_ids_at(rows)))
            texts.append(text)
    served_rows = [
        np.asarray(rows, dtype=np.int64)[best_first([s for s, _ in scored], ids, k)] for scored, rows, ids in windows
    ]

    results = {
        "hits' data": paired(
            {"read together (served)": stats.doc_terms_at, "one per row": lambda rows: doc_terms_before(stats, rows)},
            served_rows,
        ),
        "order": paired(
            {
                "best_first (served)": lambda w: best_first([score for score, _ in w[0]], w[2], k),
                "sorted tuples": lambda w: order_before(*w, k),
            },
            windows,
        ),
        "order, numpy": paired(
            {
                "argsort, ties by id": lambda w: order_by_numpy([score for score, _ in w[0]], w[2], k),
                "sorted tuples": lambda w: order_before(*w, k),
            },
            windows,
        ),
        "hits": paired(
            {
                "unread_hits (served)": lambda h: unread_hits(*h),
                "Hit each": lambda h: [Hit(i, s, "", t, a) for i, s, t, a in zip(*h, strict=True)],
            },
            [_columns(hits) for hits in (backend._ranked(w[0], k) for w in windows)],
        ),
        "ranked": paired(
            {
                "served": lambda w: backend._ranked(w[0], k),
                "before": lambda w: ranked_before(backend, w[0], k),
            },
            windows,
        ),
    }
    assert all(
        order_by_numpy([s for s, _ in w[0]], w[2], k) == best_first([s for s, _ in w[0]], w[2], k) for w in windows
    )
    results["first stage"] = paired(
        {
            "served": lambda prepared: backend.first_stage(prepared, k),
            "before": lambda prepared: first_stage_before(backend, prepared, k),
        },
        [backend.prepare(text_body(text)) for text in texts],
    )
    differ = sum(not same_hits(ranked_before(backend, w[0], k), backend._ranked(w[0], k)) for w in windows)
    ties = sum(len({score for score, _ in w[0][:k]}) < k for w in windows)
    click.echo(
        f"{machine_description()} | {len(windows)} dev queries with a full window ({ties} with tied scores), "
        "thread CPU per window"
    )
    for pair, spent in results.items():
        (first, a), (second, b) = spent.items()
        click.echo(
            f"{pair:<12} {first}: p50 {np.median(a):.3f} ms, mean {a.mean():.3f} | {second}: p50 "
            f"{np.median(b):.3f} ms, mean {b.mean():.3f} | ratio of the means {a.mean() / b.mean():.2f}"
        )
    click.echo(f"windows whose hits differ (ids, scores, addresses, DocTerms): {differ} of {len(windows)}")


if __name__ == "__main__":
    main()
