"""Where the gateway's glue goes: thread CPU per request of Flask's steps, the app's hooks and the view's helpers.

Builds the app as ``esrr serve`` does (its files leased; run it BM25 only, ``ESRR_GATEWAY_RERANK=false
ESRR_GATEWAY_WINDOW=0``, to see the glue without the ranking), sends every NFCorpus dev query as ``GET
/_search?q=...&size=10`` and as ``POST /_search`` with a ``match`` body through Flask's test client, and reads this
thread's CPU around each part (``stages.Spent``). Parts nest (``wsgi`` holds them all, ``answer`` holds ``page``);
each wrapper adds about 1 us to the parts around it.

    ESRR_GATEWAY_RERANK=false ESRR_GATEWAY_WINDOW=0 python reports/profile/glue_parts.py --rounds 2
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click

sys.path.insert(0, str(Path(__file__).parent))
from stages import Spent

FLASK_STEPS = ("request_context", "preprocess_request", "dispatch_request", "process_response", "do_teardown_request")
VIEW_HELPERS = ("query_id", "url_parameters", "json_body", "jsonify")
SEARCH_HELPERS = ("check_source_patterns", "parse_search", "_ranked", "answer", "search_response")


def instrumented(spent: Spent) -> Any:
    """The app as ``esrr serve`` builds it, its parts timed into ``spent``."""
    import es_rerank.gateway.api as api
    import es_rerank.gateway.searching as searching
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.cli_options import load_settings
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.cli import _leased_served_search
    from es_rerank.gateway.config import GatewaySettings

    settings = load_settings(GatewaySettings)
    for name in VIEW_HELPERS:
        spent.wrap(api, name, name)
    for name in SEARCH_HELPERS:
        spent.wrap(searching, name, name)
    spent.wrap(EmbeddedBackend, "prepare", "prepare")
    spent.wrap(EmbeddedBackend, "page", "page")
    app = create_app(_leased_served_search(settings), settings)
    spent.wrap(app.json, "dumps", "JSON dumps")
    for name in FLASK_STEPS:
        spent.wrap(app, name, name)
    for kind, functions in (
        ("before", app.before_request_funcs[None]),
        ("after", app.after_request_funcs[None]),
        ("teardown", app.teardown_request_funcs[None]),
    ):
        for place, function in enumerate(functions):
            functions[place] = _timed(spent, f"{kind}: {function.__name__}", function)
    spent.wrap(app, "wsgi_app", "wsgi")
    return app


def _timed(spent: Spent, name: str, function: Any) -> Any:
    def timed(*args: Any) -> Any:
        with spent.timing(name):
            return function(*args)

    return timed


@click.command()
@click.option("--queries", default=324, show_default=True, help="NFCorpus dev queries, the first by id.")
@click.option("--rounds", default=2, show_default=True, help="Timed passes after one untimed pass.")
def main(queries: int, rounds: int) -> None:
    """Each part's thread CPU per request, p50 and mean, in each form."""
    from benchmarks.queries import dev_query_texts
    from es_rerank.cli_options import load_settings
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings

    spent = Spent()
    client = instrumented(spent).test_client()
    texts = dev_query_texts(None, load_settings(CommonSettings), queries)
    parts: dict[str, dict[str, list[float]]] = {"GET q=": defaultdict(list), "POST match": defaultdict(list)}
    for round_number in range(rounds + 1):
        for text in texts:
            for form, rows in parts.items():
                spent.parts.clear()
                if form == "GET q=":
                    response = client.get(f"/_search?{urlencode({'q': text, 'size': 10})}")
                else:
                    response = client.post("/_search", json={"query": {"match": {"text": text}}, "size": 10})
                if response.status_code != 200:
                    raise click.ClickException(f"{form} {text!r}: {response.status_code}")
                if round_number:
                    for name, nanoseconds in spent.parts.items():
                        rows[name].append(nanoseconds / 1e3)
    click.echo(f"{machine_description()} | {len(texts)} dev queries x {rounds} rounds, thread CPU per request, us")
    for form, rows in parts.items():
        click.echo(f"{form}")
        for name, values in sorted(rows.items(), key=lambda item: -statistics.fmean(item[1])):
            click.echo(f"  {name:<34} p50 {statistics.median(values):8.1f}  mean {statistics.fmean(values):8.1f}")


if __name__ == "__main__":
    main()
