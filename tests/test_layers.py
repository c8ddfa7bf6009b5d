"""The rooms' import layers (``[tool.importlinter]`` in pyproject.toml), checked with import-linter.

A change that makes the gateway import torch or the worker, the ranking import the web
layer, the serving code import training, or two modules import each other fails here,
naming the import chain.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"


def test_the_layers_hold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename=str(CONFIG), no_cache=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "BROKEN" not in report


def test_the_contracts_cover_every_room() -> None:
    declared = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]
    checked = {
        module
        for contract in declared["contracts"]
        for module in contract.get("source_modules", []) + contract.get("ancestors", [])
    }
    rooms = {
        "es_rerank.gateway",
        "es_rerank.ranking",
        "es_rerank.backends",
        "es_rerank.learning",
        "worker",
        "training",
        "index_setup",
        "benchmarks",
    }
    assert rooms <= checked
    assert set(declared["root_packages"]) == {"es_rerank", "worker", "training", "index_setup", "benchmarks"}
