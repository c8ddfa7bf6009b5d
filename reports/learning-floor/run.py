"""The learning floor of issue 34: from no votes, simulated users click, `esrr learn` rebuilds the votes, and
`esrr eval` measures nDCG@10 on NFCorpus test against BM25, at checkpoints of simulated sessions.

    ESRR_HOME=artifacts python reports/learning-floor/run.py --model informational \
        --checkpoints 1000,5000,20000 --seed 0

ESRR_HOME must hold the served NFCorpus index and the current embeddings (`esrr index build`,
`esrr embeddings train`; `esrr eval` needs them). The run works in a home of its own under
--work: the index copied, the embeddings linked, no model and no votes, its own event store.
Each round starts `esrr serve` (ESRR_GATEWAY_RERANK=false: BM25, the candidate feedback and,
from the second round, the votes learned so far), plays the round's sessions with `esrr
simulate` on the train queries (seed: --seed * 1000 + the round), waits until the gateway
has stored them, stops it, runs `esrr learn` over every event so far and `esrr eval` on test.
Test queries are never searched by the simulated users nor used to choose anything: --split dev
measures dev instead, to choose settings. --relearn-every N also relearns (without measuring) every N
sessions, the next round's gateway serving those votes; --explore SHARE (--explore-slots,
--explore-depth) serves with ESRR_EXPLORE, docs/learning.md#exploration-esrr_explore.
Writes --out/MODEL/: summary.json, and per checkpoint the simulate tally, the learn report and
eval's table.md and results.json. `--chart` then draws --out/chart.png and --out/table.md
over every model's summary.json.
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

MEASURE = "nDCG@10"


def measured(results: Path) -> dict:
    """nDCG@10 of BM25 and of the served default, its change and paired t-test p-value, from eval's results."""
    report = json.loads(results.read_text(encoding="utf-8"))
    rows = {row["name"]: row for row in report["rows"]}
    base, served = rows["BM25"], rows[report["served_default"]]
    value, bm25 = served["means"][MEASURE], base["means"][MEASURE]
    return {
        "served_default": report["served_default"],
        "bm25": round(bm25, 4),
        "served": round(value, 4),
        "change": round(value / bm25 - 1, 4),
        "p": served["p_values"].get(MEASURE, 1.0),
    }


def run(model: str, checkpoints: list[int], seed: int, port: int, work: Path, out: Path, options) -> None:
    source = Path(os.environ.get("ESRR_HOME", "artifacts")).resolve()
    for needed in ("indexes", "embeddings"):
        if not (source / needed).is_dir():
            sys.exit(f"{source / needed} is missing: `esrr index build` and `esrr embeddings train` first")
    work = work / model
    shutil.rmtree(work, ignore_errors=True)
    home = work / "home"
    shutil.copytree(source / "indexes", home / "indexes")
    (home / "embeddings").symlink_to(source / "embeddings", target_is_directory=True)
    store = work / "events.sqlite3"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_EVENTS_URL": str(store),
        "ESRR_GATEWAY_RERANK": "false",
        "ESRR_EVENTS_RETENTION_DAYS": "0",
        "ESRR_NFCORPUS": os.environ.get("ESRR_NFCORPUS", ""),
        "ESRR_EXPLORE": str(options.explore),
        "ESRR_EXPLORE_SLOTS": str(options.explore_slots),
        "ESRR_EXPLORE_DEPTH": str(options.explore_depth),
    }
    env = {k: v for k, v in env.items() if v}
    target = out / model
    target.mkdir(parents=True, exist_ok=True)
    summary = {
        "model": model,
        "seed": seed,
        "split": options.split,
        "explore": [options.explore, options.explore_slots, options.explore_depth] if options.explore else None,
        "relearn_every": options.relearn_every,
        "checkpoints": [],
        "command": " ".join(sys.argv),
    }
    # The rounds: the gateway serves the votes learned at the end of the previous one (a site relearning nightly).
    every = options.relearn_every
    rounds = sorted({*checkpoints, *(range(every, max(checkpoints), every) if every else ())})

    started = time.monotonic()
    esrr(
        env, "eval", "--no-baselines", "--split", options.split, "--out", str(work / "eval-0"), log=work / "eval-0.log"
    )
    summary["checkpoints"].append({"sessions": 0, **measured(work / "eval-0" / "results.json")})
    done = 0
    for round_number, checkpoint in enumerate(rounds, start=1):
        step = target / f"{checkpoint}" if checkpoint in checkpoints else work / f"round-{checkpoint}"
        step.mkdir(exist_ok=True)
        gateway = start_gateway(env, port, work / f"serve-{checkpoint}.log")
        began = time.monotonic()
        try:
            esrr(
                env,
                "simulate",
                "--url",
                f"http://127.0.0.1:{port}",
                "--model",
                model,
                "--sessions",
                str(checkpoint - done),
                "--seed",
                str(seed * 1000 + round_number),
                "--json-out",
                str(step / "simulate.json"),
                log=work / f"simulate-{checkpoint}.log",
            )
        finally:
            stop_gateway(gateway, store, checkpoint)
        simulated_s = time.monotonic() - began
        done = checkpoint
        esrr(env, "learn", "--json-out", str(step / "learn.json"), log=work / f"learn-{checkpoint}.log")
        if checkpoint not in checkpoints:
            continue
        esrr(
            env,
            "eval",
            "--no-baselines",
            "--split",
            options.split,
            "--out",
            str(work / f"eval-{checkpoint}"),
            log=work / f"eval-{checkpoint}.log",
        )
        for name in ("table.md", "results.json"):
            shutil.copy(work / f"eval-{checkpoint}" / name, step / f"eval-{name}")
        learned = json.loads((step / "learn.json").read_text(encoding="utf-8"))
        row = {
            "sessions": checkpoint,
            **measured(work / f"eval-{checkpoint}" / "results.json"),
            "clicks": learned["clicks"],
            "relevant_judgments": learned["votes"]["relevant_judgments"],
            "vote_queries": learned["votes"]["queries"],
            "simulate_s": round(simulated_s, 1),
            "learn_s": learned["seconds"]["total"],
        }
        summary["checkpoints"].append(row)
        print(json.dumps(row), flush=True)
        (target / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    summary["seconds"] = round(time.monotonic() - started, 1)
    (target / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")


def _name(summary: dict) -> str:
    """A run's name in the table and the chart: its click model, and its exploration if it explored."""
    explore = summary.get("explore") or (_explore_of(summary.get("command", "")))
    if not explore:
        return summary["model"]
    share, slots, depth = explore
    return f"{summary['model']}, exploring {share:.0%} (places {11 - slots}-10 from 11-{depth})"


def _explore_of(command: str) -> list | None:
    """The exploration of a summary written before summaries recorded it, read off its command line."""
    words = command.split()
    value = {name: float(words[i + 1]) for i, name in enumerate(words[:-1]) if name.startswith("--explore")}
    if not value.get("--explore"):
        return None
    return [value["--explore"], int(value.get("--explore-slots", 3)), int(value.get("--explore-depth", 30))]


def chart(out: Path) -> None:
    """table.md and chart.png over every model's summary.json under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = [json.loads(path.read_text()) for path in sorted(out.glob("*/summary.json"))]
    lines = [
        "| click model | sessions | clicks | relevant judgments | nDCG@10 | BM25 | change | p (paired t) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    figure, axes = plt.subplots(figsize=(10, 4))
    for summary in summaries:
        points, name = summary["checkpoints"], _name(summary)
        for row in points:
            lines.append(
                f"| {name} | {row['sessions']:,} | {row.get('clicks', 0):,} | "
                f"{row.get('relevant_judgments', 0):,} | {row['served']:.4f} | {row['bm25']:.4f} | "
                f"{row['change']:+.1%} | {row['p']:.2g} |"
            )
        axes.plot(
            [max(row["sessions"], 100) for row in points],
            [row["served"] for row in points],
            marker="o",
            label=name,
        )
    oracles = [  # oracle.py: true grades of every pair the 20,000 informational sessions of a run were shown
        ("oracle", "black", "the pairs shown to 20,000 informational sessions", "shown pairs (20k informational)"),
        (
            "oracle-explore",
            "dimgrey",
            "the pairs shown to 20,000 informational sessions exploring 50%",
            "shown pairs (20k exploring 50%)",
        ),
        (
            "oracle-explore-100",
            "silver",
            "the pairs shown to 20,000 informational sessions exploring every page",
            "shown pairs (20k exploring 100%)",
        ),
    ]
    for folder, color, shown, label in oracles:
        oracle = out / folder / "eval-results.json"
        if not oracle.is_file():
            continue
        row = measured(oracle)
        axes.plot(
            [20_000],
            [row["served"]],
            marker="*",
            markersize=12,
            linestyle="none",
            color=color,
            label=f"true grades, {label}",
        )
        lines.append(
            f"| true grades of {shown} (oracle.py) | 20,000 | - | "
            f"- | {row['served']:.4f} | {row['bm25']:.4f} | {row['change']:+.1%} | {row['p']:.2g} |"
        )
    if summaries:
        bm25 = summaries[0]["checkpoints"][0]["bm25"]
        axes.axhline(bm25, color="grey", linestyle="--", label="BM25")
        axes.axhline(bm25 * 1.1, color="grey", linestyle=":", label="BM25 + 10% (floor)")
    axes.set_xscale("log")
    axes.set_xlabel("simulated sessions (train queries; 0 drawn at 100)")
    axes.set_ylabel(f"nDCG@10, NFCorpus {summaries[0].get('split', 'test') if summaries else 'test'}")
    axes.set_title("Served default with click-derived votes")
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    figure.savefig(out / "chart.png", dpi=120)
    (out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="informational", choices=["perfect", "navigational", "informational"])
    parser.add_argument("--checkpoints", default="1000,5000,20000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18800)
    parser.add_argument("--work", type=Path, default=Path("/tmp/esrr-learning-floor"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument(
        "--split", default="test", choices=["dev", "test"], help="measured on: dev to choose, test once"
    )
    parser.add_argument("--relearn-every", type=int, default=0, help="also relearn every N sessions (0: checkpoints)")
    parser.add_argument("--explore", type=float, default=0.0, help="ESRR_EXPLORE: share of exploring first pages")
    parser.add_argument("--explore-slots", type=int, default=3, help="ESRR_EXPLORE_SLOTS")
    parser.add_argument("--explore-depth", type=int, default=30, help="ESRR_EXPLORE_DEPTH")
    parser.add_argument("--chart", action="store_true", help="only draw table.md and chart.png from the summaries")
    options = parser.parse_args()
    if options.chart:
        chart(options.out)
        return
    run(
        options.model,
        sorted(int(value) for value in options.checkpoints.split(",")),
        options.seed,
        options.port,
        options.work,
        options.out,
        options,
    )
    chart(options.out)


if __name__ == "__main__":
    main()
