"""The house limits of issue 37 over the serving code (es_rerank/ and worker/, training aside).

Files of at most 500 lines; functions of at most 60 lines, cyclomatic complexity 15 and
6 positional parameters. Lines and parameters are read from the syntax tree here; the
complexity is ruff's C901 (McCabe's count), run as a subprocess with no configuration
and no ``noqa`` honoured, so that neither can hide a finding. A failure lists every
violation as ``path:function (value > limit)``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The serving code; research code lives in training/, a room of its own the limits do not bind.
CHECKED = ("es_rerank", "worker")

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_COMPLEXITY = 15
MAX_POSITIONAL = 6


def checked_files() -> list[Path]:
    """The Python files under the limits, sorted."""
    return sorted(path for package in CHECKED for path in (ROOT / package).rglob("*.py"))


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every function and method, nested ones too: (qualified name, node, whether it is bound to an instance or
    class, so that its first parameter is not passed by the caller)."""

    def walk(node: ast.AST, prefix: str, in_class: bool) -> Iterator:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in child.decorator_list)
                yield f"{prefix}{child.name}", child, in_class and not static
                yield from walk(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", True)
            else:
                yield from walk(child, prefix, in_class)

    return walk(tree, "", False)


def positional_parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> int:
    """Parameters a caller may pass by position (``self`` and ``cls`` not counted, as ruff's PLR0917)."""
    count = len(node.args.posonlyargs) + len(node.args.args)
    return count - 1 if bound and count else count


def size_violations() -> list[str]:
    """Files, functions and parameter lists over the limits, as ``path:function (value > limit)``."""
    found = []
    for path in checked_files():
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            found.append(f"{name} ({lines} lines > {MAX_FILE_LINES})")
        for qualified, node, bound in functions(ast.parse(text, filename=name)):
            length = node.end_lineno - node.lineno + 1  # from `def` to its last line, docstring included
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{qualified} ({length} lines > {MAX_FUNCTION_LINES})")
            positional = positional_parameters(node, bound)
            if positional > MAX_POSITIONAL:
                found.append(f"{name}:{qualified} ({positional} positional parameters > {MAX_POSITIONAL})")
    return found


def complexity_violations() -> list[str]:
    """Functions over the complexity limit by ruff's C901, as ``path:function (value > limit)``."""
    command = [
        *(sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--ignore-noqa", "--exit-zero"),
        *("--select", "C901", "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}"),
        *("--output-format", "json", *CHECKED),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, f"ruff failed: {done.stderr}"
    found = []
    for finding in json.loads(done.stdout):
        path = Path(finding["filename"]).resolve()
        name = path.relative_to(ROOT).as_posix()
        function, value = re.fullmatch(r"`(.+)` is too complex \((\d+) > \d+\)", finding["message"]).groups()
        # ruff names the function alone; its `def` line gives the qualified name the other checks use.
        qualified = {
            node.lineno: qualified for qualified, node, _ in functions(ast.parse(path.read_text(encoding="utf-8")))
        }.get(finding["location"]["row"], function)
        found.append(f"{name}:{qualified} (complexity {value} > {MAX_COMPLEXITY})")
    return found


def test_the_limits_see_the_serving_code() -> None:
    # A glob gone wrong would make the limits below pass over nothing.
    names = {path.relative_to(ROOT).as_posix() for path in checked_files()}
    assert {"es_rerank/stats.py", "es_rerank/lex.py", "worker/scorer.py", "es_rerank/gateway/app.py"} <= names


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    method = ast.parse("class A:\n    def f(self, a, b, c, d, e, f): pass\n    @staticmethod\n    def g(a, b): pass\n")
    found = {name: positional_parameters(node, bound) for name, node, bound in functions(method)}
    assert found == {"A.f": 6, "A.g": 2}
    nested = ast.parse("def outer(a, /, b, *, c):\n    def inner(x, y=1, *rest, **named):\n        pass\n")
    found = {name: positional_parameters(node, bound) for name, node, bound in functions(nested)}
    assert found == {"outer": 2, "outer.inner": 2}


def test_the_serving_code_keeps_the_house_limits() -> None:
    violations = size_violations() + complexity_violations()
    assert not violations, f"{len(violations)} over the house limits (issue 37):\n" + "\n".join(violations)
