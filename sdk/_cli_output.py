"""How the CLI shows things: JSON for machines, compact lines and progress bars for people, and
a renderer of an agent's live events (streamed text, tool calls, progress)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

import msgspec

from liteagent.actors import (
    Checkpoint,
    CheckpointRestore,
    CompactionProgress,
    LiveEvent,
    Missed,
    RestoreRefusedError,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
)
from liteagent.eventlog import SessionInfo
from liteagent.providers import TextDelta, ToolInputDelta, ToolUseStart

__all__ = [
    "LiveRenderer",
    "bar",
    "checkpoint_lines",
    "emit_json",
    "one_line",
    "session_lines",
    "to_json",
    "when",
]

_SUMMARY = 60
_ARG_KEYS = ("path", "command", "pattern", "file_path")


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data (structs become objects)."""
    return msgspec.to_builtins(value)


def emit_json(value: Any, out: TextIO | None = None) -> None:
    """Print ``value`` as indented JSON."""
    print(json.dumps(to_json(value), indent=2, ensure_ascii=False), file=out or sys.stdout)


def one_line(error: BaseException) -> str:
    """A one-line reason for ``error`` (a refused restore names each file and why)."""
    if isinstance(error, RestoreRefusedError):
        parts = [f"{path or 'session'}: {reason}" for path, reason in error.problems]
        return "restore refused, nothing was changed: " + "; ".join(parts)
    return " ".join(str(error).split()) or type(error).__name__


def when(ts: float) -> str:
    """A local timestamp, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def short(text: str, limit: int = _SUMMARY) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def bar(completed: int, total: int, width: int = 20) -> str:
    """A text progress bar: ``[########------------]``."""
    filled = width if total <= 0 else min(width, round(width * completed / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def session_lines(sessions: list[SessionInfo]) -> list[str]:
    """One line per session: id and last activity."""
    if not sessions:
        return ["no sessions"]
    return [f"{s.id}  {when(s.mtime)}" for s in sessions]


def checkpoint_lines(checkpoints: list[Checkpoint]) -> list[str]:
    """One line per checkpoint: seq, time, prompt, and the files a restore would put back."""
    if not checkpoints:
        return ["no checkpoints"]
    lines = []
    for cp in checkpoints:
        files = ", ".join(cp.files) if cp.files else "-"
        line = f"{cp.seq:>5}  {when(cp.ts)}  {short(cp.prompt, 40):<40}  files: {files}"
        if cp.unavailable_files:
            line += f"  (cannot restore: {', '.join(cp.unavailable_files)})"
        lines.append(line)
    return lines


class LiveRenderer:
    """Prints an agent's live events as they come: the model's text streamed, one compact
    line per tool call, and a progress line per compaction or restore step."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._inputs: dict[int, tuple[str, list[str]]] = {}  # block index -> (call id, json)
        self._by_id: dict[str, str] = {}
        self._mid_line = False

    def _line(self, text: str) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False
        self.out.write(text + "\n")
        self.out.flush()

    def finish(self) -> None:
        """End a streamed line."""
        if self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False

    def feed(self, item: LiveEvent | Missed) -> None:
        """Show one live event."""
        if isinstance(item, Missed):
            self._line(f"  … {item.count} live events not shown")
            return
        event = item.event
        if isinstance(event, TextDelta):
            self.out.write(event.text)
            self.out.flush()
            self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ToolUseStart):
            self._inputs[event.index] = (event.id, [])
        elif isinstance(event, ToolInputDelta):
            if event.index in self._inputs:
                self._inputs[event.index][1].append(event.partial_json)
        elif isinstance(event, ToolCallStarted):
            self._line(f"  → {event.name}{self._args(event.id)}")
        elif isinstance(event, ToolCallFinished):
            if event.is_error:
                self._line(f"    ✗ {event.name} failed")
        elif isinstance(event, TurnFailed):
            self._line(f"  turn stopped: {short(event.reason, 100)}")
        elif isinstance(event, CompactionProgress):
            self._line(compaction_line(event))
        elif isinstance(event, CheckpointRestore):
            self._line(restore_line(event))

    def _args(self, call_id: str) -> str:
        for index, (cid, parts) in list(self._inputs.items()):
            if cid == call_id:
                del self._inputs[index]
                try:
                    args = json.loads("".join(parts) or "{}")
                except ValueError:
                    return ""
                if not isinstance(args, dict):
                    return ""
                shown = [short(str(args[k]), 50) for k in _ARG_KEYS if k in args]
                return f" {shown[0]}" if shown else ""
        return ""


def compaction_line(event: CompactionProgress) -> str:
    """One line for a compaction progress event."""
    stage = f" {event.stage}" if event.stage else ""
    detail = f"  {short(event.detail, 70)}" if event.detail else ""
    if event.phase == "progress":
        return f"  compacting {bar(event.completed, event.total)}{stage}{detail}"
    return f"  compaction {event.phase}{stage}{detail}"


def restore_line(event: CheckpointRestore) -> str:
    """One line for a restore progress event."""
    detail = f"  {short(event.detail, 70)}" if event.detail else ""
    if event.phase == "done":
        return f"  restore done: {event.completed} files put back{detail}"
    if event.phase == "progress":
        return (f"  restoring {bar(event.completed, event.total)} "
                f"{event.completed}/{event.total} files{detail}")
    return f"  restore {event.phase}{detail}"
