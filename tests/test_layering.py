"""The import rules: the import-linter contracts in pyproject.toml hold and see every module of
this checkout; code imports liteagent only with its prefix."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
LINTER = PYPROJECT["tool"]["importlinter"]
LAYERS = sorted(PACKAGE_DIRS.values())


def test_lint_imports_passes() -> None:
    """`lint-imports` (layers downward, no cycles inside a package) keeps every contract."""
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"]
    result = subprocess.run(
        command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert 0 == result.returncode, result.stdout + result.stderr


def test_the_contracts_cover_every_package() -> None:
    """Every package folder is a root package of the contracts and a layer of the layers one."""
    contracts = {contract["id"]: contract for contract in LINTER["contracts"]}
    layered = {name.strip() for line in contracts["layers"]["layers"] for name in line.split("|")}
    assert sorted(PACKAGE_DIRS) == sorted(LINTER["root_packages"])
    assert sorted(PACKAGE_DIRS) == sorted(layered)
    assert sorted(PACKAGE_DIRS) == sorted(contracts["acyclic"]["ancestors"])


def test_the_import_graph_is_this_checkout() -> None:
    """import-linter's graph holds every module of this checkout (not an empty namespace)."""
    for package, folder in PACKAGE_DIRS.items():
        spec = importlib.util.find_spec(package)  # a strict editable install links each file
        assert spec is not None
        assert spec.origin is not None
        assert ROOT / folder / "__init__.py" == Path(spec.origin).resolve()
    expected = set()
    for package, folder in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            expected.add(".".join([package, *parts]))
    graph = grimp.build_graph(*LINTER["root_packages"], cache_dir=None)
    # A strict editable install links the files it saw: re-run `pip install -e` after adding one.
    assert sorted(expected) == sorted(graph.modules)


def _unprefixed_imports(path: Path, source: str | None = None) -> list[str]:
    """The imports in a module of ``path``'s package that name a layer without ``liteagent.``,
    or go above liteagent with a relative import (import-linter ignores both)."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    # eventlog/conformance/x.py is liteagent.eventlog.conformance.x: `from ...` is liteagent
    top = len(path.parent.relative_to(ROOT).parts) + 1
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > top:
                bad.append(f"{path.name}:{node.lineno}: relative import above liteagent")
            names = [] if node.level else [node.module or ""]
        else:
            continue
        bad.extend(
            f"{path.name}:{node.lineno}: import {name} without liteagent."
            for name in names
            if name.split(".")[0] in LAYERS
        )
    return bad


@pytest.mark.parametrize("layer", LAYERS)
def test_code_imports_liteagent_with_its_prefix(layer: str) -> None:
    """No module imports a layer as a top-level package (``import eventlog``)."""
    paths = sorted((ROOT / layer).rglob("*.py"))
    bad = [line for path in paths for line in _unprefixed_imports(path)]
    assert [] == bad


def test_the_prefix_check_catches_a_bare_import() -> None:
    """A bare layer import and a relative import above liteagent are both reported."""
    probe = ROOT / "eventlog" / "conformance" / "_probe.py"  # never written: source is given
    source = "import actors\nfrom sdk import x\nfrom .... import y\nfrom ...sdk import z\n"
    assert [
        "_probe.py:1: import actors without liteagent.",
        "_probe.py:2: import sdk without liteagent.",
        "_probe.py:3: relative import above liteagent",
    ] == _unprefixed_imports(probe, source)
