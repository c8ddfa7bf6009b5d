"""Fixtures of the command-line tests: a temporary ``ESRR_HOME`` and ``esrr`` run in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from es_rerank.cli import main


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def esrr(home: Path):
    """Run ``esrr ARGS...`` in-process with ``ESRR_HOME=home``."""
    runner = CliRunner()
    env = {"ESRR_HOME": str(home), "ESRR_BACKEND": "embedded"}

    def run(*args: str) -> Result:
        return runner.invoke(main, list(args), env=env)

    return run
