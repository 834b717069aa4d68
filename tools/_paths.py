"""Path safety: every path a tool touches is resolved inside the workspace or refused.

The workspace is ``os.path.realpath(workdir)``. A tool's path is resolved component by component
with every symlink followed (``os.path.realpath`` without ``strict``: the part that exists is
resolved through the file system, dangling symlinks included, and the part that does not exist
yet is appended as written, with ``..`` applied to what is already resolved). The result must
be the workspace or lie below it. This refuses ``../`` escapes, absolute paths elsewhere, and
symlinks — to a file or to a folder, existing or dangling — whose target is outside.

Limits, stated plainly: the check is made when the path is resolved. A process that swaps a
folder for a symlink between the check and the open (a TOCTOU race) is not defended against;
the workspace is assumed not to be edited adversarially while a tool runs. ``~`` is not expanded
(``~/x`` is a file named ``~`` below the workspace).

A file name that is not UTF-8 is printed by the tools with each such byte as ``\\udcXX``, and
a control character in a name as ``\\xNN`` (:func:`printed_name`); a path spelled that way
names that file when no file has the name as written (see :func:`resolve_in_workspace`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

from ._errors import InvalidPathError, PathOutsideWorkspaceError

__all__ = [
    "is_inside",
    "printed_name",
    "relative_display",
    "resolve_in_workspace",
    "workspace_root",
]


def workspace_root(workdir: str | os.PathLike[str]) -> Path:
    """The workspace's real path: ``os.path.realpath(workdir)`` (it need not exist). Raises
    :class:`~liteagent.eventlog.errors.InvalidArgumentError` for a ``workdir`` that is not a ``str``
    path or cannot name a folder (a NUL byte, a character the file system cannot encode)."""
    given = _text(workdir, "workdir")
    problem = _unusable(given)
    if problem is not None:
        raise InvalidArgumentError(f"workdir {shown(given)} {problem}")
    return Path(os.path.realpath(given))


def resolve_in_workspace(workdir: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Resolve ``path`` against the workspace ``workdir`` and return the real, absolute path.

    A relative ``path`` is relative to the workspace; an absolute one is allowed only if it
    resolves inside. ``""`` and ``"."`` name the workspace itself. Symlinks are followed (see
    the module docstring), so the returned path is where a read or write would really go.
    A path with ``\\udcXX`` or ``\\xNN`` escapes, as the tools print a name that is not
    UTF-8 or holds a control character, names that file (its folder, for a new file) when
    nothing has the name as written.

    Raises :class:`InvalidPathError` for a path containing a NUL byte or a character the file
    system encoding cannot carry (a lone surrogate), :class:`PathOutsideWorkspaceError` when the
    resolved path is not the workspace or below it, and
    :class:`~liteagent.eventlog.errors.InvalidArgumentError` when ``path`` or ``workdir`` is not a
    ``str`` path (bytes included) or ``workdir`` is unusable. Nothing is created or opened.
    """
    given = _text(path, "path")
    problem = _unusable(given)
    if problem is not None:
        raise InvalidPathError(given, f"path {shown(given)} {problem}")
    root = workspace_root(workdir)
    joined = os.path.join(root, given)  # an absolute `given` replaces `root`, as intended
    if "\\" in given and _PRINTED.search(given):
        joined = _as_printed(joined, os.path.join(root, _PRINTED.sub(_byte, given)))
    resolved = os.path.realpath(joined)
    if not is_inside(root, resolved):
        raise PathOutsideWorkspaceError(given, resolved, os.fspath(root))
    return Path(resolved)


# a byte that is not UTF-8 (\udc80-\udcff); a control character (\x01-\x1f, \x7f-\x9f; never
# NUL); a line or paragraph separator (\u2028, \u2029) or a bidirectional formatting character
_PRINTED = re.compile(
    r"\\(?:udc([89a-fA-F][0-9a-fA-F])|x(0[1-9a-fA-F]|1[0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])"
    r"|u(202[89a-eA-E]|200[eEfF]|206[6-9]|061[cC]))"
)
#: The bidirectional formatting characters, as a regular expression's class body: they reorder
#: the line they are on as a terminal shows it ("Trojan Source"), so a name must not hold them
#: unescaped.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# and every line break str.splitlines knows
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}]")


def _byte(m: re.Match[str]) -> str:
    surrogate, control, separator = m.groups()
    if surrogate:
        return chr(0xDC00 + int(surrogate, 16))
    return chr(int(control or separator, 16))


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printed_name(rel: str) -> str:
    """A file name as the tools print it: each control character (a newline, a tab, an
    escape, U+0085...) written as ``\\xNN``, and a line or paragraph separator or a
    bidirectional formatting character as ``\\uXXXX`` (``\\u2028``, ``\\u202e``...), so that
    one name stays on one line of a listing and reads as it is (a byte that is not UTF-8
    is written ``\\udcXX`` when the output is stored). Either spelling,
    given back to a tool, names the file (:func:`resolve_in_workspace`)."""
    return _CONTROL.sub(_escape, rel)


def _as_printed(joined: str, raw: str) -> str:
    """The file meant by a path spelled as the tools print names (:func:`printed_name`): a
    byte that is not UTF-8 appears in their output as ``\\udcXX`` (its surrogate escape,
    written out) and a control character as ``\\xNN``, so a model copying a name from
    ``glob`` or ``grep`` writes it so. When the name as written does
    not exist (nor its folder) and the name with those escapes read back as bytes does (or its
    folder does), that one (``raw``) is meant; otherwise the path is taken as written."""
    if os.path.lexists(joined):
        return joined
    if os.path.lexists(raw):
        return raw
    if os.path.lexists(os.path.dirname(raw)) and not os.path.lexists(os.path.dirname(joined)):
        return raw
    return joined


def _text(value: object, what: str) -> str:
    """``os.fspath(value)`` when that is a ``str``; :class:`InvalidArgumentError` otherwise."""
    given: object = value
    if isinstance(value, str | os.PathLike):
        try:
            given = os.fspath(value)
        except Exception:  # noqa: BLE001 -- a path-like whose __fspath__ fails: refused
            given = None
    if not isinstance(given, str):
        raise InvalidArgumentError(
            f"{what} must be a str or os.PathLike[str], got {type(given).__name__}"
        )
    return given


def _unusable(given: str) -> str | None:
    """Why ``given`` cannot name a file, or ``None``."""
    if "\x00" in given:
        return "contains a NUL byte"
    try:
        os.fsencode(given)
    except UnicodeEncodeError as e:
        return f"contains {given[e.start : e.end]!r}, which the file system cannot encode"
    return None


def is_inside(root: Path, resolved: str) -> bool:
    """Whether the real path ``resolved`` is the workspace ``root`` (a real path) or below it."""
    return resolved == os.fspath(root) or resolved.startswith(os.path.join(root, ""))


def relative_display(root: Path, path: Path) -> str:
    """``path`` relative to the workspace ``root``, with ``/`` separators (``"."`` for the root
    itself), as the tools print it (:func:`printed_name`). ``path`` must be ``root`` or below
    it."""
    return printed_name(path.relative_to(root).as_posix())
