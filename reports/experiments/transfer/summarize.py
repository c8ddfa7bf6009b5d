"""One table of every condition from the results.json files that `run.sh SPLIT` wrote under reports/transfer/SPLIT."""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONDITIONS = ("standard", "vid-desc", "no-titles", "topic-disjoint", "ohsumed-pseudo", "bc5cdr-pseudo")
LABELS = {"delta-32-lex3": "paper's Lex3", "delta-32-lex3-window": "window-standardised"}
STAGES = (
    ("served: {m}", "model alone"),
    ("served: {m} + BM25 guard", "+ BM25 guard"),
    ("served: {m} + BM25 guard + candidate feedback", "+ candidate feedback"),
)


def stage_row(rows: dict[str, dict], name: str) -> dict | None:
    """The row of a served stage, also when it is the last one (then named "served default: ...")."""
    return rows.get(name) or rows.get(name.replace("served: ", "served default: ", 1))


def cell(row: dict | None) -> str:
    """nDCG@10 with its change against BM25 and the paired t-test."""
    if row is None:
        return "-"
    p = row["p_values"].get("nDCG@10")
    return f"{row['means']['nDCG@10']:.4f} ({row['change']:+.1f}%, p={p:.2g})"


def _variant_and_seed(model: str) -> tuple[str, int]:
    """delta-32-lex3-window-seed14 -> ("delta-32-lex3-window", 14); no seed suffix: the recipe's seed, 13."""
    variant, _, seed = model.partition("-seed")
    return variant, int(seed) if seed.isdigit() else 13


def main(folder: Path) -> None:
    """Print the markdown table of ``folder``'s conditions and models."""
    lines = [
        f"nDCG@10 on the {folder.name} split; in brackets the change against BM25 and a paired t-test. "
        "The last column is the served default: the row `esrr eval` gives its verdict on.",
        "",
        "| condition | queries | BM25 | model | model alone | + BM25 guard | + candidate feedback "
        "| served default | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    models = sorted({p.parent.name for p in folder.glob("*/*/results.json")}, key=_variant_and_seed)
    for condition in CONDITIONS:
        for model in models:
            variant, seed = _variant_and_seed(model)
            label = f"{LABELS.get(variant, variant)}, seed {seed}"
            path = folder / condition / model / "results.json"
            if not path.is_file():
                continue
            results = json.loads(path.read_text(encoding="utf-8"))
            rows = {r["name"]: r for r in results["rows"]}
            base = rows["BM25"]["means"]["nDCG@10"]
            for row in rows.values():
                row["change"] = (row["means"]["nDCG@10"] / base - 1) * 100 if base else float("nan")
            stages = [cell(stage_row(rows, name.format(m=model))) for name, _ in STAGES]
            served = rows[results["served_default"]]
            default = f"{cell(served)}: {results['served_default'].removeprefix('served default: ')}"
            queries = sum(served["wins_ties_losses"])
            verdict = results["verdict"].split(" (")[0].removeprefix("the reranker ")
            lines.append(
                f"| {condition} | {queries} | {base:.4f} | {label} | {' | '.join(stages)} | {default} | {verdict} |"
            )
    lines += ["", *seed_means(folder, models)]
    print("\n".join(lines))


def seed_means(folder: Path, models: list[str]) -> list[str]:
    """Mean over the seeds of each variant: the change against BM25, model alone and as served without votes."""
    changes: dict[tuple[str, str, str], list[float]] = {}
    for condition in CONDITIONS:
        for model in models:
            path = folder / condition / model / "results.json"
            if not path.is_file():
                continue
            full = {r["name"]: r for r in json.loads(path.read_text(encoding="utf-8"))["rows"]}
            rows = {name: r["means"]["nDCG@10"] for name, r in full.items()}
            variant, _ = _variant_and_seed(model)
            for name, stage in ((STAGES[0][0], "model alone"), (STAGES[2][0], "+ guard + feedback")):
                row = stage_row(full, name.format(m=model))
                if row is not None:
                    value = row["means"]["nDCG@10"]
                    changes.setdefault((variant, condition, stage), []).append((value / rows["BM25"] - 1) * 100)
    variants = sorted({v for v, _, _ in changes})
    out = [
        "Mean change against BM25 over the seeds evaluated (their number in brackets):",
        "",
        "| variant | stage | " + " | ".join(CONDITIONS) + " | worst |",
        "|---|---|" + "---|" * (len(CONDITIONS) + 1),
    ]
    for variant in variants:
        for stage in ("model alone", "+ guard + feedback"):
            means = [changes.get((variant, c, stage)) for c in CONDITIONS]
            cells = [f"{sum(m) / len(m):+.1f}% ({len(m)})" if m else "-" for m in means]
            worst = min(sum(m) / len(m) for m in means if m)
            out.append(f"| {LABELS.get(variant, variant)} | {stage} | {' | '.join(cells)} | {worst:+.1f}% |")
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]))
