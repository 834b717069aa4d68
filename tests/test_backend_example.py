"""The example third-party backend, examples/session_files_backend.py: it passes the conformance
suite the built-in backends pass, and it is written with public names only."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import liteagent.eventlog.backend
from liteagent.eventlog import Checkpointer
from liteagent.eventlog.conformance import prompts, texts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "session_files_backend.py"

# The process tests unpickle the factory in children of the suite's forkserver, which import
# the example by its module name: the folder is on sys.path from collection on, before any
# test starts that server.
sys.path.append(str(EXAMPLE.parent))
example = importlib.import_module("session_files_backend")
readme = importlib.import_module("session_files_conformance")  # the README's test class

PUBLIC_MODULES = {
    "liteagent.eventlog",
    "liteagent.eventlog.types",
    "liteagent.eventlog.errors",
    "liteagent.eventlog.backend",
}

OPTIONAL_HOOKS = {
    "_repair",
    "_acquire_lease",
    "_release_lease",
    "_lease_holder",
    "_append_leased",
    "_truncate_leased",
}
"""The hooks a backend may override (the abstract ones are ``Checkpointer.__abstractmethods__``)."""


class TestSessionFilesCheckpointer(readme.TestSessionFilesCheckpointer):
    """One SQLite file per session passes the contract in one process, across instances and
    processes (leases included), and under SIGKILL: the suites and the factory of the README's
    class (examples/session_files_conformance.py). Not the corruption suite: its rows carry no
    checksums, so a changed byte inside a row would read back as something else (the example's
    docstring says so)."""


def test_delete_removes_the_file(tmp_path: Path) -> None:
    """Deleting a session removes its database file; the lease file stays (it keeps the
    lease as it is)."""
    with example.session_files_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("a"))
        with cp.acquire_lease("s") as lease:
            cp.delete("s")
            assert lease.info == cp.lease_holder("s")
        assert [] == sorted(p.name for p in (tmp_path / "sessions").iterdir())
        assert ["s"] == sorted(p.name for p in (tmp_path / "leases").iterdir())
        cp.append("s", prompts("b"))
        assert ["b"] == texts(cp.read("s"))


def _private_imports(source: str) -> list[str]:
    """The liteagent imports of ``source`` that are private (a module or name starting with
    ``_``, or a relative import), come from outside :data:`PUBLIC_MODULES`, or name what their
    module does not export (an old spelling such as ``liteagent.eventlog.UserPrompt``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "liteagent"]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level or module.split(".")[0] == "liteagent":
                found += [(module, a.name) for a in node.names]
    return [
        f"{module}:{name}"
        for module, name in found
        if module not in PUBLIC_MODULES
        or (name is not None and name not in importlib.import_module(module).__all__)
    ]


def test_example_imports_only_public_names() -> None:
    """Every liteagent name the example imports is public, from liteagent.eventlog (its types
    and errors included) or liteagent.eventlog.backend."""
    source = EXAMPLE.read_text()
    assert "from liteagent.eventlog.backend import" in source
    assert [] == _private_imports(source)


@pytest.mark.parametrize(
    "source",
    [
        "from liteagent.eventlog._contract import EncodedEvent",
        "from liteagent.eventlog import _memory",
        "import liteagent.eventlog._lease",
        "from liteagent.eventlog.backend import _private",
        "from .._contract import Checkpointer",
        "from liteagent.sdk import create_agent",
        "from liteagent.eventlog import UserPrompt",
    ],
)
def test_private_import_check_finds_private_imports(source: str) -> None:
    """The check above reports private and foreign imports."""
    assert 1 == len(_private_imports(source))


def test_example_touches_only_its_own_private_attributes() -> None:
    """Every ``_name`` attribute the example uses is one it defines (its hooks included): it
    reaches into no private state of the base class or of a lease."""
    tree = ast.parse(EXAMPLE.read_text())
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    defined |= {
        t.attr
        for n in ast.walk(tree)
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Attribute)
    }
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.endswith("__")
    }
    assert used
    assert set() == used - defined


def test_example_implements_every_required_hook() -> None:
    """The example overrides every abstract hook and the lease hooks."""
    cls = example.SessionFilesCheckpointer
    assert issubclass(cls, Checkpointer)
    assert set() == cls.__abstractmethods__
    hooks = set(Checkpointer.__abstractmethods__) | {
        "_acquire_lease",
        "_release_lease",
        "_lease_holder",
    }
    assert [] == [h for h in sorted(hooks) if getattr(cls, h) is getattr(Checkpointer, h)]


def test_backend_guide_documents_every_hook() -> None:
    """liteagent.eventlog.backend's guide names every hook of Checkpointer, required and
    optional, and each exported helper."""
    guide = liteagent.eventlog.backend.__doc__ or ""
    hooks = set(Checkpointer.__abstractmethods__) | OPTIONAL_HOOKS
    assert all(callable(getattr(Checkpointer, h)) for h in hooks)
    documented = [h for h in sorted(hooks) if f"``{h}(" in guide]
    assert sorted(hooks) == documented
    helpers = [n for n in liteagent.eventlog.backend.__all__ if not n.isupper()]
    assert [] == [n for n in helpers if n not in guide]


def _readme_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Writing a backend")
    return readme[start : readme.index("\n## ", start + 1)]


def test_readme_points_at_the_example() -> None:
    """The README's section on writing a backend names the module and the example file."""
    section = _readme_section()
    assert "liteagent.eventlog.backend" in section
    assert "examples/session_files_backend.py" in section
