"""Options of `esrr learn` compared on NFCorpus dev (never test): votes learned from one event store under each
set of options, each measured with `esrr eval --split dev`.

    ESRR_HOME=artifacts python reports/learning-floor/dev_options.py EVENTS.sqlite3 WORK --out FILE \
        --try "" --try "--model pbm" --try "--weight 3"

ESRR_HOME must hold the NFCorpus index and the embeddings; a scratch home under WORK gets the
votes, so ESRR_HOME's are untouched. Each --try is one set of `esrr learn` options ("" the defaults).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from dev_thresholds import dev_home, esrr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events")
    parser.add_argument("work", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--try", dest="tries", action="append", default=[], help="options of esrr learn")
    options = parser.parse_args()
    home = dev_home(options.work)
    lines = [f"votes learned from {options.events}, measured on NFCorpus dev (nDCG@10 of the served default)"]
    for index, tried in enumerate(options.tries):
        learned, measured = options.work / f"learn-{index}.json", options.work / f"eval-{index}"
        esrr(home, "learn", "--events", options.events, *shlex.split(tried), "--json-out", str(learned))
        esrr(home, "eval", "--no-baselines", "--split", "dev", "--out", str(measured))
        report = json.loads(learned.read_text())
        results = json.loads((measured / "results.json").read_text())
        rows = {row["name"]: row for row in results["rows"]}
        served, bm25 = rows[results["served_default"]]["means"]["nDCG@10"], rows["BM25"]["means"]["nDCG@10"]
        lines.append(
            f"esrr learn {tried or '(defaults)':<28} {report['votes']['relevant_judgments']:>6,} relevant judgments, "
            f"nDCG@10 {served:.4f} (BM25 {bm25:.4f}, {served / bm25 - 1:+.1%})"
        )
        print(lines[-1], flush=True)
        options.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
