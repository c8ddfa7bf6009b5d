"""How many hits tantivy returns for a top-500 on a home (the window the per-hit stages work on).

    ESRR_HOME=/tmp/onem-home python reports/profile/one-million/window_sizes.py --queries 48

The first NFCorpus dev queries by id (as stages.py and bench http send them), each searched for its top 500 as the
served search retrieves it; ``EmbeddedBackend._ranked`` is given tantivy's hits (the top 500 and the tie margin,
more when the 500th score ties).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import click


@click.command()
@click.option("--queries", default=48, show_default=True, help="NFCorpus dev queries, the first by id.")
def main(queries: int) -> None:
    """Print the median, mean and largest number of hits tantivy returned per top-500."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.settings import CommonSettings

    settings = load_settings(CommonSettings)
    backend = EmbeddedBackend.open_current(Path(settings.indexes_dir) / "embedded")
    sizes: list[int] = []
    ranked = EmbeddedBackend._ranked

    def counted(self: EmbeddedBackend, scored: list, k: int) -> list:
        sizes.append(len(scored))
        return ranked(self, scored, k)

    EmbeddedBackend._ranked = counted  # type: ignore[method-assign]
    for text in dev_query_texts(None, settings, queries):
        text_hits(backend, text, 500)
    click.echo(
        f"{settings.home}: {backend.stats.n_docs:,} documents, {len(sizes)} queries: tantivy hits per top-500 "
        f"p50 {statistics.median(sizes)}, mean {statistics.fmean(sizes):.0f}, max {max(sizes)}"
    )


if __name__ == "__main__":
    main()
