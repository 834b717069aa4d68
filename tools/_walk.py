"""Glob patterns and a symlink-safe walk of the workspace, shared by ``glob`` and ``grep``.

**Patterns** are matched against ``/``-separated paths relative to the workspace, whole and
case-sensitively:

- ``*`` matches any characters except ``/``; ``?`` one character except ``/``;
- ``[abc]``, ``[a-z]``, ``[!abc]`` one character in (or not in) the set, never ``/``;
- a component that is exactly ``**`` matches zero or more folders: ``**/*.py`` is every ``.py``
  file at any depth, ``src/**`` everything below ``src``;
- everything else is literal. Names starting with ``.`` are matched like any other.

A pattern must be relative and must not contain a ``..`` component (``ValueError`` otherwise);
``.`` components and repeated ``/`` are dropped.

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

from ._paths import is_inside

__all__ = ["Entry", "GlobPattern", "compile_glob", "walk"]

_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class GlobPattern:
    """A compiled glob pattern.

    ``prefix`` holds its leading literal components (where a walk can start); ``depth`` is how
    many components follow them, or ``None`` when a ``**`` allows any depth.
    """

    text: str
    regex: re.Pattern[str]
    prefix: tuple[str, ...]
    depth: int | None

    def matches(self, rel: str) -> bool:
        """Whether the workspace-relative path ``rel`` matches the whole pattern."""
        return self.regex.fullmatch(rel) is not None


def compile_glob(pattern: str) -> GlobPattern:
    """Compile ``pattern`` (module docstring); raise ``ValueError`` naming what is wrong."""
    if pattern.startswith("/"):
        raise ValueError(f"pattern {pattern!r} is absolute; give it relative to the workspace")
    if "\x00" in pattern:
        raise ValueError(f"pattern {pattern!r} contains a NUL byte")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if not parts:
        raise ValueError(f"pattern {pattern!r} is empty")
    if ".." in parts:
        raise ValueError(f"pattern {pattern!r} contains '..'; patterns stay inside the workspace")
    prefix: list[str] = []
    for part in parts:
        if _WILDCARDS.intersection(part):
            break
        prefix.append(part)
    rest = parts[len(prefix) :]
    regex = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".+" if last else "(?:[^/]+/)*"
        else:
            regex += _translate(part) + ("" if last else "/")
    return GlobPattern(
        text=pattern,
        regex=re.compile(regex, re.DOTALL),
        prefix=tuple(prefix),
        depth=None if "**" in rest else len(rest),
    )


def _translate(part: str) -> str:
    """The regex of one path component."""
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        i += 1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i
            if j < n and part[j] == "!":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            while j < n and part[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))  # no closing bracket: a literal "["
                continue
            # Escape what re would read as a nested set or a set operation.
            body = re.sub(r"([\\\[&~|])", r"\\\1", part[i:j])
            i = j + 1
            if body.startswith("!"):
                out.append(f"[^/{body[1:]}]")
            elif body.startswith("^"):
                out.append(f"[\\{body}]")
            else:
                out.append(f"[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


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
    yield from _walk(root, start, with_slash, 1, max_depth=max_depth, skip_dirs=skip_dirs)


def _walk(
    root: Path,
    folder: Path,
    rel_prefix: str,
    depth: int,
    *,
    max_depth: int | None,
    skip_dirs: frozenset[str],
) -> Iterator[Entry]:
    if max_depth is not None and depth > max_depth:
        return
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        rel = rel_prefix + entry.name
        try:
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if is_inside(root, real):
                    yield Entry(rel, Path(real), os.path.isdir(real))
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        yield Entry(rel, Path(entry.path), is_dir)
        if is_dir and entry.name not in skip_dirs:
            yield from _walk(
                root,
                Path(entry.path),
                rel + "/",
                depth + 1,
                max_depth=max_depth,
                skip_dirs=skip_dirs,
            )
