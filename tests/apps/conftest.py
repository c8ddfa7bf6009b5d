"""One embedded gateway (``esrr serve``, a real process) that the tests of this folder point real libraries at.

The libraries are those applications build search with (issue 35), installed by the ``apps`` extra and by
``npm ci`` in ``tests/apps/node`` (``scripts/test.sh`` does both). A library that is missing skips its test on a
developer's machine and fails it in CI (``CI=true``), where every one must run.

The gateway serves the first NFCorpus documents with metadata given by ``metadata_of`` (facets to count), without
workers: its window is reordered by the candidate feedback (a real stage that needs no model), so whether a
library's search was reranked is observable. It is read from ``esrr_searches_total`` on ``/metrics``, which counts
every search by what ranked it, whatever the library filtered out of the answer.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from es_rerank.settings import DEFAULT_NFCORPUS
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from index_setup.readers import read_beir_corpus
from tests.conftest import esrr_serve

ALIAS = "esrr-docs"
N_DOCS = 400
WINDOW = 50  # below the matches of the queries used, so that pages past the window (BM25's order) are seen too
NODE_DIR = Path(__file__).resolve().parent / "node"
PYTHON9_DIR = Path(__file__).resolve().parent / "python9"  # the 9.x Python client, in a venv of its own
JOURNALS = ("Nutrients", "Circulation", "BMJ")
IN_CI = os.environ.get("CI") == "true"


def missing(what: str, fix: str) -> None:
    """Fail in CI, where every library must be there; skip elsewhere, saying how to install it."""
    message = f"{what} is missing: {fix}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def library(module: str) -> ModuleType:
    """The imported ``module`` of a library of the ``apps`` extra (``missing`` when it is not installed)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing(f"{module} ({error})", "bash scripts/setup.sh apps (the apps extra of pyproject.toml)")
        raise  # not reached: missing() fails or skips


def metadata_of(row: int) -> dict[str, Any]:
    """The metadata given to the corpus's ``row``-th document: a year, a journal and publication types by rule."""
    types = ("Journal Article",) + (("Review",) if row % 4 == 0 else ()) + (("Clinical Trial",) if row % 5 == 0 else ())
    return {"year": 1995 + row % 25, "journal": JOURNALS[row % 3], "publication_types": types}


def app_corpus() -> list[Document]:
    """The first ``N_DOCS`` NFCorpus documents with ``metadata_of`` their row."""
    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        missing(f"NFCorpus ({path})", "the tests of tests/apps read shared/data/nfcorpus")
    documents = itertools.islice(read_beir_corpus(path), N_DOCS)
    return [Document(doc.doc_id, doc.title, doc.abstract, **metadata_of(row)) for row, doc in enumerate(documents)]


@dataclass
class Gateway:
    """A served gateway, its corpus in index order, and what it tells of the searches it ranked."""

    url: str
    docs: list[Document]

    def searches(self) -> Counter[str]:
        """``esrr_searches_total`` by its ``ranking`` label (reranked, skipped, fallback, bm25)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            text = response.read().decode()
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name == "esrr_searches":
                for sample in family.samples:
                    if sample.name == "esrr_searches_total":
                        counts[sample.labels["ranking"]] += int(sample.value)
        return counts

    def since(self, before: Counter[str]) -> dict[str, int]:
        """The searches ranked since ``before`` was read, by ranking (those with none left out)."""
        after = self.searches()
        return {label: after[label] - before[label] for label in after if after[label] != before[label]}

    def search(self, body: dict[str, Any], params: str = "") -> dict[str, Any]:
        """The gateway's answer to ``body`` on the alias (plain HTTP: the reference the libraries are checked by)."""
        request = urllib.request.Request(
            f"{self.url}/{ALIAS}/_search{params}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def orders(self, query: dict[str, Any], size: int) -> tuple[list[str], list[str]]:
        """The ids of the top ``size`` for ``query``: reranked (as served), and in BM25's order (window 0)."""
        served = self.search({"query": query, "size": size, "_source": False})
        assert "skipped" not in served["esrr"] and served["esrr"]["ranker"] != "BM25", served["esrr"]
        bm25 = self.search({"query": query, "size": size, "_source": False, "ext": {"esrr": {"window_size": 0}}})
        return [hit["_id"] for hit in served["hits"]["hits"]], [hit["_id"] for hit in bm25["hits"]["hits"]]

    def text_of(self, doc_id: str) -> str:
        """The searched text of a document, as RAG libraries receive it: the title, a blank line, the abstract."""
        doc = next(doc for doc in self.docs if doc.doc_id == doc_id)
        return "\n\n".join(part for part in (doc.title, doc.abstract) if part)


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory, free_port) -> Iterator[Gateway]:
    """``esrr serve`` over an embedded index of ``app_corpus()``, the window reordered by the candidate feedback."""
    docs = app_corpus()
    home = tmp_path_factory.mktemp("apps") / "home"
    build_embedded_index(docs, home / "indexes" / "embedded", version="v1", progress=False)
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("ESRR_")},
        "ESRR_HOME": str(home),
        "ESRR_GATEWAY_RERANK": "false",  # no workers: the candidate feedback reorders the window
        "ESRR_GATEWAY_WINDOW": str(WINDOW),
    }
    with esrr_serve(env, free_port(), ready_path="/_esrr/health") as (url, _):
        yield Gateway(url, docs)


@pytest.fixture(scope="session")
def node() -> str:
    """The machine's ``node``, with the packages of ``tests/apps/node`` installed (``npm ci``)."""
    executable = shutil.which("node")
    if executable is None:
        missing("node", "install Debian's nodejs and npm (scripts/test.sh does)")
    if not (NODE_DIR / "node_modules" / "@searchkit" / "api").is_dir():
        missing("the Node packages of tests/apps/node", f"cd {NODE_DIR} && npm ci")
    return executable


@pytest.fixture(scope="session")
def python9() -> str:
    """The interpreter of ``tests/apps/python9/.venv``, where the 9.x Python client is installed."""
    executable = PYTHON9_DIR / ".venv" / "bin" / "python"
    fix = (
        f"python3 -m venv {PYTHON9_DIR}/.venv && {PYTHON9_DIR}/.venv/bin/pip install -r {PYTHON9_DIR}/requirements.txt"
    )
    if not executable.is_file():
        missing("the 9.x Python client's environment", fix)
    version = subprocess.run(
        [str(executable), "-c", "import elasticsearch; print(elasticsearch.__versionstr__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if version.returncode != 0 or not version.stdout.startswith("9."):
        missing(f"elasticsearch 9.x in {executable} ({version.stdout.strip() or version.stderr.strip()})", fix)
    return str(executable)


def run_script(executable: str, folder: Path, script: str, *args: str) -> Any:
    """Run ``folder/script`` with ``executable`` (node, or a Python of its own) and ``args``; its last output line,
    read as JSON."""
    done = subprocess.run(
        [executable, script, *args], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{script} {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_node(node: str, script: str, *args: str) -> Any:
    """Run ``tests/apps/node/<script>`` with ``args`` (``run_script``)."""
    return run_script(node, NODE_DIR, script, *args)
