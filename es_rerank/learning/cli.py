"""``esrr simulate``: simulated users searching a running gateway and clicking by a cascade click model; ``esrr
learn``: the stored clicks become judgments through a click model, and the judged-neighbour votes are rebuilt."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from es_rerank.cli_options import FiniteFloat, json_out_option, vote_options
from es_rerank.learning.simulation import CLICK_MODELS
from es_rerank.ranking.neighbours import NeighbourParams

if TYPE_CHECKING:
    from es_rerank.learning.click_model import ModelName


@click.command(name="simulate")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The running gateway (esrr serve).")
@click.option(
    "--model",
    "model_name",
    type=click.Choice(sorted(CLICK_MODELS)),
    default="informational",
    show_default=True,
    help="The cascade click model the users follow.",
)
@click.option(
    "--sessions",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Simulated sessions: one search and its clicks each.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seed of every draw (queries, clicks, ids): the same seed replays the same users.",
)
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A BEIR folder with a train split (queries.jsonl, qrels/train.tsv); default NFCorpus.",
)
@click.option(
    "--split",
    default="train",
    show_default=True,
    type=click.Choice(["train", "dev"]),
    help="The judged queries the users search (never test: it measures what they taught).",
)
@json_out_option("Also write the tally as JSON.")
def simulate(
    *, url: str, model_name: str, sessions: int, seed: int, data: Path | None, split: str, json_out: Path | None
) -> None:
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
        response = pool.request(
            "POST", url + path, body=json.dumps(body).encode("utf-8"), headers={"Content-Type": "application/json"}
        )
        try:
            return response.status, json.loads(response.data) if response.data else None
        except ValueError:
            return response.status, response.data[:200].decode("utf-8", "replace")

    model = CLICK_MODELS[model_name]
    try:
        with tqdm(total=sessions, unit="session", desc=f"simulating ({model_name})") as progress:
            tally = run_sessions(post, queries, qrels, model, sessions, seed, advance=progress.update)
    except GatewayRefused as error:
        raise click.ClickException(f"{error} (the gateway needs ESRR_EVENTS=true)") from None
    except urllib3.exceptions.HTTPError as error:
        raise click.ClickException(
            f"cannot reach the gateway at {url} ({error}); start it with `esrr serve`, or pass its --url"
        ) from None
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    figures = {"url": url, "model": model_name, "seed": seed, "split": split, **tally.as_dict()}
    by_grade = ", ".join(f"grade {grade}: {count}" for grade, count in figures["clicks_by_grade"].items())
    click.echo(
        f"{tally.sessions:,} sessions ({model_name}, seed {seed}) over {len(queries):,} {split} queries: "
        f"{tally.clicks:,} clicks ({by_grade}); ranked by {', '.join(figures['rankers'])}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")


@click.command(name="learn")
@click.option(
    "--events",
    "events_url",
    default=None,
    help="The event store to learn from [ESRR_EVENTS_URL, default <home>/events/events.sqlite3].",
)
@click.option(
    "--model",
    "model_name",
    type=click.Choice(["dcm", "ubm", "pbm"]),
    default="dcm",
    show_default=True,
    help="The click model: dependent click model, user browsing model, or position-based "
    "(es_rerank/learning/click_model.py says why DCM).",
)
@click.option(
    "--min-sessions",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Judge a (query, document) pair only when it was shown in at least this many sessions.",
)
@click.option(
    "--min-clicks",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="A pair is judged relevant only with at least this many clicks.",
)
@click.option(
    "--grade-1",
    type=FiniteFloat(0, 1),
    default=None,
    help="Attractiveness above which a pair is grade 1 [default: a third of the way from the mean of the "
    "shown results to 1].",
)
@click.option(
    "--grade-2",
    type=FiniteFloat(0, 1),
    default=None,
    help="Attractiveness from which a pair is grade 2 [default: halfway from grade 1's to 1, i.e. two "
    "thirds from the mean].",
)
@click.option(
    "--with-qrels",
    is_flag=True,
    help="Combine with the judgments people made: the train qrels of --data (by query text; the higher grade wins).",
)
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="With --with-qrels: a BEIR folder with a train split (default NFCorpus).",
)
@vote_options(NeighbourParams)
@click.option(
    "--judgments-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the judgments go as TSV, with their evidence [default <home>/models/click-judgments.tsv].",
)
@json_out_option("Also write the report as JSON.")
def learn(
    *,
    events_url: str | None,
    model_name: ModelName,
    min_sessions: int,
    min_clicks: int,
    grade_1: float | None,
    grade_2: float | None,
    with_qrels: bool,
    data: Path | None,
    judgments_out: Path | None,
    json_out: Path | None,
    **vote_params: Any,  # k, power, weight and confidence (vote_options)
) -> None:
    """Fit a click model to the stored impressions and clicks, grade each (query, document) pair from it, and
    rebuild the judged-neighbour votes from those judgments (a gateway serves them once restarted)."""
    import time

    from es_rerank.cli_options import load_settings
    from es_rerank.learning.judgments import GradeRule, judgment_rows, summary, votes_input
    from es_rerank.learning.settings import EventSettings

    started = time.perf_counter()
    settings = load_settings(EventSettings)
    url = (events_url or settings.events_store_url).strip()
    rows = _stored_rows(url)
    read_s = time.perf_counter() - started
    log = _click_log(rows, url)
    model, judged = _fitted(log, model_name, GradeRule(min_sessions, min_clicks, grade_1, grade_2))
    fitted_s = time.perf_counter() - started - read_s
    queries, qrels = _train_judgments(data, settings) if with_qrels else (None, None)
    stats = _served_stats(settings)
    built = votes_input(log, judged, set(stats.doc_ids), queries, qrels)
    outside = _outside_the_index(log, judged, stats, built.from_clicks)
    votes = _votes(built, vote_params, stats)
    path = settings.neighbours_path
    path.parent.mkdir(parents=True, exist_ok=True)
    votes.save(path)
    judgments_out = judgments_out or settings.models_dir / "click-judgments.tsv"
    _write_atomically(judgments_out, "\n".join(judgment_rows(log, judged)) + "\n")
    report = {
        "events": _public(url),
        "model": model_name,
        "iterations": model.iterations,
        "converged": model.converged,
        "examination_by_position": [round(value, 4) for value in model.examination_by_position()],
        **summary(log, judged),
        "votes": _votes_report(path, votes, built, outside, stats.version, vote_params),
        "judgments": str(judgments_out),
        "seconds": {
            "read": round(read_s, 2),
            "fit": round(fitted_s, 2),
            "total": round(time.perf_counter() - started, 2),
        },
    }
    _print_report(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")


def _click_log(rows: Any, url: str) -> Any:
    """The click log of the stored ``rows`` (their first page of results); a CLI error when nothing was clicked."""
    from es_rerank.learning.clicklog import PAGE, click_log

    log = click_log(rows, PAGE)
    if log.clicks == 0:
        raise click.ClickException(
            f"{log.impressions:,} impressions and no clicks on their first {PAGE} results in "
            f"{url}: nothing to learn from yet"
        )
    return log


def _fitted(log: Any, model_name: ModelName, rule: Any) -> tuple[Any, Any]:
    """The click model ``model_name`` fitted to ``log`` by EM, and the pairs it judges under ``rule``."""
    from es_rerank.learning.click_model import fit_click_model
    from es_rerank.learning.clicklog import PAGE
    from es_rerank.learning.judgments import judge

    model = fit_click_model(
        model_name, log.pair, log.rank, log.clicked, log.impression, len(log.pair_query), max_rank=PAGE
    )
    return model, judge(log, model, rule)


def _votes_report(path: Path, votes: Any, built: Any, outside: int, index: str, params: dict) -> dict[str, Any]:
    """The report's account of the votes written to ``path``: their queries and where their judgments came from."""
    return {
        "path": str(path),
        "queries": len(votes.query_ids),
        "relevant_judgments": sum(len(docs) for docs in votes.judged.values()),
        "from_clicks": built.from_clicks,
        "from_qrels": built.from_qrels,
        "click_queries_merged_with_qrels": built.merged_queries,
        "outside_the_index": outside,
        "index": index,
        "params": params,
    }


def _stored_rows(url: str) -> Any:
    """Every stored impression and click of the store at ``url``, as ``esrr learn`` reads them; a CLI error names
    the fix when there is no store or it cannot be read."""
    from es_rerank.learning.store import EventStoreError, is_postgres, open_store, sqlite_path

    try:
        if not is_postgres(url) and not sqlite_path(url).is_file():
            raise click.ClickException(
                f"no event store at {sqlite_path(url)}: nothing has been recorded there. Serve with events on "
                "(ESRR_EVENTS=true, the default) and search, or run `esrr simulate`; or point --events (or "
                "ESRR_EVENTS_URL) at the store"
            )
        store = open_store(url)
        try:
            return store.learning_rows()
        finally:
            store.close()
    except EventStoreError as error:
        raise click.ClickException(f"{error} (--events / ESRR_EVENTS_URL names the store)") from None


def _train_judgments(data: Path | None, settings: Any) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The train queries and qrels of ``data`` (default NFCorpus), for --with-qrels."""
    from index_setup.nfcorpus import NFCorpus

    try:
        collection = NFCorpus.locate(data, settings)
        return collection.queries("train"), collection.qrels("train")
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None


def _outside_the_index(log: Any, judged: Any, stats: Any, from_clicks: int) -> int:
    """How many documents judged relevant from clicks the served index lacks; a CLI error when they are most of
    them (events recorded over another corpus)."""
    outside = sum(
        1
        for doc, grade in zip(judged.doc.tolist(), judged.grade.tolist())
        if grade > 0 and log.documents[doc] not in stats
    )
    if outside and 2 * outside >= outside + from_clicks:
        raise click.ClickException(
            f"{outside:,} of the documents judged relevant from clicks are not in the served "
            f"index {stats.version} ({stats.n_docs} documents): the events were recorded "
            "over another corpus. Serve that corpus's index, or learn from its own store "
            "(--events)"
        )
    return outside


def _votes(built: Any, params: dict[str, Any], stats: Any) -> Any:
    """The judged-neighbour votes of ``built``'s judgments for the corpus of ``stats``; a CLI error says why none."""
    from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours, NeighboursError

    try:
        votes = JudgedNeighbours(built.queries, built.qrels, NeighbourParams(**params), CorpusIdentity.of(stats))
    except NeighboursError as error:
        raise click.ClickException(str(error)) from None
    if len(votes.query_ids) < 2 or not any(idf > 0 for idf in votes.idf.values()):
        raise click.ClickException(
            f"{len(votes.query_ids)} queries have a document judged relevant, and votes need "
            "at least 2 whose words tell them apart; let more sessions come in (or lower "
            "--min-sessions), then learn again"
        )
    return votes


def _write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file renamed over it: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _public(url: str) -> str:
    from es_rerank.learning.store import is_postgres
    from es_rerank.learning.store_postgres import public_url

    return public_url(url) if is_postgres(url) else url


def _served_stats(settings: Any) -> Any:
    """The served index's statistics, whose corpus the votes are built for; a CLI error names the fix."""
    from es_rerank.backends import BackendError, open_backend

    try:
        return open_backend(settings).stats
    except BackendError as error:
        raise click.ClickException(f"{error} (the votes are built for the served index's corpus)") from None


def _print_report(report: dict[str, Any]) -> None:
    from es_rerank.learning.clicklog import PAGE

    examined = " ".join(f"{value:.2f}" for value in report["examination_by_position"])
    click.echo(
        f"{report['impressions']:,} impressions in {report['sessions']:,} sessions, {report['clicks']:,} "
        f"clicks ({report['orphan_clicks']:,} left out: below position {PAGE}, or their impression is not stored) "
        f"over {report['queries']:,} queries "
        f"from {report['events']}"
    )
    click.echo(
        f"click model {report['model'].upper()}: {report['iterations']} EM iterations"
        f"{'' if report['converged'] else ' (not converged)'}; P(examined) by position: {examined}"
    )
    click.echo(
        f"judged {report['judged_pairs']:,} (query, document) pairs of {report['judged_queries']:,} queries "
        f"(mean attractiveness {report['mean_attractiveness']:.3f}: grade 1 above "
        f"{report['thresholds']['grade_1_above']:.3f}, grade 2 from {report['thresholds']['grade_2_from']:.3f})"
    )
    for grade, row in report["by_grade"].items():
        if row["judgments"]:
            sessions, clicks = row["sessions_quartiles"], row["clicks_quartiles"]
            click.echo(
                f"  grade {grade}: {row['judgments']:,} judgments over {row['queries']:,} queries, resting on "
                f"{row['sessions_total']:,} sessions and {row['clicks_total']:,} clicks (per judgment: "
                f"sessions median {sessions[2]:g}, max {sessions[4]:g}; clicks median {clicks[2]:g}, "
                f"max {clicks[4]:g})"
            )
    votes = report["votes"]
    click.echo(
        f"votes: {votes['queries']:,} queries, {votes['relevant_judgments']:,} relevant judgments "
        f"({votes['from_clicks']:,} from clicks, {votes['from_qrels']:,} from qrels; "
        f"{votes['outside_the_index']:,} outside the index left out) for index {votes['index']} -> "
        f"{votes['path']}; restart the gateway (esrr serve) to serve them"
    )
    click.echo(f"judgments with their evidence -> {report['judgments']} ({report['seconds']['total']:.1f} s)")
