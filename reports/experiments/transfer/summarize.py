"""One table of every condition from the results.json files that `run.sh SPLIT` wrote under reports/transfer/SPLIT."""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONDITIONS = ("standard", "vid-desc", "no-titles", "topic-disjoint")
MODELS = {"delta-32-lex3": "paper's Lex3", "delta-32-lex3-window": "window-standardised"}
STAGES = (("served: {m}", "model alone"), ("served: {m} + BM25 guard", "+ BM25 guard"),
          ("served: {m} + BM25 guard + candidate feedback", "+ candidate feedback"))


def cell(row: dict | None) -> str:
    """nDCG@10 with its change against BM25 and the paired t-test."""
    if row is None:
        return "-"
    p = row["p_values"].get("nDCG@10")
    return f"{row['means']['nDCG@10']:.4f} ({row['change']:+.1f}%, p={p:.2g})"


def main(folder: Path) -> None:
    """Print the markdown table of ``folder``'s conditions and models."""
    lines = [f"nDCG@10 on the {folder.name} split; in brackets the change against BM25 and a paired t-test. "
             "The last column is the served default: the row `esrr eval` gives its verdict on.", "",
             "| condition | queries | BM25 | model | model alone | + BM25 guard | + candidate feedback | served default "
             "| verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for condition in CONDITIONS:
        for model, label in MODELS.items():
            path = folder / condition / model / "results.json"
            if not path.is_file():
                continue
            results = json.loads(path.read_text(encoding="utf-8"))
            rows = {r["name"]: r for r in results["rows"]}
            base = rows["BM25"]["means"]["nDCG@10"]
            for row in rows.values():
                row["change"] = (row["means"]["nDCG@10"] / base - 1) * 100 if base else float("nan")
            stages = [cell(rows.get(name.format(m=model))) for name, _ in STAGES]
            served = rows[results["served_default"]]
            default = f"{cell(served)}: {results['served_default'].removeprefix('served default: ')}"
            queries = sum(served["wins_ties_losses"])
            verdict = results["verdict"].split(" (")[0].removeprefix("the reranker ")
            lines.append(f"| {condition} | {queries} | {base:.4f} | {label} | {' | '.join(stages)} | {default} "
                         f"| {verdict} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
