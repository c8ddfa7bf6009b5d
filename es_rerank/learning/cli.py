"""``esrr simulate``: simulated users searching a running gateway and clicking by a cascade click model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from es_rerank.cli_options import json_out_option
from es_rerank.learning.simulation import CLICK_MODELS


@click.command(name="simulate")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway (esrr serve).")
@click.option("--model", "model_name", type=click.Choice(sorted(CLICK_MODELS)), default="informational",
              show_default=True, help="The cascade click model the users follow.")
@click.option("--sessions", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Simulated sessions: one search and its clicks each.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed of every draw (queries, clicks, ids): the same seed replays the same users.")
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A BEIR folder with a train split (queries.jsonl, qrels/train.tsv); default NFCorpus.")
@click.option("--split", default="train", show_default=True, type=click.Choice(["train", "dev"]),
              help="The judged queries the users search (never test: it measures what they taught).")
@json_out_option("Also write the tally as JSON.")
def simulate(url: str, model_name: str, sessions: int, seed: int, data: Path | None, split: str,
             json_out: Path | None) -> None:
    """Simulated users search the gateway over a collection's judged queries and click by a cascade model; their
    impressions and clicks go to POST /_esrr/events, as the site page's do."""
    import urllib3
    from tqdm import tqdm

    from es_rerank.cli_options import load_settings
    from es_rerank.learning.simulation import GatewayRefused, run_sessions
    from es_rerank.settings import CommonSettings
    from index_setup.nfcorpus import NFCorpus

    try:
        collection = NFCorpus.locate(data, load_settings(CommonSettings))
        queries, qrels = collection.queries(split), collection.qrels(split)
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    url = url.rstrip("/")
    pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(30))

    def post(path: str, body: Any) -> tuple[int, Any]:
        response = pool.request("POST", url + path, body=json.dumps(body).encode("utf-8"),
                                headers={"Content-Type": "application/json"})
        try:
            return response.status, json.loads(response.data) if response.data else None
        except ValueError:
            return response.status, response.data[:200].decode("utf-8", "replace")

    model = CLICK_MODELS[model_name]
    try:
        with tqdm(total=sessions, unit="session", desc=f"simulating ({model_name})") as progress:
            tally = run_sessions(post, queries, qrels, model, sessions, seed, progress.update)
    except GatewayRefused as error:
        raise click.ClickException(f"{error} (the gateway needs ESRR_EVENTS=true)") from None
    except urllib3.exceptions.HTTPError as error:
        raise click.ClickException(f"cannot reach the gateway at {url} ({error}); start it with `esrr serve`, or "
                                   "pass its --url") from None
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    figures = {"url": url, "model": model_name, "seed": seed, "split": split, **tally.as_dict()}
    by_grade = ", ".join(f"grade {grade}: {count}" for grade, count in figures["clicks_by_grade"].items())
    click.echo(f"{tally.sessions:,} sessions ({model_name}, seed {seed}) over {len(queries):,} {split} queries: "
               f"{tally.clicks:,} clicks ({by_grade}); ranked by {', '.join(figures['rankers'])}")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
