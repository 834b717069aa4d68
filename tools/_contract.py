"""The Tool contract: what the agent runtime needs to know about a tool and how it runs one.

A tool has a name, a description and a JSON Schema for its input. ``run(input, ctx)`` returns a
:class:`ToolOutput`; a tool never raises for bad input or a refused path — it returns an output
with ``is_error=True`` that the model can read (the runtime also turns an unexpected exception
into such an output). A tool that changes files lists, before it runs, the workspace paths it
may change (:meth:`Tool.changed_paths`), so the runtime can snapshot them first and restore
them later. Shell commands and custom tools that do not declare their paths are not undone.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from liteagent.eventlog import CancelToken

__all__ = ["ArchiveReader", "BackgroundStarter", "Tool", "ToolContext", "ToolOutput", "ToolSpec"]

BackgroundStarter = Callable[[str, Callable[[CancelToken], "ToolOutput"]], str]
"""``start(description, work) -> task_id``: run ``work`` in the background; when it finishes,
the runtime records a background-completed event the model sees on its next turn."""


class ArchiveReader(Protocol):
    """Reads back the archived texts of one session (what the ``context`` tool reads from)."""

    def read_archived(self, ref: str) -> str:
        """The full text archived under ``ref``, which must be recorded in the current
        session's log. Raises :class:`~liteagent.tools.UnknownReferenceError` when ``ref`` is
        not recorded in this session (another session's, made up) or is malformed; may raise
        :class:`~liteagent.eventlog.errors.BlobNotFoundError`,
        :class:`~liteagent.eventlog.errors.CorruptBlobError`,
        :class:`~liteagent.eventlog.errors.CodecError`
        or :class:`~liteagent.eventlog.errors.StorageIOError` when the stored blob is missing,
        damaged or unreadable."""
        ...


class ToolOutput(msgspec.Struct, frozen=True):
    """What a tool call returns to the model: text, and whether it is an error."""

    content: str
    is_error: bool = False


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it: name, description, JSON Schema of the input."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may use: the workspace, its session, the call's id, a cancel token,
    and (when the runtime supports them) a way to start background work and the session's
    archive reader."""

    workdir: Path
    session_id: str
    tool_call_id: str
    cancel: CancelToken = field(default_factory=CancelToken)
    start_background: BackgroundStarter | None = None
    archive: ArchiveReader | None = None


class Tool(abc.ABC):
    """A capability the model can call."""

    #: The name the model calls the tool by ([a-zA-Z0-9_-]{1,64}).
    name: str = ""
    #: What the tool does, for the model.
    description: str = ""
    #: Whether the tool changes nothing (reads files, searches): a call of a tool that is not
    #: read-only and declares no paths is a side effect a restore cannot undo, listed in a
    #: restore's preview.
    read_only: bool = False

    @property
    @abc.abstractmethod
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's input (an object)."""

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def changed_paths(self, input: Mapping[str, Any], ctx: ToolContext) -> list[Path]:  # noqa: ARG002
        """The files (resolved, inside the workspace) this call may create, change or delete;
        the runtime snapshots them before :meth:`run`. Read-only tools return ``[]``. Raising
        or returning a path outside the workspace makes the call an error without running."""
        return []

    @abc.abstractmethod
    def run(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the call and return its output; bad input gives an ``is_error`` output."""
