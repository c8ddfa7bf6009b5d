"""The table of docs/quality.md's adaptation section from the `esrr eval --adapted` reports of run.sh.

python reports/experiments/adapt/summarize.py reports/adapt/SPLIT > reports/adapt/SPLIT/summary.md
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ORDER = ("standard", "vid-desc", "no-titles", "topic-disjoint", "nfcorpus-pseudo", "ohsumed-pseudo")
MEASURE = "nDCG@10"


def cell(row: dict, base: float) -> str:
    mean, p = row["means"][MEASURE], row["p_values"].get(MEASURE, 1.0)
    return f"{mean:.4f} ({(mean / base - 1) * 100:+.1f}%, p={p:.2g})"


def main(folder: Path) -> None:
    reports = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*/results.json")}
    print(
        f"nDCG@10 on each condition's {folder.name.split('-')[0]} queries; brackets: change against BM25 and "
        "paired t-test; last column: the adapted default against the served default (`esrr eval --adapted`).\n"
    )
    print(
        "| condition | BM25 | served model alone | adapted model alone | served default | adapted default | "
        "adapted against served |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in sorted(reports, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
        report = reports[name]
        rows = {r["name"]: r for r in report["rows"]}
        base = rows["BM25"]["means"][MEASURE]
        served_alone = next(r for n, r in rows.items() if n.startswith("served: ") and "+" not in n)
        adapted_alone = next(r for n, r in rows.items() if n.startswith("adapted: served: ") and "+" not in n)
        change = re.search(r"\(([+-][\d.]+%), paired t-test (p=[^;]+);", report["adaptation"])
        print(
            f"| {name} | {base:.4f} | {cell(served_alone, base)} | {cell(adapted_alone, base)} | "
            f"{cell(rows[report['served_default']], base)} | {cell(rows[report['adapted_default']], base)} | "
            f"{change.group(1)}, {change.group(2)} |"
        )
    print(
        "\nServed default: " + next(iter(reports.values()))["served_default"].removeprefix("served default: ")
        if reports
        else ""
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
