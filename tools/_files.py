"""The ``read_file`` and ``write_file`` tools, and the text-file helpers ``edit_file`` shares.

Every path is resolved with :func:`resolve_in_workspace`; a refused path, a missing file, a
folder, a special file, a permission problem or a binary file is an ``is_error`` output whose
text names the path as the model gave it — never an exception.

A file is **binary** when its first 8 KiB contain a NUL byte, or when the part read is not valid
UTF-8. Text is read and written as UTF-8 without newline translation (``\\r\\n`` stays).

Files are opened without blocking and checked again once open, so a file swapped for a FIFO
after the check cannot hang the call. Content to write is encoded first: text the file cannot
hold (a lone surrogate) is refused and leaves the file as it was. A write replaces the file
atomically (a temp file renamed over it, :mod:`._replace`): a crash never leaves it half
written, and a hard link to a file outside the workspace is broken, never written through. Reading
checks ``ctx.cancel`` as it goes through a long file.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, BinaryIO

from msgspec import Meta

from liteagent.eventlog import CancelToken

from ._contract import ToolContext, ToolOutput
from ._decorator import tool
from ._errors import InvalidPathError, os_error_message
from ._paths import relative_display, resolve_in_workspace, workspace_root
from ._replace import replace_file

__all__ = [
    "MAX_READ_BYTES",
    "encode_text",
    "open_regular",
    "read_file",
    "read_text",
    "resolve_for_tool",
    "write_bytes",
    "write_file",
]

#: At most this many bytes of the file are returned by one ``read_file`` call.
MAX_READ_BYTES = 256 * 1024
#: ``edit_file`` refuses files larger than this.
MAX_EDIT_BYTES = 16 * 1024 * 1024
#: The prefix checked for a NUL byte.
BINARY_SNIFF_BYTES = 8192
#: ``read_file`` looks at the cancel token every this many lines.
_CANCEL_CHECK_LINES = 4096


def resolve_for_tool(ctx: ToolContext, path: str) -> Path | ToolOutput:
    """``path`` resolved in the workspace, or the ``is_error`` output that refuses it."""
    try:
        return resolve_in_workspace(ctx.workdir, path)
    except InvalidPathError as e:
        return ToolOutput(str(e), is_error=True)


def _regular_file(target: Path, shown: str) -> os.stat_result | ToolOutput:
    """The file's stat, or an ``is_error`` output when it is missing or not a regular file."""
    try:
        st = os.stat(target)
    except OSError as e:
        return ToolOutput(os_error_message(e, shown), is_error=True)
    if stat.S_ISDIR(st.st_mode):
        return ToolOutput(f"{shown}: is a folder, not a file", is_error=True)
    if not stat.S_ISREG(st.st_mode):
        return ToolOutput(f"{shown}: not a regular file", is_error=True)
    return st


def open_regular(target: Path, shown: str) -> BinaryIO | ToolOutput:
    """``target`` opened for reading without blocking (a FIFO swapped in after a check would
    block a plain open), or the ``is_error`` output when it is not a regular file."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return ToolOutput(os_error_message(e, shown), is_error=True)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return ToolOutput(f"{shown}: not a regular file", is_error=True)
        os.set_blocking(fd, True)
    except OSError as e:
        os.close(fd)
        return ToolOutput(os_error_message(e, shown), is_error=True)
    return os.fdopen(fd, "rb")


def encode_text(content: str, what: str) -> bytes | ToolOutput:
    """``content`` as UTF-8, or the ``is_error`` output naming the character that cannot be."""
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as e:
        return ToolOutput(
            f"{what} contains {content[e.start : e.end]!r} at character {e.start}, which is not "
            "text a file can hold (a lone surrogate); nothing was written",
            is_error=True,
        )


def _binary(shown: str, why: str) -> ToolOutput:
    return ToolOutput(f"{shown}: binary file ({why}); not shown as text", is_error=True)


def read_text(target: Path, shown: str, max_bytes: int) -> str | ToolOutput:
    """The whole text of a UTF-8 file, or an ``is_error`` output (missing, not a regular file,
    larger than ``max_bytes``, binary, unreadable). Newlines are kept as they are."""
    st = _regular_file(target, shown)
    if isinstance(st, ToolOutput):
        return st
    if st.st_size > max_bytes:
        return ToolOutput(
            f"{shown}: {st.st_size} bytes is larger than the {max_bytes}-byte limit",
            is_error=True,
        )
    f = open_regular(target, shown)
    if isinstance(f, ToolOutput):
        return f
    try:
        with f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        return ToolOutput(os_error_message(e, shown), is_error=True)
    if len(data) > max_bytes:  # it grew since the stat
        return ToolOutput(f"{shown}: larger than the {max_bytes}-byte limit", is_error=True)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return _binary(shown, "it contains NUL bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _binary(shown, "not valid UTF-8")


@tool(name="read_file", read_only=True)
def read_file(
    path: Annotated[str, Meta(description="The file, relative to the workspace.")],
    offset: Annotated[int, Meta(ge=1, description="The first line to show, counting from 1.")] = 1,
    limit: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="How many lines to show (default: to the end, within the size limit)."),
    ] = None,
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Read a text file in the workspace. Lines are numbered like `cat -n` (line number, tab,
    text). Use offset and limit to read part of a long file; at most 256 KiB is returned per
    call, with a note saying where to read on. Binary files are refused."""
    target = resolve_for_tool(ctx, path)
    if isinstance(target, ToolOutput):
        return target
    st = _regular_file(target, path)
    if isinstance(st, ToolOutput):
        return st
    f = open_regular(target, path)
    if isinstance(f, ToolOutput):
        return f
    try:
        with f:
            if b"\x00" in f.read(BINARY_SNIFF_BYTES):
                return _binary(path, "it contains NUL bytes")
            f.seek(0)
            return _numbered(f, path, offset, limit, ctx.cancel)
    except OSError as e:
        return ToolOutput(os_error_message(e, path), is_error=True)


def _numbered(
    f: BinaryIO, shown: str, offset: int, limit: int | None, cancel: CancelToken
) -> ToolOutput:
    """Lines ``offset .. offset+limit-1`` of ``f``, numbered, within :data:`MAX_READ_BYTES`."""
    out: list[str] = []
    used = 0
    last = 0
    note = ""
    for lineno, raw in enumerate(_capped_lines(f, MAX_READ_BYTES + 1), start=1):
        last = lineno
        if lineno % _CANCEL_CHECK_LINES == 0 and cancel.cancelled:
            return ToolOutput(f"{shown}: cancelled; the read was stopped", is_error=True)
        if lineno < offset:
            continue
        if limit is not None and lineno >= offset + limit:
            break
        data = raw[:-1] if raw.endswith(b"\n") else raw
        room = MAX_READ_BYTES - used
        if len(data) > room:
            if room > 0:
                try:
                    part = codecs.getincrementaldecoder("utf-8")().decode(data[:room])
                except UnicodeDecodeError:
                    return _binary(shown, "not valid UTF-8")
                out.append(f"{lineno:>6}\t{part}")
                note = (
                    f"[truncated: at most {MAX_READ_BYTES // 1024} KiB is shown per call; "
                    f"line {lineno} was cut. Read on with offset={lineno + 1}.]"
                )
            else:
                note = (
                    f"[truncated: at most {MAX_READ_BYTES // 1024} KiB is shown per call. "
                    f"Read on with offset={lineno}.]"
                )
            break
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _binary(shown, "not valid UTF-8")
        out.append(f"{lineno:>6}\t{text}")
        used += len(data) + 1
    if not out:
        if last == 0:
            return ToolOutput(f"{shown}: the file is empty")
        return ToolOutput(
            f"{shown}: offset {offset} is past the end of the file ({last} lines)", is_error=True
        )
    if note:
        out.append(note)
    return ToolOutput("\n".join(out))


def _capped_lines(f: BinaryIO, cap: int) -> Iterator[bytes]:
    """The lines of ``f`` (with their ``\\n``), each cut to at most ``cap`` bytes; the rest of a
    longer line is skipped, so memory stays bounded on a file with huge lines."""
    while line := f.readline(cap):
        yield line
        if len(line) == cap and not line.endswith(b"\n"):
            while (rest := f.readline(cap)) and not rest.endswith(b"\n"):
                pass


@tool(name="write_file", changes_param="path")
def write_file(
    path: Annotated[str, Meta(description="The file, relative to the workspace.")],
    content: Annotated[str, Meta(description="The complete new content of the file.")],
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Write a text file in the workspace, replacing it if it exists; missing parent folders
    are created. The content is written as UTF-8, exactly as given."""
    target = resolve_for_tool(ctx, path)
    if isinstance(target, ToolOutput):
        return target
    root = workspace_root(ctx.workdir)
    if target == root:
        return ToolOutput(f"{path}: is the workspace folder, not a file", is_error=True)
    data = encode_text(content, "content")
    if isinstance(data, ToolOutput):
        return data
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return ToolOutput(os_error_message(e, path), is_error=True)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return ToolOutput(f"{path}: is a folder, not a file", is_error=True)
    if st is not None and not stat.S_ISREG(st.st_mode):
        return ToolOutput(f"{path}: not a regular file", is_error=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, data)
    except OSError as e:
        return ToolOutput(os_error_message(e, path), is_error=True)
    size = len(data)
    verb = "replaced" if st is not None else "created"
    return ToolOutput(f"{verb} {relative_display(root, target)} ({size} bytes)")


def write_bytes(target: Path, data: bytes) -> None:
    """Replace the content of the file ``target`` (created if missing) with ``data``,
    atomically and durably, breaking a hard link rather than writing through it (see
    :mod:`._replace`); raises ``OSError``. A file the process may not write is refused
    (``EACCES``), as writing it in place would be, although the rename would be allowed."""
    if os.path.lexists(target) and not os.access(target, os.W_OK):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(target))  # a PermissionError
    replace_file(target, data)


@tool(name="delete_file", changes_param="path")
def delete_file(
    path: Annotated[str, Meta(description="The file, relative to the workspace.")],
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Delete a file in the workspace (not a folder). A restore brings it back."""
    target = resolve_for_tool(ctx, path)
    if isinstance(target, ToolOutput):
        return target
    try:
        if stat.S_ISDIR(os.stat(target).st_mode):
            return ToolOutput(f"{path}: is a folder; only files can be deleted", is_error=True)
        os.unlink(target)
    except OSError as e:
        return ToolOutput(os_error_message(e, path), is_error=True)
    return ToolOutput(f"deleted {relative_display(workspace_root(ctx.workdir), target)}")
