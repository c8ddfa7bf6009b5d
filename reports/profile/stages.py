"""Where the gateway's CPU goes in a served search: each stage's thread CPU per search, in-process.

Builds the app exactly as ``esrr serve`` does (its files leased, ``create_app``, a worker through the
broker of the ``ESRR_*`` environment), sends the NFCorpus dev queries as ``GET /_search?q=...&size=10``
through Flask's test client (no waitress: the request runs in this thread), and reads this thread's
CPU time (``time.thread_time_ns``) around the WSGI app and each stage: the pipeline's own stage clock, and wrappers
around the functions that make up the rest. A stage's CPU is the gateway's only: the broker round
trip counts what the gateway spends sending and receiving, never the worker's scoring. What HTTP
and waitress add is what ``esrr bench http`` measures of the real server minus the total here.

    python reports/profile/stages.py --queries 324 --rounds 2 --json-out reports/profile/stages.json

With ``--rankings FILE`` it also writes every query's top 10 (ids and scores), to compare two versions
of the code: ``python reports/profile/same_rankings.py OLD NEW``.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click

# stage -> what it is, in the order a search runs them (written into the JSON with the figures)
STAGES = {
    "request parsing": "parse_search and the backend's prepare",
    "BM25 top-500": "tantivy's search, the hits' ids (retrieve stage, less the hits' data)",
    "hits' data (DocTerms)": "each hit's term ids from the statistics (CorpusStats.doc_terms_at)",
    "Lex features": "lex_features over the window",
    "request tokens": "build_request less the Lex features: query tokens, first tokens",
    "payload encoding": "payload.encode: validate, zlib, base64",
    "broker round trip": "send_task, LLEN, waiting for and reading the result, forget (gateway side only)",
    "BM25 guard": "guard stage",
    "candidate feedback": "feedback vectors + feedback votes stages",
    "judged-neighbour votes": "neighbours stage",
    "merge": "merge stage",
    "_source fetch, page": "backend.page: stored documents, _source filter, highlight",
    "response body": "search_response",
    "JSON encoding": "the Flask JSON provider's dumps",
    "Flask, hooks and glue": "the rest of the WSGI app's CPU: Flask, the app's hooks, the code between the stages",
}


class Spent:
    """CPU nanoseconds of this thread per named part, for the request under way."""

    def __init__(self) -> None:
        self.parts: dict[str, int] = defaultdict(int)

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        """Add the thread CPU spent inside to ``name``."""
        started = time.thread_time_ns()
        try:
            yield
        finally:
            self.parts[name] += time.thread_time_ns() - started

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time every call of ``owner.attribute`` as ``name``."""
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.timing(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


def instrumented_app(spent: Spent) -> Any:
    """The gateway's app as ``esrr serve`` builds it, its stages timed into ``spent``."""
    import es_rerank.gateway.searching as searching
    import es_rerank.payload as payload
    import es_rerank.ranking.dispatch as dispatch
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.cli import _leased_served_search
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.gateway.state import gateway_state
    from es_rerank.stats import CorpusStats

    settings = load_settings(GatewaySettings)
    spent.wrap(searching, "parse_search", "request parsing")
    spent.wrap(EmbeddedBackend, "prepare", "request parsing")
    spent.wrap(CorpusStats, "doc_terms_at", "hits' data (DocTerms)")
    spent.wrap(payload, "lex_features", "Lex features")
    spent.wrap(dispatch, "build_request", "build_request")
    spent.wrap(dispatch, "encode", "payload encoding")
    spent.wrap(EmbeddedBackend, "page", "_source fetch, page")
    spent.wrap(searching, "search_response", "response body")
    app = create_app(_leased_served_search(settings), settings)  # its files leased, as in `esrr serve`
    spent.wrap(app.json, "dumps", "JSON encoding")
    spent.wrap(app, "wsgi_app", "wsgi")  # the whole request as waitress hands it over (the test client's own work not)
    gateway_state(app).metrics.stage = spent.timing  # the pipeline's stage clock: CPU, not wall time
    return app


def stage_table(parts: dict[str, int]) -> dict[str, float]:
    """One search's CPU ms per stage of ``STAGES`` from the raw parts (parents less their parts)."""
    ms = {name: nanoseconds / 1e6 for name, nanoseconds in parts.items()}
    return {
        "request parsing": ms.get("request parsing", 0.0),
        "BM25 top-500": ms.get("retrieve", 0.0) - ms.get("hits' data (DocTerms)", 0.0),
        "hits' data (DocTerms)": ms.get("hits' data (DocTerms)", 0.0),
        "Lex features": ms.get("Lex features", 0.0),
        "request tokens": ms.get("build_request", 0.0) - ms.get("Lex features", 0.0),
        "payload encoding": ms.get("payload encoding", 0.0),
        "broker round trip": ms.get("model", 0.0),
        "BM25 guard": ms.get("guard", 0.0),
        "candidate feedback": ms.get("feedback vectors", 0.0) + ms.get("feedback votes", 0.0),
        "judged-neighbour votes": ms.get("neighbours", 0.0),
        "merge": ms.get("merge", 0.0),
        "_source fetch, page": ms.get("_source fetch, page", 0.0),
        "response body": ms.get("response body", 0.0),
        "JSON encoding": ms.get("JSON encoding", 0.0),
    }


@click.command()
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=2, show_default=True, help="Timed passes after one untimed pass.")
@click.option("--json-out", type=click.Path(path_type=Path), default=None, help="Write the figures as JSON.")
@click.option(
    "--rankings",
    type=click.Path(path_type=Path),
    default=None,
    help="Write every query's top 10 (ids, scores) as JSON.",
)
def main(queries: int, rounds: int, json_out: Path | None, rankings: Path | None) -> None:
    """Each stage's thread CPU per served search (median and mean over the timed searches)."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    texts = dev_query_texts(None, load_settings(CommonSettings), queries)
    spent = Spent()
    client = instrumented_app(spent).test_client()
    per_search: list[dict[str, float]] = []
    totals: list[float] = []
    tops: dict[str, list] = {}
    for round_number in range(rounds + 1):
        for text in texts:
            spent.parts.clear()
            response = client.get(f"/_search?{urlencode({'q': text, 'size': 10})}")
            total = spent.parts["wsgi"] / 1e6
            body = response.get_json()
            if response.status_code != 200 or "fallback" in body["esrr"]:
                sys.exit(f"{text!r} was not reranked: {response.status_code} {body.get('esrr', body)}")
            if round_number == 0:
                tops[text] = [(hit["_id"], hit["_score"]) for hit in body["hits"]["hits"]]
                continue
            table = stage_table(spent.parts)
            table["Flask, hooks and glue"] = total - sum(table.values())
            per_search.append(table)
            totals.append(total)
    names = list(per_search[0])
    figures = {
        "machine": machine_description(),
        "queries": len(texts),
        "rounds": rounds,
        "stages": STAGES,
        "total_ms": {"p50": statistics.median(totals), "mean": statistics.fmean(totals)},
        "stages_ms": {
            name: {
                "p50": statistics.median(row[name] for row in per_search),
                "mean": statistics.fmean(row[name] for row in per_search),
            }
            for name in names
        },
    }
    click.echo(f"{figures['machine']} | {len(texts)} dev queries x {rounds} rounds, thread CPU per search, in-process")
    click.echo(f"{'stage':<26} {'p50 ms':>8} {'mean ms':>8} {'share':>6}")
    for name in names:
        row = figures["stages_ms"][name]
        click.echo(
            f"{name:<26} {row['p50']:>8.3f} {row['mean']:>8.3f} {row['mean'] / figures['total_ms']['mean']:>6.1%}"
        )
    click.echo(f"{'total':<26} {figures['total_ms']['p50']:>8.3f} {figures['total_ms']['mean']:>8.3f}")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if rankings is not None:
        rankings.write_text(json.dumps(tops, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
