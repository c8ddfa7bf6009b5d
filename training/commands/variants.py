"""The models ``esrr train`` makes, the rows ``esrr eval`` names after them, and where their checkpoints live."""

from __future__ import annotations

from pathlib import Path

from es_rerank.settings import CommonSettings

PAPER_VARIANT_NAMES = {  # what --variant all trains: the paper's Table 2 and 6
    "delta-32": "Delta-32",
    "delta-32-lex3": "Delta-32-Lex3",
    "delta-32-no-difference": "Delta-32, no difference vectors",
    "delta-32-no-delta-features": "Delta-32, no Delta features",
}
VARIANT_NAMES = {**PAPER_VARIANT_NAMES, "delta-32-lex3-window": "Delta-32-Lex3, window-standardised"}
BASELINE_ROWS = ("Uninformed (reverse doc id)", "BM25", "BM25-Title", "WMD-Title")
DRMM_NAME = "drmm"  # the histogram baseline of Table 2 (training.drmm)


def checkpoint_path(settings: CommonSettings, variant: str) -> Path:
    """Where the checkpoint of a variant lives."""
    return settings.models_dir / f"{variant}.pt"
