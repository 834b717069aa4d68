"""The errors of the tools layer, and the one place an ``OSError`` becomes a message for the model.

::

    LiteAgentError
    └── ToolError
        ├── InvalidPathError            (also ValueError)  a path that is not a usable name
        │   └── PathOutsideWorkspaceError                  a path that leaves the workspace
        ├── ToolDefinitionError         (also TypeError)   ``@tool`` cannot use a function
        └── UnknownReferenceError       (also LookupError) an archive reference not of this session

A tool never raises these at the model: ``run`` turns every failure into a
``ToolOutput(is_error=True)`` whose text says what was wrong. They are raised by the helpers a
tool (or the runtime) calls — :func:`~liteagent.tools.resolve_in_workspace`,
``Tool.changed_paths`` and the ``@tool`` decorator at definition time.
"""

from __future__ import annotations

import errno

from liteagent.eventlog.errors import LiteAgentError

__all__ = [
    "InvalidPathError",
    "PathOutsideWorkspaceError",
    "ToolDefinitionError",
    "ToolError",
    "UnknownReferenceError",
    "os_error_message",
]


class ToolError(LiteAgentError):
    """Raised for failures of the tools layer; the root of the tool errors."""


class InvalidPathError(ToolError, ValueError):
    """Raised when a path given to a tool cannot name a file at all (it contains a NUL byte, or
    a character the file system encoding cannot carry, such as a lone surrogate).

    ``path`` is the path as it was given.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


class PathOutsideWorkspaceError(InvalidPathError):
    """Raised when a path resolves outside the workspace: an absolute path elsewhere, a ``..``
    escape, or a symlink (to a file or a folder) whose target lies outside.

    ``path`` is the path as given, ``resolved`` where it actually leads, ``workspace`` the
    workspace's real path.
    """

    def __init__(self, path: str, resolved: str, workspace: str) -> None:
        self.resolved = resolved
        self.workspace = workspace
        shown = f"{path!r}" if path == resolved else f"{path!r} (resolves to {resolved!r})"
        super().__init__(path, f"path {shown} is outside the workspace {workspace!r}")


class ToolDefinitionError(ToolError, TypeError):
    """Raised when ``@tool`` cannot turn a function into a tool (a bad name, no description, a
    parameter without an annotation, a type msgspec cannot describe, ``*args``...)."""


class UnknownReferenceError(ToolError, LookupError):
    """Raised by an :class:`~liteagent.tools.ArchiveReader` when a reference is not recorded in
    the current session's log, or is not a reference at all.

    ``ref`` is the reference as it was given. The message says only that: whether the content
    exists elsewhere (another session, the blob store) is not revealed.
    """

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"reference {ref!r} is not recorded in this session")


_REASONS = {
    errno.ENOENT: "no such file or folder",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "too many levels of symbolic links",
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "file name too long",
}


def os_error_message(error: OSError, shown_path: str) -> str:
    """The sentence a tool returns to the model for ``error`` on ``shown_path`` (the path as the
    model gave it): ``"<path>: <reason>"``, with a plain reason for the common errnos."""
    reason = _REASONS.get(error.errno or 0) or error.strerror or str(error)
    return f"{shown_path}: {reason}"
