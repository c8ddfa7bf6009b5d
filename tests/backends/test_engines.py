"""The engine launcher (``scripts/engine.sh``, ``engines/``) on OpenSearch 2.19: it starts, analyses text as esrr's
index does, and stops leaving no process and no folder behind.

Elasticsearch 7.17 is started by the same launcher for the whole backend suite (``es_url[es7]``).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from es_rerank.text import tokenize
from index_setup.es_index import ANALYZER, analysis_settings
from tests import engines
from tests.engines import engine_for_tests

pytestmark = pytest.mark.es

TEXT = "IL-6 and TNF-α in well-known U.S. trials of 18-65 year-olds: 3.5% lower, $20 cheaper; the patient's diet."


def _call(method: str, url: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_opensearch_starts_analyses_like_esrrs_index_and_stops_clean(tmp_path: Path) -> None:
    engine = engine_for_tests("opensearch", tmp_path)
    try:
        root = _call("GET", engine.url)
        assert (root["version"]["distribution"], root["version"]["number"][:5]) == ("opensearch", "2.19.")
        assert engine.home.is_dir()
        _call("PUT", f"{engine.url}/analysed", {"settings": {"analysis": analysis_settings()}})
        tokens = _call("POST", f"{engine.url}/analysed/_analyze", {"analyzer": ANALYZER, "text": TEXT})["tokens"]
        assert [token["token"] for token in tokens] == tokenize(TEXT)
    finally:
        engine.stop()
    assert engine.process.returncode == 0  # it stopped itself when its standard input closed
    assert not engine.home.exists()


@pytest.mark.parametrize(
    "ci, outcome", [("", pytest.skip.Exception), ("true", pytest.fail.Exception), ("false", pytest.skip.Exception)]
)
def test_without_java_or_maven_the_engine_tests_skip_except_in_ci(monkeypatch, tmp_path: Path, ci: str, outcome):
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(engines, "missing_tools", lambda: ["mvn"])
    with pytest.raises(outcome, match="mvn not on PATH: apt-get install -y openjdk-17-jdk-headless maven"):
        engines.engine_for_tests("elasticsearch", tmp_path)
