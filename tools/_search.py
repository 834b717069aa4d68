"""The ``glob`` and ``grep`` tools: find files by path pattern, find lines by regex.

Both are read-only, report paths relative to the workspace with ``/`` separators, and never
list anything outside it: patterns cannot leave it, symlinks whose target is outside are left
out, and symlinked folders are not entered (see ``_walk``). Both check ``ctx.cancel`` as they
go and return an ``is_error`` output when cancelled. No match is not an error. Both have a time
limit for the whole call, :data:`GLOB_TIME_LIMIT` and :data:`GREP_TIME_LIMIT` (30 s): past it
the call stops and returns an ``is_error`` output with what it found so far.

``glob`` returns the matching files and folders (folders end with ``/``), sorted, at most
:data:`GLOB_LIMIT` of them, with a note giving the number left out. Its matching takes
polynomial time whatever the pattern (see ``_walk``).

``grep`` searches a file, or the files below a folder (default: the whole workspace, skipping
``.git``, ``.hg`` and ``.svn``), for a Python regular expression, line by line (lines split on
``\\n``), and prints ``path:line:text``, files in walk order (depth-first, names sorted). An
optional ``glob`` filter without ``/`` matches file names (``*.py``); with ``/`` it matches the
workspace-relative path (``src/**/*.ts``). Binary files (a NUL byte in the first 8 KiB, or not
UTF-8), special files (FIFOs, devices) and files over :data:`GREP_MAX_FILE_BYTES` are skipped;
a matched line is cut to :data:`GREP_LINE_CHARS` characters; output stops after
:data:`GREP_MAX_MATCHES` lines or :data:`GREP_MAX_CHARS` characters, with a note. A regex
that does not compile is an ``is_error`` output.

The regex is Python's ``re``, exactly (backreferences and lookaround included), but it runs in
a child process (``_grep_process``): a pattern that backtracks catastrophically (``(a+)+$``)
costs that process, which is killed at the time limit or within :data:`POLL_SECONDS` of a
cancel, and never freezes the host (``re`` holds the GIL while it matches). The cost is about
20 ms per call to start the interpreter.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from msgspec import Meta

from ._contract import ToolContext, ToolOutput
from ._decorator import FunctionTool, tool
from ._errors import InvalidPathError
from ._grep_process import POLL_SECONDS, SearchLimits, SearchResult, run_search
from ._paths import printed_name, relative_display, resolve_in_workspace, workspace_root
from ._walk import Entry, GlobPattern, compile_glob, walk

__all__ = [
    "GLOB_LIMIT",
    "GLOB_TIME_LIMIT",
    "GREP_LINE_CHARS",
    "GREP_MAX_CHARS",
    "GREP_MAX_FILE_BYTES",
    "GREP_MAX_MATCHES",
    "GREP_TIME_LIMIT",
    "PATTERN_MAX_CHARS",
    "POLL_SECONDS",
    "glob",
    "grep",
    "make_glob",
    "make_grep",
]

GLOB_LIMIT = 500
_GLOB_COLLECT_LIMIT = 100_000
GLOB_TIME_LIMIT = 30.0
GREP_TIME_LIMIT = 30.0
GREP_MAX_MATCHES = 250
GREP_MAX_CHARS = 30_000
GREP_LINE_CHARS = 500
GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
#: The longest regex or glob pattern accepted (a path is at most 4096 bytes on Linux).
PATTERN_MAX_CHARS = 4096
_SNIFF_BYTES = 8192
_VCS_DIRS = frozenset({".git", ".hg", ".svn"})
_CANCELLED = ToolOutput("cancelled; the search was stopped", is_error=True)
_LIMITS = SearchLimits(
    max_file_bytes=GREP_MAX_FILE_BYTES,
    sniff_bytes=_SNIFF_BYTES,
    line_chars=GREP_LINE_CHARS,
    max_matches=GREP_MAX_MATCHES,
    max_chars=GREP_MAX_CHARS,
)


def make_glob(time_limit: float = GLOB_TIME_LIMIT) -> FunctionTool[..., ToolOutput]:
    """A ``glob`` tool whose calls stop after ``time_limit`` seconds (:data:`glob` uses
    :data:`GLOB_TIME_LIMIT`)."""

    @tool(name="glob", read_only=True)
    def glob(
        pattern: Annotated[
            str,
            Meta(
                min_length=1,
                max_length=PATTERN_MAX_CHARS,
                description="A glob relative to the workspace, e.g. **/*.py, src/*.ts, docs/**",
            ),
        ],
        *,
        ctx: ToolContext,
    ) -> ToolOutput:
        """Find files and folders in the workspace whose path matches a glob pattern. * and ?
        do not cross /, a ** component matches any number of folders, [abc] is a set. Results
        are workspace-relative, sorted, folders end with /."""
        return _glob(pattern, ctx, time_limit)

    return glob


def _glob(pattern: str, ctx: ToolContext, time_limit: float) -> ToolOutput:
    deadline = time.monotonic() + time_limit
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
        kind = _kind(base)
        found = [] if kind is None else [base_rel + ("/" if kind == "dir" else "")]
        return _glob_output(pattern, found, stopped=False)
    found = []
    stopped = False
    for entry in walk(root, base, base_rel, max_depth=compiled.depth):
        if ctx.cancel.cancelled:
            return _CANCELLED
        if time.monotonic() >= deadline:
            return _glob_output(pattern, sorted(found), stopped=True, timed_out=time_limit)
        if compiled.matches(entry.rel):
            found.append(printed_name(entry.rel) + ("/" if entry.is_dir else ""))
            if len(found) >= _GLOB_COLLECT_LIMIT:
                stopped = True
                break
    return _glob_output(pattern, sorted(found), stopped=stopped)


def _kind(path: Path) -> str | None:
    """``"dir"``, ``"file"`` (anything else that exists) or ``None`` (missing, unreachable)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def _glob_output(
    pattern: str, found: list[str], *, stopped: bool, timed_out: float | None = None
) -> ToolOutput:
    lines = found[:GLOB_LIMIT]
    if len(found) > GLOB_LIMIT:
        more = f"{len(found) - GLOB_LIMIT}{'+' if stopped else ''}"
        lines.append(f"[{more} more matches not shown; use a narrower pattern]")
    if timed_out is not None:
        lines.append(
            f"[glob stopped after {timed_out:g} s before it had looked at every folder; the "
            "matches above are what it found; use a pattern with a longer literal prefix]"
        )
        return ToolOutput("\n".join(lines), is_error=True)
    if not found:
        return ToolOutput(f"no files match {pattern!r}")
    return ToolOutput("\n".join(lines))


def make_grep(time_limit: float = GREP_TIME_LIMIT) -> FunctionTool[..., ToolOutput]:
    """A ``grep`` tool whose calls stop after ``time_limit`` seconds (:data:`grep` uses
    :data:`GREP_TIME_LIMIT`)."""

    @tool(name="grep", read_only=True)
    def grep(
        pattern: Annotated[
            str,
            Meta(
                min_length=1,
                max_length=PATTERN_MAX_CHARS,
                description="A Python regular expression.",
            ),
        ],
        path: Annotated[
            str, Meta(description="A file or folder to search, relative to the workspace.")
        ] = ".",
        glob: Annotated[
            Annotated[str, Meta(max_length=PATTERN_MAX_CHARS)] | None,
            Meta(description="Only files matching this glob: *.py (names) or src/**/*.py (paths)."),
        ] = None,
        ignore_case: Annotated[bool, Meta(description="Match letters case-insensitively.")] = False,
        *,
        ctx: ToolContext,
    ) -> ToolOutput:
        """Search the text files of the workspace for a regular expression (Python syntax),
        line by line; prints path:line:text for each matching line. Binary files are skipped.
        Narrow the search with path (a file or folder) and glob (e.g. *.py)."""
        return _grep(pattern, path, glob, ignore_case, ctx=ctx, time_limit=time_limit)

    return grep


def _grep(
    pattern: str,
    path: str,
    glob: str | None,
    ignore_case: bool,
    *,
    ctx: ToolContext,
    time_limit: float,
) -> ToolOutput:
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
    kind = _kind(target)
    if kind is None:
        return ToolOutput(f"{path}: no such file or folder", is_error=True)
    rel = relative_display(root, target)
    files: Iterator[Entry]
    if kind == "dir":
        files = (e for e in walk(root, target, rel, skip_dirs=_VCS_DIRS) if not e.is_dir)
    else:
        files = iter([Entry(rel, target, is_dir=False)])
    if file_filter is not None:
        files = (e for e in files if _selected(file_filter, e.rel))
    result = run_search(
        pattern,
        ignore_case=ignore_case,
        files=files,
        limits=_LIMITS,
        time_limit=time_limit,
        cancel=ctx.cancel,
    )
    return _grep_output(pattern, result, time_limit)


glob = make_glob()
"""The ``glob`` tool (module docstring)."""
grep = make_grep()
"""The ``grep`` tool (module docstring)."""


def _selected(file_filter: GlobPattern, rel: str) -> bool:
    if "/" in file_filter.text.strip("/"):
        return file_filter.matches(rel)
    return file_filter.matches(rel.rsplit("/", 1)[-1])


def _grep_output(pattern: str, result: SearchResult, time_limit: float) -> ToolOutput:
    if result.bad_pattern is not None:
        return ToolOutput(f"invalid regex {pattern!r}: {result.bad_pattern}", is_error=True)
    if result.stopped == "cancelled":
        return _CANCELLED
    notes = []
    if result.full:
        notes.append(
            f"[output stopped after {len(result.lines)} matching lines; narrow the pattern, "
            "path or glob to see the rest]"
        )
    if result.skipped_large:
        notes.append(
            f"[{result.skipped_large} files over {GREP_MAX_FILE_BYTES // (1024 * 1024)} MiB "
            "were not searched]"
        )
    notes.extend(f"[not searched: {u}]" for u in result.unreadable)
    if result.stopped == "timed out":
        notes.append(
            f"[grep stopped after {time_limit:g} s before it had searched every file: the "
            "regex may backtrack catastrophically (nested quantifiers such as (a+)+ or "
            "(a|aa)+), or there is too much to search; simplify the pattern or narrow the path "
            "or glob. The matches above are what it found.]"
        )
    elif result.stopped == "failed":
        notes.append(f"[grep failed: {result.failure}. The matches above are what it found.]")
    body = result.lines or ["no matches"]
    return ToolOutput("\n".join(body + notes), is_error=result.stopped is not None)
