"""The experiments under reports/ use the training room through ``training.api`` only, never its internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import training.api

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "reports").rglob("*.py"))


def training_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Each ``import training...`` / ``from training... import ...`` of a script: the module and the names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "training":
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.split(".")[0] == "training"]
    return found


def test_the_public_functions_are_importable():
    assert all(hasattr(training.api, name) for name in training.api.__all__)
    assert not [name for name in training.api.__all__ if name.startswith("_")]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(REPO)))
def test_an_experiment_imports_only_the_public_functions(script: Path):
    for module, names in training_imports(script):
        assert module == "training.api", f"{script}: imports {module}; use training.api (export what it needs there)"
        assert set(names) <= set(training.api.__all__), f"{script}: {sorted(set(names) - set(training.api.__all__))}"


def test_some_experiment_uses_the_training_room():
    assert any(training_imports(script) for script in SCRIPTS)
