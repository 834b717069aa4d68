"""The API reference's Griffe extension (docs/griffe_sphinx_roles.py): every Sphinx role in a
docstring becomes an optional cross-reference to the object it names, showing what Sphinx
would show."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

import griffe
import pytest

ROLES = Path(__file__).resolve().parent.parent / "docs" / "griffe_sphinx_roles.py"


@functools.cache
def _extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location("griffe_sphinx_roles", ROLES)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _load(package: str) -> object:
    roles = _extension()
    return griffe.load(
        package, extensions=griffe.load_extensions(roles.SphinxRoles()), resolve_aliases=False
    )


def test_a_role_becomes_a_link_to_the_object_it_names() -> None:
    """``:func:`create_lite_agent``` in liteagent.sdk's LiteAgent resolves, from the module it
    is written in, to the function's full path; the text shown is the name alone."""
    sdk = _load("liteagent.sdk")
    text = sdk["_agent"]["LiteAgent"].docstring.value  # type: ignore[index]
    assert (
        '<autoref optional identifier="liteagent.sdk._factory.create_lite_agent">'
        "<code>create_lite_agent</code></autoref>"
    ) in text


def test_no_role_is_left_in_any_docstring() -> None:
    """After the extension no docstring of the library shows a raw role."""
    role = _extension()._ROLE
    left = []
    for package in ("eventlog", "context", "providers", "tools", "actors", "sdk"):
        root = _load(f"liteagent.{package}")
        stack = [root]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None and role.search(obj.docstring.value):  # type: ignore[attr-defined]
                left.append(obj.path)  # type: ignore[attr-defined]
            stack.extend(
                m
                for m in obj.members.values()
                if not m.is_alias  # type: ignore[attr-defined]
            )
    assert [] == left


@pytest.mark.parametrize(
    ("target", "shown"),
    [("~liteagent.eventlog.CancelToken", "CancelToken"), (".send", "send"), ("fold", "fold")],
)
def test_the_text_shown_is_what_sphinx_shows(target: str, shown: str) -> None:
    """``~a.b.C`` shows ``C``, ``.x`` shows ``x``, a plain name shows itself."""
    assert shown == _extension()._shown(target)


def test_a_name_it_cannot_resolve_is_kept_as_written() -> None:
    """An unknown name stays the identifier (the optional link then renders as plain code)."""
    sdk = _load("liteagent.sdk")
    assert "no_such_thing.at_all" == _extension()._identifier(sdk, "no_such_thing.at_all")
