"""The side-effect ledger: what ran after a checkpoint that a restore cannot undo.

Every tool call whose result says it was *untracked* (``ToolResult.untracked``: it ran a tool
that declares no paths and is not read-only — ``bash``, custom tools without ``changes_param``)
is one entry, with the time of its result and its status.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from liteagent.eventlog import StoredEvent
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)

__all__ = ["SideEffect", "count_after", "side_effects", "untracked_seqs"]

_STATUS = re.compile(r"\[(exit code (-?\d+)|[^\[\]\n]*)\]\s*$")
_BACKGROUND = re.compile(r"started background task (\S+):")
_SUMMARY_CHARS = 200


class SideEffect(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call a restore cannot undo: ``tool`` (``bash``, a custom tool), its call id,
    the ``seq`` and time ``ts`` of its result, ``summary`` (the command, or the input as JSON,
    cut to 200 characters), ``status`` (``"exit code 0"``, ``"timed out after 5 s; ..."``,
    ``"started in the background: finished"``, ``"ok"``, ``"error"``), ``exit_code`` when the
    status gives one, and ``is_error`` as the model saw it."""

    tool: str
    tool_call_id: str
    seq: int
    ts: float
    summary: str
    status: str
    exit_code: int | None = None
    is_error: bool = False


def untracked_seqs(events: Iterable[StoredEvent]) -> list[int]:
    """The seqs of the untracked tool results of a log, in order."""
    return [e.seq for e in events if isinstance(e.body, ToolResult) and e.body.untracked]


def count_after(seqs: Sequence[int], seq: int) -> int:
    """How many of the sorted ``seqs`` are after ``seq``."""
    return len(seqs) - bisect.bisect_right(seqs, seq)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, tuple):
        return "\n".join(b.text for b in content if isinstance(b, TextBlock))
    return ""


def _summary(name: str, input: Any) -> str:
    if name == "bash" and isinstance(input, dict) and isinstance(input.get("command"), str):
        text = " ".join(input["command"].split())
    else:
        try:
            text = json.dumps(input, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(input)
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _status(result: ToolResult, finished: dict[str, BackgroundCompleted]) -> tuple[str, int | None]:
    text = _text(result.block.content).rstrip()
    started = _BACKGROUND.match(text)
    if started is not None:
        done = finished.get(started.group(1))
        if done is None:
            return "started in the background: no end recorded", None
        return f"started in the background: {'finished' if done.ok else 'failed'}", None
    m = _STATUS.search(text) if result.tool_name == "bash" else None
    if m is not None:
        code = m.group(2)
        return m.group(1), None if code is None else int(code)
    return ("error" if result.block.is_error is True else "ok"), None


def side_effects(events: Sequence[StoredEvent], after_seq: int) -> list[SideEffect]:
    """The ledger of the log ``events`` after ``after_seq``, in log order."""
    inputs: dict[str, Any] = {}
    finished: dict[str, BackgroundCompleted] = {}
    for e in events:
        if isinstance(e.body, AssistantMessage):
            for block in e.body.content:
                if isinstance(block, ToolUseBlock):
                    inputs[block.id] = block.input
        elif isinstance(e.body, BackgroundCompleted):
            finished[e.body.task_id] = e.body
    out = []
    for e in events:
        body = e.body
        if e.seq <= after_seq or not isinstance(body, ToolResult) or not body.untracked:
            continue
        call_id = body.block.tool_use_id
        name = body.tool_name or "?"
        status, code = _status(body, finished)
        out.append(
            SideEffect(
                tool=name,
                tool_call_id=call_id,
                seq=e.seq,
                ts=e.ts,
                summary=_summary(name, inputs.get(call_id, {})),
                status=status,
                exit_code=code,
                is_error=body.block.is_error is True,
            )
        )
    return out
