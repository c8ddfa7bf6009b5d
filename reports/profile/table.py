"""The stage table of reports/profile/README.md from the JSON that ``stages.py`` wrote before and after the cuts.

python reports/profile/table.py reports/profile/stages
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(folder: Path) -> None:
    """Print each stage's p50 and mean, before and after (the mean of the runs of each), as a Markdown table."""
    runs = {
        name: [json.loads(path.read_text()) for path in sorted(folder.glob(f"{name}-*.json"))]
        for name in ("before", "after")
    }

    def value(name: str, stage: str, key: str) -> float:
        return statistics.fmean(run["stages_ms"][stage][key] for run in runs[name])

    def total(name: str, key: str) -> float:
        return statistics.fmean(run["total_ms"][key] for run in runs[name])

    print("| stage | before p50 | before mean | after p50 | after mean | after / before (means) |")
    print("|---|---|---|---|---|---|")
    for stage in runs["before"][0]["stages_ms"]:
        before, after = value("before", stage, "mean"), value("after", stage, "mean")
        print(
            f"| {stage} | {value('before', stage, 'p50'):.2f} | {before:.2f} | {value('after', stage, 'p50'):.2f} "
            f"| {after:.2f} | {after / before:.2f} |"
        )
    print(
        f"| total | {total('before', 'p50'):.2f} | {total('before', 'mean'):.2f} | {total('after', 'p50'):.2f} "
        f"| {total('after', 'mean'):.2f} | {total('after', 'mean') / total('before', 'mean'):.2f} |"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
