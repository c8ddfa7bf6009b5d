"""The grade thresholds of `esrr learn`, compared on NFCorpus dev (never test): votes learned from one event store
under each rule, each measured with `esrr eval --split dev`.

    ESRR_HOME=artifacts python reports/learning-floor/dev_thresholds.py EVENTS.sqlite3 WORK [--out FILE]

ESRR_HOME must hold the NFCorpus index and the embeddings; a scratch home under WORK gets the
votes, so ESRR_HOME's are untouched. The rules: the default (thirds of the way from the mean
attractiveness to 1), the mean itself with halfway for grade 2, and two stricter pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def esrr(home: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-c", "from es_rerank.cli import main; main()", *args],
        check=True,
        env={**os.environ, "ESRR_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def dev_home(work: Path) -> Path:
    """A home under ``work`` with ESRR_HOME's indexes copied (esrr learn rewrites their votes) and its embeddings."""
    source = Path(os.environ.get("ESRR_HOME", "artifacts")).resolve()
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(source / "indexes", home / "indexes")
    (home / "embeddings").symlink_to(source / "embeddings", target_is_directory=True)
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events")
    parser.add_argument("work", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    home = dev_home(options.work)
    lines = [f"votes learned from {options.events}, measured on NFCorpus dev (nDCG@10 of the served default)"]
    rules: list[tuple[str, list[str]]] = [("thirds (the default)", [])]
    mean = None
    for index in range(4):
        if index == 1:  # the rules relative to the mean need it: the first learn reports it
            rules += [
                ("the mean, halfway", ["--grade-1", f"{mean:.4f}", "--grade-2", f"{(1 + mean) / 2:.4f}"]),
                ("0.72, 0.90", ["--grade-1", "0.72", "--grade-2", "0.9"]),
                ("0.80, 0.95", ["--grade-1", "0.8", "--grade-2", "0.95"]),
            ]
        name, extra = rules[index]
        learned, measured = options.work / f"learn-{index}.json", options.work / f"eval-{index}"
        esrr(home, "learn", "--events", options.events, *extra, "--json-out", str(learned))
        esrr(home, "eval", "--no-baselines", "--split", "dev", "--out", str(measured))
        report = json.loads(learned.read_text())
        mean = report["mean_attractiveness"] if mean is None else mean
        results = json.loads((measured / "results.json").read_text())
        rows = {row["name"]: row for row in results["rows"]}
        lines.append(
            f"{name:<22} grade 1 above {report['thresholds']['grade_1_above']:.3f}, grade 2 from "
            f"{report['thresholds']['grade_2_from']:.3f}: {report['votes']['relevant_judgments']:>6,} relevant "
            f"judgments, nDCG@10 {rows[results['served_default']]['means']['nDCG@10']:.4f} "
            f"(BM25 {rows['BM25']['means']['nDCG@10']:.4f})"
        )
        print(lines[-1], flush=True)
    if options.out is not None:
        options.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
