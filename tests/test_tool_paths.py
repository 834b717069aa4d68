"""resolve_in_workspace: relative to the workspace, symlinks resolved, anything outside refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.eventlog.errors import LiteAgentError
from liteagent.tools import (
    InvalidPathError,
    PathOutsideWorkspaceError,
    ToolError,
    resolve_in_workspace,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace folder beside an ``outside`` folder holding a secret file."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    return tmp_path / "ws"


def test_relative_path_is_below_the_workspace(ws: Path) -> None:
    """A relative path is joined to the workspace."""
    assert ws / "src" / "a.py" == resolve_in_workspace(ws, "src/a.py")


def test_dot_and_empty_name_the_workspace(ws: Path) -> None:
    """ "." and "" resolve to the workspace itself."""
    assert [ws, ws] == [resolve_in_workspace(ws, "."), resolve_in_workspace(ws, "")]


def test_absolute_path_inside_is_allowed(ws: Path) -> None:
    """An absolute path inside the workspace is accepted as is."""
    assert ws / "a.txt" == resolve_in_workspace(ws, str(ws / "a.txt"))


def test_dotdot_that_stays_inside_is_allowed(ws: Path) -> None:
    """`a/../b` is normalized and stays inside."""
    assert ws / "b" == resolve_in_workspace(ws, "a/../b")


def test_dotdot_escape_is_refused(ws: Path) -> None:
    """`../x` leaves the workspace and is refused."""
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "../outside/secret.txt")


def test_dotdot_through_a_missing_folder_is_refused(ws: Path) -> None:
    """A `..` after a folder that does not exist still cannot climb out."""
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "missing/../../outside/secret.txt")


def test_absolute_path_outside_is_refused(ws: Path) -> None:
    """/etc/passwd is not in the workspace."""
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "/etc/passwd")


def test_symlinked_file_pointing_outside_is_refused(ws: Path) -> None:
    """A symlink inside the workspace whose target is outside is refused."""
    (ws / "link.txt").symlink_to(ws.parent / "outside" / "secret.txt")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "link.txt")


def test_symlinked_folder_pointing_outside_is_refused(ws: Path) -> None:
    """A path through a symlinked folder whose target is outside is refused."""
    (ws / "out").symlink_to(ws.parent / "outside")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "out/new-file.txt")


def test_dangling_symlink_pointing_outside_is_refused(ws: Path) -> None:
    """A dangling symlink is still followed, so writing through it cannot create a file outside."""
    (ws / "dangling").symlink_to(ws.parent / "outside" / "not-yet.txt")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "dangling")


def test_missing_folder_then_symlink_outside_is_refused(ws: Path) -> None:
    """`missing/../link/x` resolves the symlink after the `..`, and is refused."""
    (ws / "out").symlink_to(ws.parent / "outside")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(ws, "missing/../out/secret.txt")


def test_symlink_pointing_inside_resolves_to_its_target(ws: Path) -> None:
    """A symlink to a file inside the workspace is allowed and resolved."""
    (ws / "real.txt").write_text("x")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    assert ws / "real.txt" == resolve_in_workspace(ws, "alias.txt")


def test_workspace_given_through_a_symlink_is_resolved(ws: Path) -> None:
    """The workspace is its real path: paths through a symlinked workdir still resolve inside."""
    alias = ws.parent / "alias"
    alias.symlink_to(ws)
    assert ws / "a.txt" == resolve_in_workspace(alias, str(alias / "a.txt"))


def test_nul_byte_is_refused(ws: Path) -> None:
    """A NUL byte cannot be part of a file name."""
    with pytest.raises(InvalidPathError, match="NUL"):
        resolve_in_workspace(ws, "a\x00b")


def test_outside_error_names_the_path(ws: Path) -> None:
    """The refusal says which path and which workspace."""
    with pytest.raises(PathOutsideWorkspaceError) as info:
        resolve_in_workspace(ws, "/etc/passwd")
    assert ("/etc/passwd", os.path.realpath(ws)) == (info.value.path, info.value.workspace)


def test_path_errors_share_the_roots() -> None:
    """The path errors are ToolErrors, LiteAgentErrors and ValueErrors."""
    assert issubclass(PathOutsideWorkspaceError, InvalidPathError)
    assert all(
        issubclass(InvalidPathError, base) for base in (ToolError, LiteAgentError, ValueError)
    )


_SEGMENTS = st.sampled_from(["a", "b", "..", ".", "out", "in", "missing", "/"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_SEGMENTS, min_size=1, max_size=6))
def test_any_accepted_path_is_inside(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str]
) -> None:
    """Whatever the mix of `..`, symlinks and names, an accepted path is inside the workspace."""
    base = tmp_path_factory.getbasetemp() / "prop"
    ws = base / "ws"
    if not ws.exists():
        (ws / "a").mkdir(parents=True)
        (base / "outside").mkdir()
        (ws / "out").symlink_to(base / "outside")
        (ws / "in").symlink_to(ws / "a")
    path = "/".join(parts)
    try:
        resolved = resolve_in_workspace(ws, path)
    except PathOutsideWorkspaceError:
        return
    assert resolved.is_relative_to(os.path.realpath(ws))
