"""liteagent.tools — what the agent does to its workspace: the Tool contract, the built-in file,
shell and search tools, the ``@tool`` decorator, and path safety.

- The contract: :class:`Tool` (``name``, ``description``, ``input_schema``, ``spec``,
  ``changed_paths(input, ctx)``, ``run(input, ctx) -> ToolOutput``), :class:`ToolContext`,
  :class:`ToolOutput`, :class:`ToolSpec`, ``BackgroundStarter``. A tool never raises at the
  model: failures are ``ToolOutput(is_error=True)`` with a readable message.
- Built-in tools, ready :class:`Tool` instances (stateless: the workspace comes from
  ``ctx.workdir``, so one instance serves every session): :data:`read_file`,
  :data:`write_file`, :data:`edit_file`, :data:`bash`, :data:`glob`, :data:`grep`;
  :func:`default_tools` lists them. ``write_file`` and ``edit_file`` declare their path in
  ``changed_paths`` so the runtime snapshots it; ``bash`` declares nothing (shell commands are
  not undone by a restore). No model input makes a built-in tool raise or hang the host:
  ``grep`` matches Python's ``re`` in a child process that is killed at its 30 s time limit or
  on cancel, ``glob`` matches in polynomial time, both stop at their time limit, and every
  output is text the log can store.
- What the model's commands see of the host's environment: :class:`ToolEnv`, built with
  :func:`tool_env` — by default the host's environment less every credential-like variable
  (provider keys, ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``, cloud credentials,
  URLs with a password...), or an explicit allow list, or a replacement environment.
  :func:`bash_tool` makes a ``bash`` tool with a policy; ``default_tools(env=...)`` uses it.
- :func:`tool` turns a typed function into a :class:`Tool` (:class:`FunctionTool`).
- :data:`context` (alias :data:`read_spilled`) reads an archived tool result in bounded,
  labelled slices through ``ctx.archive`` (an :class:`ArchiveReader` that knows only the
  current session's references; :class:`UnknownReferenceError` for any other). Not in
  :func:`default_tools`: the SDK adds it where the session has an archive.
- :func:`resolve_in_workspace` — every path a built-in tool touches goes through it: relative to
  the workspace, symlinks resolved, anything outside refused.

Errors (all under ``liteagent.eventlog.errors.LiteAgentError``)::

    ToolError
    ├── InvalidPathError            (also ValueError)
    │   └── PathOutsideWorkspaceError
    ├── ToolDefinitionError         (also TypeError)
    └── UnknownReferenceError       (also LookupError)
"""

from __future__ import annotations

from ._bash import bash, bash_tool
from ._context_tool import context, read_spilled
from ._contract import Tool, ToolContext, ToolOutput, ToolSpec
from ._decorator import FunctionTool, tool
from ._edit import edit_file
from ._env import ToolEnv, tool_env
from ._errors import (
    InvalidPathError,
    PathOutsideWorkspaceError,
    ToolDefinitionError,
    ToolError,
    UnknownReferenceError,
)
from ._files import delete_file, read_file, write_file
from ._paths import resolve_in_workspace
from ._search import glob, grep

__all__ = [
    "FunctionTool",
    "InvalidPathError",
    "PathOutsideWorkspaceError",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolEnv",
    "ToolError",
    "ToolOutput",
    "ToolSpec",
    "UnknownReferenceError",
    "bash",
    "bash_tool",
    "context",
    "default_tools",
    "delete_file",
    "edit_file",
    "glob",
    "grep",
    "read_file",
    "read_spilled",
    "resolve_in_workspace",
    "tool",
    "tool_env",
    "write_file",
]


def default_tools(env: ToolEnv | None = None) -> list[Tool]:
    """The built-in tools, in a stable order: read_file, write_file, edit_file, delete_file,
    bash, glob, grep. A new list each call (the tools themselves are shared, stateless
    instances). With ``env`` the ``bash`` tool is ``bash_tool(env)``: its commands get the
    environment that policy builds (``None``: the default policy, :data:`bash`). Raises
    :class:`~liteagent.eventlog.errors.InvalidArgumentError` when ``env`` is not a
    :class:`ToolEnv`."""
    shell = bash if env is None else bash_tool(env)
    return [read_file, write_file, edit_file, delete_file, shell, glob, grep]
