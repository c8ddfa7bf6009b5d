"""``esrr select-features``: greedy forward selection of Lex features on NFCorpus dev (the paper's section 5.1)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from es_rerank.cli_options import writable_dir
from es_rerank.machine import machine_description
from training.commands.workspace import as_cli_error, command_line, open_workspace, split_queries, with_relevant

if TYPE_CHECKING:
    from training.feature_selection import SelectionStep
    from training.train import TrainConfig


def selection_table(steps: list[SelectionStep], paper: float, header: str) -> str:
    """The Markdown report: each step's feature, dev NDCG@20 and runner-up, then the paper's Lex3."""
    from es_rerank.lex import LEX3

    lines = [header, "| step | feature added | dev NDCG@20 | runner-up |", "|---|---|---|---|"]
    for i, step in enumerate(steps, 1):
        second = sorted(step.trials.items(), key=lambda kv: -kv[1])[1:2]
        runner = f"{second[0][0]} ({second[0][1]:.4f})" if second else ""
        lines.append(f"| {i} | {step.added} | {step.dev_ndcg20:.4f} | {runner} |")
    lines.append(f"\nThe paper's Lex3 ({', '.join(LEX3)}) with the same ranker: dev NDCG@20 {paper:.4f}.")
    return "\n".join(lines) + "\n"


def selection_record(
    ranker: str,
    train_config: TrainConfig,
    counts: tuple[int, int],
    seconds: float,
    steps: list[SelectionStep],
    paper: float,
) -> dict[str, object]:
    """The JSON record of a selection: its command, machine, steps (``counts``: train and dev queries) and the
    paper's Lex3 (``paper``: its dev NDCG@20) with the same ranker."""
    from es_rerank.lex import LEX3

    return {
        "command": command_line(),
        "machine": machine_description(),
        "ranker": ranker,
        "train": asdict(train_config),
        "train_queries": counts[0],
        "dev_queries": counts[1],
        "seconds": seconds,
        "steps": [asdict(s) for s in steps],
        "paper_lex3": {"features": list(LEX3), "dev_ndcg20": paper},
    }


@click.command(name="select-features")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option(
    "--ranker",
    default="delta",
    show_default=True,
    type=click.Choice(["delta", "linear"]),
    help="delta: train Delta-32 with the features (the paper's criterion); linear: a fast linear proxy.",
)
@click.option(
    "--max-features", default=3, show_default=True, type=click.IntRange(1, 18), help="Stop after this many features."
)
@click.option(
    "--max-epochs",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Epochs per trial (early stopping on dev).",
)
@click.option(
    "--patience",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Epochs without a dev improvement per trial.",
)
@click.option("--train-queries", type=click.IntRange(min=1), help="Use only the first N training queries (quick runs).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports/lex-selection"),
    show_default=True,
    help="Where selection-<ranker>.md and .json go.",
)
def select_features(
    *,
    data: Path | None,
    ranker: str,
    max_features: int,
    max_epochs: int,
    patience: int,
    train_queries: int | None,
    out: Path,
) -> None:
    """Greedy forward selection of Lex features on NFCorpus dev NDCG@20 (section 5.1)."""
    from es_rerank.lex import ALL_FEATURES, LEX3
    from training.data import TrainingError, build_candidates
    from training.feature_selection import delta_evaluator, greedy_select, linear_evaluator
    from training.train import TrainConfig

    writable_dir(out, "pass a folder you can write to as --out")
    work = open_workspace(data)
    train_config = replace(TrainConfig(), max_epochs=max_epochs, patience=patience)
    dev_qrels = work.nfcorpus.qrels("dev")
    train_q = split_queries(work, "train", train_queries)
    train_c = build_candidates(train_q, work.nfcorpus.qrels("train"), work.backend, work.embeddings, ALL_FEATURES)
    dev_c = with_relevant(
        build_candidates(split_queries(work, "dev"), dev_qrels, work.backend, work.embeddings, ALL_FEATURES),
        work,
        "dev",
    )
    evaluate = (
        delta_evaluator(ALL_FEATURES, work.embeddings.vectors, train_c, dev_c, dev_qrels, work.doc_rows, train_config)
        if ranker == "delta"
        else linear_evaluator(ALL_FEATURES, train_c, dev_c, dev_qrels, train_config)
    )
    started = time.perf_counter()
    with as_cli_error(TrainingError):
        steps = greedy_select(ALL_FEATURES, evaluate, max_features)
        seconds = time.perf_counter() - started
        paper = evaluate(LEX3)
    stem = out / f"selection-{ranker}"
    record = selection_record(ranker, train_config, (len(train_q), len(dev_c)), seconds, steps, paper)
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    header = (
        f"Command: `{command_line()}`  \nMachine: {machine_description()}  \n"
        f"Ranker: {ranker}; {len(train_q)} train / {len(dev_c)} dev queries; {seconds:.0f} s\n"
    )
    table = selection_table(steps, paper, header)
    stem.with_suffix(".md").write_text(table, encoding="utf-8")
    click.echo(table)
