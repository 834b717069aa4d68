"""Every third-party module the library imports is from a distribution pyproject.toml declares."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
PYPROJECT = CONFIG["project"]
FOLDERS = sorted(CONFIG["tool"]["setuptools"]["package-dir"].values())
# Test helpers shipped with the library: they may import the `test` extra as well.
TEST_HELPERS = ("eventlog/conformance/", "providers/testing/_pytest.py")
# The PostgreSQL backend's modules (and its damage helper) may import the `postgres` extra; no
# other module may (`import liteagent.eventlog` must not need it).
POSTGRES_MODULES = ("eventlog/_postgres", "eventlog/conformance/_damage_postgres.py")


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _third_party_imports(path: Path) -> set[str]:
    """The top-level names of the absolute, non-standard-library imports of a module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    # _typeshed: the standard library's stub-only module, importable only by type checkers
    # (under TYPE_CHECKING); nothing installs it
    return {
        n for n in names if n not in sys.stdlib_module_names and n not in {"liteagent", "_typeshed"}
    }


def test_every_imported_distribution_is_declared() -> None:
    """Library code imports only declared dependencies; its test helpers also the test extra."""
    runtime = {_name(r) for r in PYPROJECT["dependencies"]}
    test = runtime | {_name(r) for r in PYPROJECT["optional-dependencies"]["test"]}
    postgres = {_name(r) for r in PYPROJECT["optional-dependencies"]["postgres"]}
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            declared = test if relative.startswith(TEST_HELPERS) else runtime
            if relative.startswith(POSTGRES_MODULES):
                declared = declared | postgres
            for module in sorted(_third_party_imports(path)):
                owners = {_name(d) for d in distributions.get(module, [module])}
                if not owners & declared:
                    undeclared.append(f"{relative}: {module} ({', '.join(sorted(owners))})")
    assert [] == undeclared


def test_constraints_pin_every_declared_distribution() -> None:
    """constraints.txt (CI's exact versions) pins every dependency and every extra's tool."""
    lines = [
        line.strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [] == [line for line in lines if not re.fullmatch(r"[A-Za-z0-9._-]+==\S+", line)]
    pinned = {_name(line) for line in lines}
    declared = {
        _name(r)
        for r in [
            *PYPROJECT["dependencies"],
            *PYPROJECT["optional-dependencies"]["test"],
            *PYPROJECT["optional-dependencies"]["docs"],
            *PYPROJECT["optional-dependencies"]["postgres"],
        ]
    }
    assert [] == sorted(declared - pinned)
