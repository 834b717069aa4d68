"""Imports point down the layers of DESIGN §2; code imports liteagent only with its prefix."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "eventlog": set(),
    "context": {"eventlog"},
    "providers": {"eventlog", "context"},
    "tools": {"eventlog", "context"},
    "actors": {"eventlog", "context", "providers", "tools"},
    "sdk": {"eventlog", "context", "providers", "tools", "actors"},
}
FORBIDDEN_TOP_LEVEL = set(ALLOWED)


def _imports(path: Path, layer: str, source: str | None = None) -> list[tuple[str, int]]:
    """The liteagent layers a module imports (relative imports resolved), with line numbers."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    package = [layer, *path.parent.relative_to(ROOT / layer).parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level > len(package) + 1:
                    raise AssertionError(f"{path}:{node.lineno}: relative import above liteagent")
                base = package[: len(package) - node.level + 1]
                names = [".".join(["liteagent", *base, *([node.module] if node.module else [])])]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in FORBIDDEN_TOP_LEVEL:
                raise AssertionError(f"{path}:{node.lineno}: import {name} without liteagent.")
            if parts[0] == "liteagent" and len(parts) > 1:
                found.append((parts[1], node.lineno))
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_point_down(layer: str) -> None:
    """A layer imports only the layers below it (eventlog imports no other layer)."""
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for target, line in _imports(path, layer):
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports liteagent.{target}")
    assert [] == bad


def test_the_checker_catches_an_upward_import() -> None:
    """The parser resolves relative imports, so an upward one would be reported."""
    probe = ROOT / "eventlog" / "conformance" / "_probe.py"  # never written: source is given
    source = "from ...sdk import x\nimport liteagent.actors\nfrom .. import _errors\n"
    assert [("sdk", 1), ("actors", 2), ("eventlog", 3)] == _imports(probe, "eventlog", source)
