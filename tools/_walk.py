"""Glob patterns and a symlink-safe walk of the workspace, shared by ``glob`` and ``grep``.

**Patterns** are matched against ``/``-separated paths relative to the workspace, whole and
case-sensitively:

- ``*`` matches any characters except ``/``; ``?`` one character except ``/``;
- ``[abc]``, ``[a-z]``, ``[!abc]`` one character in (or not in) the set, never ``/``;
- a component that is exactly ``**`` matches zero or more folders: ``**/*.py`` is every ``.py``
  file at any depth, ``src/**`` everything below ``src``;
- everything else is literal. Names starting with ``.`` are matched like any other.

A pattern must be relative and must not contain a ``..`` component
(:class:`~liteagent.eventlog.errors.InvalidArgumentError`, a ``ValueError``, otherwise, as for a set
with a reversed range such as ``[z-a]``); ``.`` components and repeated ``/`` are
dropped.

Matching takes polynomial time whatever the pattern: a path is matched component by component
(a set of pattern positions advances over the path's components, so ``**`` never backtracks),
and a component by a regex in which every ``*`` but the last is an atomic lazy group (as
``fnmatch`` does), so ``*a*a*a*a*a*a*a*a*a*a*b`` against a long name costs ``O(len(name) *
len(pattern))`` instead of the exponential backtracking of a naive translation.

**The walk** lists a folder's entries depth-first, names sorted. It never descends into a
symlinked folder (no loops, no duplicates), and it leaves out every symlink whose target is
outside the workspace; a symlink inside is reported once, as what it points to. Folders that
cannot be listed are skipped silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

from ._paths import is_inside

__all__ = ["Entry", "GlobPattern", "compile_glob", "walk"]

_WILDCARDS = frozenset("*?[")
_DEEP = "**"  # a step that matches zero or more components
_ANY = "*/"  # a step that matches exactly one component, whatever it is
_Step = re.Pattern[str] | str


@dataclass(frozen=True)
class GlobPattern:
    """A compiled glob pattern.

    ``prefix`` holds its leading literal components (where a walk can start); ``depth`` is how
    many components follow them, or ``None`` when a ``**`` allows any depth.
    """

    text: str
    steps: tuple[_Step, ...]
    prefix: tuple[str, ...]
    depth: int | None

    def matches(self, rel: str) -> bool:
        """Whether the workspace-relative path ``rel`` matches the whole pattern."""
        steps = self.steps
        end = len(steps)
        states = self._closure({0})
        for component in rel.split("/"):
            advanced = set()
            for i in states:
                if i == end:
                    continue
                step = steps[i]
                if step is _DEEP:
                    advanced.add(i)
                elif step is _ANY or (
                    isinstance(step, re.Pattern) and step.fullmatch(component) is not None
                ):
                    advanced.add(i + 1)
            if not advanced:
                return False
            states = self._closure(advanced)
        return end in states

    def _closure(self, states: set[int]) -> set[int]:
        """``states`` plus the positions a ``**`` matching zero components reaches."""
        out = set(states)
        for i in states:
            if i < len(self.steps) and self.steps[i] is _DEEP:
                out.add(i + 1)  # consecutive ** were merged: one step is enough
        return out


def compile_glob(pattern: str) -> GlobPattern:
    """Compile ``pattern`` (module docstring); raise ``InvalidArgumentError`` (a
    ``ValueError``) naming what is wrong."""
    if pattern.startswith("/"):
        raise InvalidArgumentError(
            f"pattern {shown(pattern)} is absolute; give it relative to the workspace"
        )
    if "\x00" in pattern:
        raise InvalidArgumentError(f"pattern {shown(pattern)} contains a NUL byte")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if not parts:
        raise InvalidArgumentError(f"pattern {shown(pattern)} is empty")
    if ".." in parts:
        raise InvalidArgumentError(
            f"pattern {shown(pattern)} contains '..'; patterns stay inside the workspace"
        )
    prefix: list[str] = []
    for part in parts:
        if _WILDCARDS.intersection(part):
            break
        prefix.append(part)
    rest = parts[len(prefix) :]
    steps: list[_Step] = []
    for part in parts:
        if part != "**":
            steps.append(_component(part, pattern))
        elif not steps or steps[-1] is not _DEEP:
            steps.append(_DEEP)
    if steps[-1] is _DEEP:  # a last ** matches one or more components
        steps[-1:] = [_ANY, _DEEP]
    return GlobPattern(
        text=pattern,
        steps=tuple(steps),
        prefix=tuple(prefix),
        depth=None if "**" in rest else len(rest),
    )


def _component(part: str, pattern: str) -> re.Pattern[str]:
    """The regex of one path component: its star-free chunks, the inner ones in atomic lazy
    groups (no backtracking into them), anchored at both ends."""
    chunks = [_translate(chunk, pattern) for chunk in part.split("*")]
    if len(chunks) == 1:
        regex = chunks[0]
    else:
        inner = "".join(f"(?>.*?{chunk})" for chunk in chunks[1:-1] if chunk)
        regex = chunks[0] + inner + ".*" + chunks[-1]
    try:
        return re.compile(regex + r"\Z", re.DOTALL)
    except re.error as e:  # not expected: every set is built from escaped characters
        raise InvalidArgumentError(f"pattern {shown(pattern)}: {e}") from e


def _translate(chunk: str, pattern: str) -> str:
    """The regex of a star-free piece of a component: ``?``, sets and literals."""
    out: list[str] = []
    i, n = 0, len(chunk)
    while i < n:
        c = chunk[i]
        i += 1
        if c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and chunk[j] == "!":
                j += 1
            if j < n and chunk[j] == "]":
                j += 1
            while j < n and chunk[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))  # no closing bracket: a literal "["
                continue
            out.append(_char_set(chunk[i:j], pattern))
            i = j + 1
        else:
            out.append(re.escape(c))
    return "".join(out)


def _char_set(body: str, pattern: str) -> str:
    """The regex class of a set's ``body`` (between the brackets), every character escaped."""
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    items: list[str] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            low, high = body[i], body[i + 2]
            if low > high:
                raise InvalidArgumentError(
                    f"pattern {pattern!r}: the range {low}-{high} is reversed"
                )
            items.append(f"{re.escape(low)}-{re.escape(high)}")
            i += 3
        else:
            items.append(re.escape(body[i]))
            i += 1
    return f"[{'^' if negate else ''}{''.join(items)}]"


@dataclass(frozen=True)
class Entry:
    """One walked entry: its workspace-relative path, its real path, whether it is a folder."""

    rel: str
    path: Path
    is_dir: bool


def walk(
    root: Path,
    start: Path,
    start_rel: str,
    *,
    max_depth: int | None = None,
    skip_dirs: frozenset[str] = frozenset(),
) -> Iterator[Entry]:
    """The entries below the folder ``start`` (a real path inside the workspace ``root``, shown
    as ``start_rel``), depth-first with names sorted.

    Entries directly in ``start`` have depth 1; nothing deeper than ``max_depth`` is listed.
    Folders named in ``skip_dirs`` are reported but not entered.
    """
    with_slash = f"{start_rel}/" if start_rel not in ("", ".") else ""
    # One frame per open folder: its remaining entries, its prefix, its depth.
    stack: list[tuple[Iterator[os.DirEntry[str]], str, int]] = []
    if max_depth is None or max_depth >= 1:
        stack.append((_listing(start), with_slash, 1))
    while stack:
        entries, rel_prefix, depth = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        rel = rel_prefix + entry.name
        try:
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if is_inside(root, real):
                    yield Entry(rel, Path(real), os.path.isdir(real))
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
        except (OSError, ValueError):
            continue
        yield Entry(rel, Path(entry.path), is_dir)
        if is_dir and entry.name not in skip_dirs and (max_depth is None or depth < max_depth):
            stack.append((_listing(Path(entry.path)), rel + "/", depth + 1))


def _listing(folder: Path) -> Iterator[os.DirEntry[str]]:
    """The entries of ``folder``, sorted by name (none when it cannot be listed)."""
    try:
        with os.scandir(folder) as it:
            return iter(sorted(it, key=lambda e: e.name))
    except OSError:
        return iter(())
