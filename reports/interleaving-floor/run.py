"""The interleaving floor of issue 34: simulated users on a gateway that interleaves the served default with a
candidate; `esrr experiment report` must tell the served default from BM25 (p < 0.05) and a ranker from itself
(a tie, p > 0.05).

    ESRR_HOME=artifacts python reports/interleaving-floor/run.py --sessions 2000 --seed 0 --out DIR/seed-0
    python reports/interleaving-floor/run.py --table --out DIR    # DIR/table.md over the seeds run

ESRR_HOME must hold the served NFCorpus index (`esrr index build`). The run works in a home of
its own under --work: the index copied, the judged-neighbour votes built from the train
judgments (`esrr neighbours build`), no model (ESRR_GATEWAY_RERANK=false: the served default
is BM25 + candidate feedback + judged-neighbour votes, what a gateway without workers serves).
Per experiment (ESRR_EXPERIMENT=bm25, then votes:<the served votes file> against itself) it
starts `esrr serve` with its own event store, plays --sessions sessions of the informational
click model on the train queries (`esrr simulate`, seed --seed), waits until the gateway
stored them, stops it and runs `esrr experiment report`. Writes --out/<experiment>/ the
simulate tally and the report (JSON and text), and --out/summary.json with the verdict over
the first 100, 200, 500 and 1,000 impressions too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # reports/: the shared helpers
from simulated_gateway import esrr, start_gateway, stop_gateway


def prefixes(store: Path, arm: str, counts: tuple[int, ...] = (100, 200, 500, 1000)) -> list[dict]:
    """The verdict over the first ``counts`` interleaved impressions: how many the test needs."""
    from es_rerank.learning.experiment import outcomes
    from es_rerank.learning.store import open_store
    from es_rerank.ranking.interleaving import verdict

    opened = open_store(str(store))
    found = outcomes([event for event, _ in opened.impressions()], [event for event, _ in opened.clicks()], arm)
    opened.close()
    rows = []
    for count in counts:
        if count <= len(found):
            first = verdict(found[:count])
            rows.append(
                {
                    "impressions": count,
                    "wins": first.wins,
                    "ties": first.ties,
                    "losses": first.losses,
                    "p_value": first.p_value,
                }
            )
    return rows


def table(out: Path) -> str:
    """The markdown table over every seed-*/summary.json under ``out`` (``--table``)."""
    lines = [
        "| seed | candidate | impressions | wins / ties / losses | unclicked | p | preference | p at 100 / 200 / "
        "500 / 1,000 impressions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(out.glob("seed-*/summary.json"), key=lambda found: int(found.parent.name.split("-")[1])):
        summary = json.loads(path.read_text(encoding="utf-8"))
        for row in summary["experiments"]:
            name = "BM25" if row["candidate"] == "bm25" else "itself (the served votes)"
            first = " / ".join(f"{step['p_value']:.2g}" for step in row["first"])
            lines.append(
                f"| {summary['seed']} | {name} | {row['impressions']:,} | {row['wins']:,} / {row['ties']:,} / "
                f"{row['losses']:,} | {row['unclicked']} | {row['p_value']:.3g} | {row['preference']:+.3f} | "
                f"{first} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="informational")
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--work", type=Path, default=Path("/tmp/esrr-interleaving-floor"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--candidates", default="bm25,self", help="which experiments: bm25, self (comma-separated)")
    parser.add_argument("--table", action="store_true", help="only write --out/table.md over the seeds run")
    options = parser.parse_args()
    if options.table:
        (options.out / "table.md").write_text(table(options.out), encoding="utf-8")
        return
    source = Path(os.environ.get("ESRR_HOME", "artifacts")).resolve()
    if not (source / "indexes").is_dir():
        sys.exit(f"{source / 'indexes'} is missing: `esrr index build` first")
    shutil.rmtree(options.work, ignore_errors=True)
    home = options.work / "home"
    shutil.copytree(source / "indexes", home / "indexes")
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
        "ESRR_EVENTS_RETENTION_DAYS": "0",
    }
    if os.environ.get("ESRR_NFCORPUS"):
        base["ESRR_NFCORPUS"] = os.environ["ESRR_NFCORPUS"]
    esrr(base, "neighbours", "build", log=options.work / "neighbours.log")
    served_votes = home / "models" / "judged-neighbours.json"
    summary = {
        "command": " ".join(sys.argv),
        "sessions": options.sessions,
        "seed": options.seed,
        "model": options.model,
        "served_default": "BM25 + candidate feedback + judged neighbours (train judgments), ESRR_GATEWAY_RERANK=false",
        "experiments": [],
    }
    chosen = options.candidates.split(",")
    for experiment, folder in (("bm25", "bm25"), (f"votes:{served_votes}", "self")):
        if folder not in chosen:
            continue
        target = options.out / folder
        target.mkdir(parents=True, exist_ok=True)
        store = options.work / f"{folder}.sqlite3"
        env = {**base, "ESRR_EXPERIMENT": experiment, "ESRR_EVENTS_URL": str(store)}
        began = time.monotonic()
        gateway = start_gateway(env, options.port, options.work / f"serve-{folder}.log")
        try:
            esrr(
                env,
                "simulate",
                "--url",
                f"http://127.0.0.1:{options.port}",
                "--model",
                options.model,
                "--sessions",
                str(options.sessions),
                "--seed",
                str(options.seed),
                "--json-out",
                str(target / "simulate.json"),
                log=options.work / f"simulate-{folder}.log",
            )
        finally:
            stop_gateway(gateway, store, options.sessions)
        text = esrr(
            env,
            "experiment",
            "report",
            "--json-out",
            str(target / "report.json"),
            log=options.work / f"report-{folder}.log",
        )
        (target / "report.txt").write_text(text, encoding="utf-8")
        verdict = json.loads((target / "report.json").read_text(encoding="utf-8"))
        summary["experiments"].append(
            {
                "candidate": folder,
                **verdict,
                "seconds": round(time.monotonic() - began, 1),
                "first": prefixes(store, verdict["experiment"]),
            }
        )
        print(text, flush=True)
    (options.out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
