"""What a statistics directory is: its format number, its fields, the first-tokens count, its error and its files.

Shared by the code that writes one (``es_rerank.stats``, ``es_rerank.stats_writer``) and the code that
opens one (``es_rerank.stats_reader``).
"""

from __future__ import annotations

from pathlib import Path

FIRST_TOKENS = 50  # N of the paper: document tokens the neural model reads
# 2: vocabulary and document ids as string tables with key indexes; 3: the first tokens derived through
# embedding_of.npy instead of stored (first_ptr/first_values.npy)
STATS_FORMAT = 3
FIELDS = ("title", "abstract", "text")


class StatsError(Exception):
    """A statistics directory is missing, incomplete or of another format."""


def statistics_files(directory: Path) -> list[str]:
    """The data files of the statistics in ``directory``: all but ``meta.json`` and the manifest (which lists
    them)."""
    return sorted(
        path.name for path in directory.iterdir() if path.is_file() and path.name not in ("meta.json", "manifest.json")
    )
