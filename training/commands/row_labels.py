"""The rows ``esrr eval --extra`` and ``--ensemble`` add: their LABEL=CHECKPOINT options, and labels checked to
name new rows, each with a run file of its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from es_rerank.settings import checkpoint_list
from training.commands.variants import BASELINE_ROWS, VARIANT_NAMES

MAX_FILE_NAME_BYTES = 255  # ext4, xfs, btrfs and most others


def labelled_checkpoints(option: str, ensemble: bool) -> tuple[str, list[Path]]:
    """LABEL=CHECKPOINT (``--extra``) or LABEL=CHECKPOINT,CHECKPOINT[,...] (``--ensemble``), files checked."""
    label, sep, paths = option.partition("=")
    param_hint = "--ensemble" if ensemble else "--extra"
    if ensemble:
        try:  # the same list ESRR_CHECKPOINT serves
            members = list(checkpoint_list(paths)) if paths.strip() else []
        except ValueError as error:
            raise click.BadParameter(f"row {label!r}: {error}", param_hint=param_hint) from None
        expected, enough = "LABEL=CHECKPOINT,CHECKPOINT[,...] with at least two existing checkpoint files", 2
    else:
        members = [Path(paths)] if paths else []
        expected, enough = "LABEL=CHECKPOINT with an existing checkpoint file", 1
    missing = [str(p) for p in members if not p.is_file()]
    if not sep or not label or len(members) < enough or missing:
        found = f" (no such file: {', '.join(missing)})" if missing else ""
        raise click.BadParameter(f"{option!r}: expected {expected}{found}", param_hint=param_hint)
    return label, members


def twinned_rows(labels: Sequence[str]) -> list[str]:
    """Rows that get "+ candidate feedback" and "+ judged neighbours" twins: BM25, the served model, those asked for."""
    return ["BM25", VARIANT_NAMES["delta-32-lex3"], *labels]


def _refuse(labels: Sequence[str], why: str) -> None:
    if labels:
        raise click.BadParameter(why.format(labels=labels), param_hint="--extra/--ensemble")


def check_row_labels(labels: Sequence[str]) -> None:
    """--extra/--ensemble labels must name new rows, each with a run file of its own."""
    from es_rerank.ranking.feedback import FEEDBACK_ROW_SUFFIX
    from es_rerank.ranking.neighbours import FUSED_ROW_SUFFIX
    from training.evaluate import run_tag

    built_in = {*BASELINE_ROWS, "DRMM", *VARIANT_NAMES.values()}
    suffixes = (FEEDBACK_ROW_SUFFIX, FUSED_ROW_SUFFIX)
    _refuse(
        sorted({label for label in labels if label in built_in or label.endswith(suffixes)}),
        f"row name(s) {{labels}} are built-in rows (names ending in {' or '.join(repr(s) for s in suffixes)} "
        "included); give the extra checkpoints other labels",
    )
    _refuse(
        sorted({label for label in labels if labels.count(label) > 1}),
        "row name(s) {labels} given twice; each row needs its own label",
    )
    twins = [
        row + suffix
        for row in twinned_rows(labels)
        for suffix in (FEEDBACK_ROW_SUFFIX, FUSED_ROW_SUFFIX, FEEDBACK_ROW_SUFFIX + FUSED_ROW_SUFFIX)
    ]
    rows = [*built_in, *labels, *twins]
    tags = [run_tag(row) for row in rows]
    _refuse(
        sorted({row for row, tag in zip(rows, tags) if tags.count(tag) > 1} - built_in),
        "rows {labels} differ only in punctuation or spaces and would share a run "
        "file; give labels that differ in letters or digits",
    )
    too_long = sorted({row for row, tag in zip(rows, tags) if len(f"{tag}.run".encode()) > MAX_FILE_NAME_BYTES})
    _refuse(  # found now, not when the report is half written
        [row[:40] + "..." for row in too_long],
        "row(s) {labels} make run file names longer than " + str(MAX_FILE_NAME_BYTES) + " bytes; give shorter labels",
    )
