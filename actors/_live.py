"""The live events a session publishes besides the model's stream deltas (not persisted)."""

from __future__ import annotations

import msgspec

__all__ = [
    "BackgroundTaskFinished",
    "CheckpointRestore",
    "CompactionProgress",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFailed",
    "TurnFinished",
]


class ToolCallStarted(msgspec.Struct, frozen=True):
    """The session started running tool call ``id`` of tool ``name``."""

    id: str
    name: str


class ToolCallFinished(msgspec.Struct, frozen=True):
    """Tool call ``id`` finished; ``is_error`` as in its result."""

    id: str
    name: str
    is_error: bool


class TurnFinished(msgspec.Struct, frozen=True):
    """A ``send`` completed with ``stop_reason``."""

    stop_reason: str | None


class TurnFailed(msgspec.Struct, frozen=True):
    """A ``send`` stopped early (error or cancellation); the log records a turn-aborted event."""

    reason: str


class CheckpointRestore(msgspec.Struct, frozen=True, kw_only=True):
    """Live progress of a restore (event name ``checkpoint_restore``): ``phase`` is ``start``,
    ``progress``, ``done`` or ``error``, with ``completed`` of ``total`` files."""

    phase: str
    completed: int = 0
    total: int = 0
    detail: str = ""


class CompactionProgress(msgspec.Struct, frozen=True, kw_only=True):
    """Live progress of a compaction (event name ``compaction``): ``phase`` is ``start``,
    ``progress``, ``done``, ``error`` or ``cancelled``; ``stage`` is ``measure``, ``archive``,
    ``normalize``, ``summarize``, ``project`` or ``persist``; ``completed`` of ``total`` where
    countable."""

    phase: str
    stage: str = ""
    completed: int = 0
    total: int = 0
    detail: str = ""


class BackgroundTaskFinished(msgspec.Struct, frozen=True):
    """Background task ``task_id`` finished; the next turn sees its result."""

    task_id: str
    is_error: bool
