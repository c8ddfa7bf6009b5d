"""Which checkpoint is served and which Lex features it reads, torch-free (settings and callers agree on them)."""

from __future__ import annotations

from pathlib import Path

from es_rerank.lex import LEX3, LEX3_WINDOW, check_feature_names

DEFAULT_CHECKPOINT_NAME = "delta-32-lex3.pt"  # the paper's Delta-32-Lex3
# Served in its place once trained: Lex3 standardised within the window, chosen on dev under shift (docs/quality.md).
WINDOW_CHECKPOINT_NAME = "delta-32-lex3-window.pt"


def checkpoint_lex_features(checkpoint: Path) -> tuple[str, ...]:
    """The Lex features a checkpoint reads, from the record `esrr train` writes beside it (torch-free).

    A record without them (written before it named them): Lex3 on the window scale for the window
    variant's file name, the paper's Lex3 otherwise.
    """
    import json

    record = checkpoint.with_suffix(".json")
    try:
        names = json.loads(record.read_text(encoding="utf-8")).get("lex_features")
    except (OSError, ValueError, AttributeError):  # no record, or not one of ours: fall back on the name
        names = None
    if isinstance(names, list) and names:
        try:
            return check_feature_names(names)
        except ValueError as error:
            raise ValueError(
                f"{record} names Lex features the model cannot read ({error}); retrain it with `esrr train`"
            ) from None
    return LEX3_WINDOW if checkpoint.name == WINDOW_CHECKPOINT_NAME else LEX3


def checkpoint_list(value: str) -> tuple[Path, ...]:
    """The checkpoints of a comma-separated list (an ensemble's members); ``ValueError`` names the problem."""
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ValueError(f"{value!r} has an empty entry; separate checkpoint files with single commas")
    paths = tuple(Path(part) for part in parts)
    if len({path.resolve() for path in paths}) < len(paths):
        raise ValueError(f"{value!r} names one checkpoint twice; an ensemble lists each member once")
    return paths
