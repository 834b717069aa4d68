"""read_file, write_file and edit_file on real files: ranges, limits, binary files, escapes."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from liteagent.tools import (
    PathOutsideWorkspaceError,
    Tool,
    ToolContext,
    ToolOutput,
    edit_file,
    read_file,
    write_file,
)
from liteagent.tools._errors import os_error_message
from liteagent.tools._files import MAX_READ_BYTES


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace beside an ``outside`` folder, with a symlinked file and folder leading out."""
    (tmp_path / "ws").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (tmp_path / "ws" / "link.txt").symlink_to(outside / "secret.txt")
    (tmp_path / "ws" / "outdir").symlink_to(outside)
    return tmp_path / "ws"


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    """A context for calls in the workspace."""
    return ToolContext(workdir=ws, session_id="s1", tool_call_id="call-1")


def _input(tool: Tool, path: str) -> dict[str, Any]:
    """A valid input for ``tool`` on ``path``."""
    if tool is write_file:
        return {"path": path, "content": "pwned\n"}
    if tool is edit_file:
        return {"path": path, "old_string": "secret", "new_string": "pwned"}
    return {"path": path}


ESCAPES = ["../outside/secret.txt", "/etc/passwd", "link.txt", "outdir/secret.txt", "a\x00b"]


@pytest.mark.parametrize("tool", [read_file, write_file, edit_file], ids=lambda t: t.name)
@pytest.mark.parametrize("path", ESCAPES)
def test_every_file_tool_refuses_paths_outside(
    tool: Tool, path: str, ws: Path, ctx: ToolContext
) -> None:
    """Escapes (.., absolute, symlinked file or folder, NUL) are errors; nothing is changed."""
    out = tool.run(_input(tool, path), ctx)
    assert (True, "secret\n") == (out.is_error, (ws.parent / "outside" / "secret.txt").read_text())


@pytest.mark.parametrize("tool", [write_file, edit_file], ids=lambda t: t.name)
def test_changed_paths_refuses_a_path_outside(tool: Tool, ctx: ToolContext) -> None:
    """changed_paths raises for an escape, so the runtime fails the call before it runs."""
    with pytest.raises(PathOutsideWorkspaceError):
        tool.changed_paths(_input(tool, "outdir/secret.txt"), ctx)


def test_read_numbers_lines_like_cat_n(ws: Path, ctx: ToolContext) -> None:
    """Each line is shown as a right-aligned number, a tab and the text."""
    (ws / "a.txt").write_text("alpha\nbeta\n")
    assert ToolOutput("     1\talpha\n     2\tbeta") == read_file.run({"path": "a.txt"}, ctx)


def test_read_offset_and_limit_select_lines(ws: Path, ctx: ToolContext) -> None:
    """offset is the 1-based first line, limit the number of lines."""
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = read_file.run({"path": "a.txt", "offset": 4, "limit": 2}, ctx)
    assert "     4\tline 4\n     5\tline 5" == out.content


def test_read_offset_past_the_end_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """An offset beyond the last line says how many lines there are."""
    (ws / "a.txt").write_text("one\ntwo\n")
    out = read_file.run({"path": "a.txt", "offset": 5}, ctx)
    assert (True, True) == (out.is_error, "(2 lines)" in out.content)


def test_read_empty_file_says_so(ws: Path, ctx: ToolContext) -> None:
    """An empty file is not an error."""
    (ws / "empty.txt").write_text("")
    assert ToolOutput("empty.txt: the file is empty") == read_file.run({"path": "empty.txt"}, ctx)


def test_read_truncates_at_the_size_limit_with_a_note(ws: Path, ctx: ToolContext) -> None:
    """Past 256 KiB the output stops, with a note giving the offset to read on from."""
    line = "x" * 127 + "\n"  # 128 bytes: exactly 2048 lines fit in 256 KiB
    (ws / "big.txt").write_text(line * 3000)
    out = read_file.run({"path": "big.txt"}, ctx)
    lines = out.content.split("\n")
    assert ("  2048\t" + "x" * 127, "Read on with offset=2049.]") == (
        lines[-2],
        lines[-1][-len("Read on with offset=2049.]") :],
    )


def test_read_cuts_a_single_huge_line(ws: Path, ctx: ToolContext) -> None:
    """A line longer than the limit is cut, and the note says so."""
    (ws / "min.js").write_text("y" * (MAX_READ_BYTES * 2) + "\nnext\n")
    out = read_file.run({"path": "min.js"}, ctx)
    cut = "line 1 was cut" in out.content
    assert (True, True) == (cut, len(out.content) < MAX_READ_BYTES + 500)


def test_read_refuses_a_file_with_nul_bytes(ws: Path, ctx: ToolContext) -> None:
    """A NUL byte in the first 8 KiB makes the file binary."""
    (ws / "a.bin").write_bytes(b"abc\x00def")
    out = read_file.run({"path": "a.bin"}, ctx)
    assert (True, True) == (out.is_error, "binary file" in out.content)


def test_read_refuses_invalid_utf8(ws: Path, ctx: ToolContext) -> None:
    """Bytes that are not UTF-8 make the file binary."""
    (ws / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    out = read_file.run({"path": "latin1.txt"}, ctx)
    assert (True, True) == (out.is_error, "binary file" in out.content)


def test_read_missing_file_is_an_error(ctx: ToolContext) -> None:
    """A missing file is an is_error output naming the path."""
    assert ToolOutput("nope.txt: no such file or folder", is_error=True) == read_file.run(
        {"path": "nope.txt"}, ctx
    )


def test_read_folder_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """A folder is not a file."""
    (ws / "src").mkdir()
    assert ToolOutput("src: is a folder, not a file", is_error=True) == read_file.run(
        {"path": "src"}, ctx
    )


def test_permission_error_reads_as_a_plain_sentence() -> None:
    """A permission error becomes "<path>: permission denied" (the sentence a tool returns;
    tests run as root here, where a mode-000 file is still readable, so the mapping itself is
    checked)."""
    error = PermissionError(errno.EACCES, "Permission denied", "/w/locked.txt")
    assert "locked.txt: permission denied" == os_error_message(error, "locked.txt")


def test_read_fifo_is_an_error_without_blocking(ws: Path, ctx: ToolContext) -> None:
    """A named pipe is not opened (reading it would block)."""
    os.mkfifo(ws / "pipe")
    assert ToolOutput("pipe: not a regular file", is_error=True) == read_file.run(
        {"path": "pipe"}, ctx
    )


def test_write_fifo_is_an_error_without_blocking(ws: Path, ctx: ToolContext) -> None:
    """Writing onto a named pipe is refused instead of waiting for a reader."""
    os.mkfifo(ws / "pipe")
    assert ToolOutput("pipe: not a regular file", is_error=True) == write_file.run(
        {"path": "pipe", "content": "x"}, ctx
    )


def test_read_bad_input_names_the_field(ctx: ToolContext) -> None:
    """A missing or ill-typed field is an is_error output naming it."""
    out = read_file.run({"path": "a.txt", "offset": 0}, ctx)
    assert (True, True) == (out.is_error, "$.offset" in out.content)


def test_write_creates_missing_folders(ws: Path, ctx: ToolContext) -> None:
    """Parent folders are created."""
    out = write_file.run({"path": "a/b/c.txt", "content": "hi\r\n"}, ctx)
    assert (False, b"hi\r\n") == (out.is_error, (ws / "a" / "b" / "c.txt").read_bytes())


def test_write_replaces_an_existing_file(ws: Path, ctx: ToolContext) -> None:
    """An existing file is replaced and the output says so."""
    (ws / "a.txt").write_text("old")
    out = write_file.run({"path": "a.txt", "content": "new"}, ctx)
    assert ("replaced a.txt (3 bytes)", "new") == (out.content, (ws / "a.txt").read_text())


def test_write_changed_paths_is_the_resolved_path(ws: Path, ctx: ToolContext) -> None:
    """write_file declares the file it will write, resolved."""
    paths = write_file.changed_paths({"path": "./src/../a.txt", "content": ""}, ctx)
    assert [Path(os.path.realpath(ws)) / "a.txt"] == paths


def test_write_onto_a_folder_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """Writing where a folder is fails cleanly."""
    (ws / "src").mkdir()
    out = write_file.run({"path": "src", "content": "x"}, ctx)
    assert ToolOutput("src: is a folder, not a file", is_error=True) == out


def test_write_under_a_file_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """A parent that is a file is reported, not raised."""
    (ws / "a.txt").write_text("x")
    assert write_file.run({"path": "a.txt/b.txt", "content": "x"}, ctx).is_error


def test_edit_replaces_a_unique_match(ws: Path, ctx: ToolContext) -> None:
    """One occurrence is replaced exactly."""
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    out = edit_file.run({"path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}, ctx)
    assert ("replaced 1 occurrence in a.py", "x = 1\ny = 3\n") == (
        out.content,
        (ws / "a.py").read_text(),
    )


def test_edit_without_a_match_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """Zero matches: an error saying 0 matches; the file is unchanged."""
    (ws / "a.py").write_text("x = 1\n")
    out = edit_file.run({"path": "a.py", "old_string": "z", "new_string": "w"}, ctx)
    assert (True, True, "x = 1\n") == (
        out.is_error,
        "0 matches" in out.content,
        (ws / "a.py").read_text(),
    )


def test_edit_with_several_matches_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """Several matches without replace_all: an error naming how many; unchanged."""
    (ws / "a.py").write_text("a\na\na\n")
    out = edit_file.run({"path": "a.py", "old_string": "a", "new_string": "b"}, ctx)
    assert (True, True, "a\na\na\n") == (
        out.is_error,
        "matches 3 times" in out.content,
        (ws / "a.py").read_text(),
    )


def test_edit_counts_overlapping_matches_as_ambiguous(ws: Path, ctx: ToolContext) -> None:
    """ "aa" occurs at two positions of "aaa", so it is not unique."""
    (ws / "a.txt").write_text("aaa")
    out = edit_file.run({"path": "a.txt", "old_string": "aa", "new_string": "b"}, ctx)
    assert (True, "aaa") == (out.is_error, (ws / "a.txt").read_text())


def test_edit_replace_all_replaces_every_match(ws: Path, ctx: ToolContext) -> None:
    """replace_all replaces each occurrence and reports the count."""
    (ws / "a.py").write_text("a\na\na\n")
    out = edit_file.run(
        {"path": "a.py", "old_string": "a", "new_string": "b", "replace_all": True}, ctx
    )
    assert ("replaced 3 occurrences in a.py", "b\nb\nb\n") == (
        out.content,
        (ws / "a.py").read_text(),
    )


def test_edit_same_old_and_new_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """old_string == new_string changes nothing and is refused."""
    (ws / "a.py").write_text("a\n")
    out = edit_file.run({"path": "a.py", "old_string": "a", "new_string": "a"}, ctx)
    assert (True, True) == (out.is_error, "the same" in out.content)


def test_edit_empty_old_string_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """An empty old_string matches everywhere and is refused."""
    (ws / "a.py").write_text("a\n")
    assert edit_file.run({"path": "a.py", "old_string": "", "new_string": "b"}, ctx).is_error


def test_edit_keeps_crlf_line_endings(ws: Path, ctx: ToolContext) -> None:
    """No newline translation: the rest of a CRLF file keeps its endings."""
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    edit_file.run({"path": "w.txt", "old_string": "two", "new_string": "2"}, ctx)
    assert b"one\r\n2\r\n" == (ws / "w.txt").read_bytes()


def test_edit_missing_file_is_an_error(ctx: ToolContext) -> None:
    """Editing a file that does not exist is an error naming it."""
    out = edit_file.run({"path": "nope.py", "old_string": "a", "new_string": "b"}, ctx)
    assert ToolOutput("nope.py: no such file or folder", is_error=True) == out


def test_edit_binary_file_is_an_error(ws: Path, ctx: ToolContext) -> None:
    """A binary file is not edited."""
    (ws / "a.bin").write_bytes(b"a\x00b")
    out = edit_file.run({"path": "a.bin", "old_string": "a", "new_string": "c"}, ctx)
    assert (True, b"a\x00b") == (out.is_error, (ws / "a.bin").read_bytes())


def test_edit_changed_paths_is_the_resolved_path(ws: Path, ctx: ToolContext) -> None:
    """edit_file declares the file it edits, resolved through symlinks inside the workspace."""
    (ws / "real.py").write_text("x")
    (ws / "alias.py").symlink_to(ws / "real.py")
    paths = edit_file.changed_paths({"path": "alias.py", "old_string": "x", "new_string": "y"}, ctx)
    assert [Path(os.path.realpath(ws)) / "real.py"] == paths


def test_read_file_declares_no_changed_paths(ctx: ToolContext) -> None:
    """read_file is read-only."""
    assert [] == read_file.changed_paths({"path": "a.txt"}, ctx)
