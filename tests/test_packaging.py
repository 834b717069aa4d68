"""Packaging guards: the namespace layout (docs/architecture.md §1) and what the wheel contains."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["eventlog", "context", "providers", "tools", "actors", "sdk"]


def _setuptools_config() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool: dict[str, object] = config["tool"]["setuptools"]
    return tool


def _package_folders() -> dict[str, Path]:
    """Every folder holding an __init__.py under the mapped top-level folders."""
    found = {}
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            found["liteagent." + ".".join(rel.parts)] = init.parent
    return found


def test_no_root_init() -> None:
    """There is no __init__.py at the repository root: liteagent is a namespace package."""
    assert not (ROOT / "__init__.py").exists()


def test_every_package_folder_is_listed() -> None:
    """Every package folder is in [tool.setuptools] packages (else the wheel drops it)."""
    listed = set(_setuptools_config()["packages"])  # type: ignore[call-overload]
    missing = sorted(set(_package_folders()) - listed)
    assert [] == missing, f"add to [tool.setuptools].packages: {missing}"


def test_every_listed_package_exists() -> None:
    """Every listed package has a folder with an __init__.py."""
    listed = set(_setuptools_config()["packages"])  # type: ignore[call-overload]
    assert [] == sorted(listed - set(_package_folders()))


def test_top_level_folders_are_mapped() -> None:
    """Each layer folder is mapped to liteagent.<folder>."""
    expected = {f"liteagent.{layer}": layer for layer in LAYERS}
    assert expected == _setuptools_config()["package-dir"]


@pytest.mark.processes
def test_wheel_contains_only_liteagent(tmp_path: Path) -> None:
    """The built wheel holds liteagent/... and dist-info only: no top-level eventlog, tools..."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("liteagent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {"liteagent"} == {t for t in tops if not t.endswith(".dist-info")}
    for package in _package_folders():
        assert package.replace(".", "/") + "/__init__.py" in names
    assert "liteagent/eventlog/py.typed" in names


@pytest.mark.processes
def test_the_anthropic_sdk_is_imported_only_when_used() -> None:
    """Importing the SDK and the CLI does not import ``anthropic`` (seconds of start-up);
    asking for the Anthropic provider does."""
    code = (
        "import sys, liteagent.sdk, liteagent.sdk._cli; a = 'anthropic' in sys.modules; "
        "from liteagent.providers import anthropic; print(a, 'anthropic' in sys.modules, "
        "callable(anthropic))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.split()
    assert ["False", "True", "True"] == out
