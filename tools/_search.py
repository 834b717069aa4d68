"""The ``glob`` and ``grep`` tools: find files by path pattern, find lines by regex.

Both are read-only, report paths relative to the workspace with ``/`` separators, and never
list anything outside it: patterns cannot leave it, symlinks whose target is outside are left
out, and symlinked folders are not entered (see ``_walk``). Both check ``ctx.cancel`` as they
go and return an ``is_error`` output when cancelled. No match is not an error.

``glob`` returns the matching files and folders (folders end with ``/``), sorted, at most
:data:`GLOB_LIMIT` of them, with a note giving the number left out.

``grep`` searches a file, or the files below a folder (default: the whole workspace, skipping
``.git``, ``.hg`` and ``.svn``), for a Python regular expression, line by line (lines split on
``\\n``), and prints ``path:line:text``, files in walk order (depth-first, names sorted). An
optional ``glob`` filter without ``/`` matches file names (``*.py``); with ``/`` it matches the
workspace-relative path (``src/**/*.ts``). Binary files (a NUL byte in the first 8 KiB, or not
UTF-8), special files (FIFOs, devices) and files over :data:`GREP_MAX_FILE_BYTES` are skipped;
a matched line is cut to :data:`GREP_LINE_CHARS` characters; output stops after
:data:`GREP_MAX_MATCHES` lines or :data:`GREP_MAX_CHARS` characters, with a note. A regex
that does not compile is an ``is_error`` output. (A pathological regex can run long; the
search is cancellable between files.)
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from typing import Annotated

from msgspec import Meta

from ._contract import ToolContext, ToolOutput
from ._decorator import tool
from ._errors import InvalidPathError, os_error_message
from ._paths import relative_display, resolve_in_workspace, workspace_root
from ._walk import Entry, GlobPattern, compile_glob, walk

__all__ = [
    "GLOB_LIMIT",
    "GREP_LINE_CHARS",
    "GREP_MAX_CHARS",
    "GREP_MAX_FILE_BYTES",
    "GREP_MAX_MATCHES",
    "glob",
    "grep",
]

GLOB_LIMIT = 500
_GLOB_COLLECT_LIMIT = 100_000
GREP_MAX_MATCHES = 250
GREP_MAX_CHARS = 30_000
GREP_LINE_CHARS = 500
GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
_SNIFF_BYTES = 8192
_VCS_DIRS = frozenset({".git", ".hg", ".svn"})
_CANCELLED = ToolOutput("cancelled; the search was stopped", is_error=True)


@tool(name="glob")
def glob(
    pattern: Annotated[
        str,
        Meta(description="A glob relative to the workspace, e.g. **/*.py, src/*.ts, docs/**"),
    ],
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Find files and folders in the workspace whose path matches a glob pattern. * and ?
    do not cross /, a ** component matches any number of folders, [abc] is a set. Results are
    workspace-relative, sorted, folders end with /."""
    try:
        compiled = compile_glob(pattern)
    except ValueError as e:
        return ToolOutput(str(e), is_error=True)
    root = workspace_root(ctx.workdir)
    base_rel = "/".join(compiled.prefix)
    try:
        base = resolve_in_workspace(root, base_rel)
    except InvalidPathError as e:
        return ToolOutput(str(e), is_error=True)
    if compiled.depth == 0:  # no wildcard at all: the path exists or not
        found = [base_rel + ("/" if base.is_dir() else "")] if base.exists() else []
        return _glob_output(pattern, found, stopped=False)
    found = []
    stopped = False
    for entry in walk(root, base, base_rel, max_depth=compiled.depth):
        if ctx.cancel.cancelled:
            return _CANCELLED
        if compiled.matches(entry.rel):
            found.append(entry.rel + ("/" if entry.is_dir else ""))
            if len(found) >= _GLOB_COLLECT_LIMIT:
                stopped = True
                break
    return _glob_output(pattern, sorted(found), stopped=stopped)


def _glob_output(pattern: str, found: list[str], *, stopped: bool) -> ToolOutput:
    if not found:
        return ToolOutput(f"no files match {pattern!r}")
    lines = found[:GLOB_LIMIT]
    if len(found) > GLOB_LIMIT:
        more = f"{len(found) - GLOB_LIMIT}{'+' if stopped else ''}"
        lines.append(f"[{more} more matches not shown; use a narrower pattern]")
    return ToolOutput("\n".join(lines))


@tool(name="grep")
def grep(
    pattern: Annotated[str, Meta(min_length=1, description="A Python regular expression.")],
    path: Annotated[
        str, Meta(description="A file or folder to search, relative to the workspace.")
    ] = ".",
    glob: Annotated[
        str | None,
        Meta(description="Only files matching this glob: *.py (names) or src/**/*.py (paths)."),
    ] = None,
    ignore_case: Annotated[bool, Meta(description="Match letters case-insensitively.")] = False,
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Search the text files of the workspace for a regular expression (Python syntax), line
    by line; prints path:line:text for each matching line. Binary files are skipped. Narrow
    the search with path (a file or folder) and glob (e.g. *.py)."""
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        return ToolOutput(f"invalid regex {pattern!r}: {e}", is_error=True)
    file_filter: GlobPattern | None = None
    if glob is not None:
        try:
            file_filter = compile_glob(glob)
        except ValueError as e:
            return ToolOutput(str(e), is_error=True)
    root = workspace_root(ctx.workdir)
    try:
        target = resolve_in_workspace(root, path)
    except InvalidPathError as e:
        return ToolOutput(str(e), is_error=True)
    if not target.exists():
        return ToolOutput(f"{path}: no such file or folder", is_error=True)
    rel = relative_display(root, target)
    files: Iterator[Entry]
    if target.is_dir():
        files = (e for e in walk(root, target, rel, skip_dirs=_VCS_DIRS) if not e.is_dir)
    else:
        files = iter([Entry(rel, target, is_dir=False)])
    search = _Search(regex)
    for entry in files:
        if ctx.cancel.cancelled:
            return _CANCELLED
        if file_filter is not None and not _selected(file_filter, entry.rel):
            continue
        if not search.file(entry):
            break
    return search.output()


def _selected(file_filter: GlobPattern, rel: str) -> bool:
    if "/" in file_filter.text.strip("/"):
        return file_filter.matches(rel)
    return file_filter.matches(rel.rsplit("/", 1)[-1])


class _Search:
    """The matches found so far, and the caps."""

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.regex = regex
        self.lines: list[str] = []
        self.chars = 0
        self.full = False
        self.skipped_large = 0
        self.unreadable: list[str] = []

    def file(self, entry: Entry) -> bool:
        """Search one file; return False once the output is full."""
        try:
            st = entry.path.stat()
            if not stat.S_ISREG(st.st_mode):
                return True  # a FIFO or device would block or never end
            if st.st_size > GREP_MAX_FILE_BYTES:
                self.skipped_large += 1
                return True
            data = entry.path.read_bytes()
        except OSError as e:
            self.unreadable.append(os_error_message(e, entry.rel))
            return True
        if b"\x00" in data[:_SNIFF_BYTES]:
            return True
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        for lineno, line in enumerate(lines, start=1):
            if self.regex.search(line) is None:
                continue
            shown = line.rstrip("\r")
            if len(shown) > GREP_LINE_CHARS:
                shown = shown[:GREP_LINE_CHARS] + "…"
            out = f"{entry.rel}:{lineno}:{shown}"
            if len(self.lines) >= GREP_MAX_MATCHES or self.chars + len(out) > GREP_MAX_CHARS:
                self.full = True
                return False
            self.lines.append(out)
            self.chars += len(out) + 1
        return True

    def output(self) -> ToolOutput:
        notes = []
        if self.full:
            notes.append(
                f"[output stopped after {len(self.lines)} matching lines; narrow the pattern, "
                "path or glob to see the rest]"
            )
        if self.skipped_large:
            notes.append(
                f"[{self.skipped_large} files over {GREP_MAX_FILE_BYTES // (1024 * 1024)} MiB "
                "were not searched]"
            )
        notes.extend(f"[not searched: {u}]" for u in self.unreadable[:10])
        body = self.lines or ["no matches"]
        return ToolOutput("\n".join(body + notes))
