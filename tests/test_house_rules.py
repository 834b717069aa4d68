"""House rules of the test suite itself: every test says what it checks."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_function_has_a_docstring() -> None:
    """Every test function of tests/test_*.py, methods of classes included, has a docstring."""
    missing = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        missing += [
            f"{path.name}:{node.lineno}: {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")
            and not ast.get_docstring(node)
        ]
    assert not missing, "test functions without a docstring:\n" + "\n".join(missing)
