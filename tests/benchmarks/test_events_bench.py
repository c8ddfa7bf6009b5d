"""``esrr bench events`` and ``esrr bench http --events``: they run, and what they report is what was stored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from es_rerank.cli import main
from es_rerank.learning.store import open_store
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS, esrr_serve
from tests.learning.test_simulation import _beir_folder


def test_bench_events_weighs_the_store_it_wrote(tmp_path):
    data = _beir_folder(tmp_path / "beir")
    figures = tmp_path / "figures.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "events",
            "--events",
            "2000",
            "--clicks",
            "1",
            "--requests",
            "200",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "store"),
            "--json-out",
            str(figures),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    assert report["bytes"] == sum(path.stat().st_size for path in (tmp_path / "store").glob("events.sqlite3*"))
    store = open_store(str(tmp_path / "store" / "events.sqlite3"))
    assert store.counts() == {"impressions": report["impressions"], "clicks": report["clicks"]}
    assert report["impressions"] + report["clicks"] == 2000 and report["clicks"] > 0
    assert report["request_side_us"]["p50"] > 0


def served_tiny_home(tmp_path) -> tuple[dict[str, str], Path]:
    """The environment of a gateway over the tiny corpus, without workers, and a BEIR folder of one dev query: what
    ``esrr bench http`` needs to time it."""
    home = tmp_path / "home"
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",
    }
    return env, _beir_folder(tmp_path / "beir")


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_bench_http_with_events_times_both_and_the_gateway_stores_the_reports(tmp_path, free_port):
    env, data = served_tiny_home(tmp_path)
    figures = tmp_path / "figures.json"
    with esrr_serve(env, free_port()) as (url, _):
        result = CliRunner().invoke(
            main,
            [
                "bench",
                "http",
                "--url",
                url,
                "--data",
                str(data),
                "--rounds",
                "2",
                "--forms",
                "q,site",
                "--events",
                "--json-out",
                str(figures),
            ],
        )
        assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    assert set(report["forms"]) == {"q", "q+events", "site", "site+events"}
    assert "events_ms" in report["forms"]["q+events"] and "events_ms" not in report["forms"]["q"]
    assert (
        report["forms"]["site+events"]["paired_difference_ms"]["p50"]
        == report["forms"]["site+events"]["paired_difference_ms"]["p50"]
    )  # a number, not NaN
    assert "recording events: a search's latency p50" in result.output
    store = open_store(str(Path(env["ESRR_HOME"]) / "events" / "events.sqlite3"))
    # Two forms report, once untimed and in two rounds each: one query, so 6 impressions; the first search of
    # every pass clicks.
    assert store.counts() == {"impressions": 6, "clicks": 6}
    assert {event.query for event, _ in store.impressions()} == {"calcium"}
