"""The fold: ``fold(events) -> SessionState`` and ``apply(state, event) -> SessionState``.

Both are pure: ``apply`` returns a new state and never changes the one it was given, and
``fold(events) == apply(...apply(SessionState(), e1)..., en)``. A live session keeps its state and
applies each event it appends, so a turn costs O(new events), not O(history): the sequences in a
state are persistent vectors (:class:`PVec`) whose append is O(1).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ._errors import InvalidArgumentError
from ._events import (
    AssistantMessage,
    BackgroundCompleted,
    Compaction,
    ContextStatus,
    FileSnapshot,
    ModelRequest,
    OpaqueEvent,
    SessionStarted,
    StoredEvent,
    ToolResult,
    TurnAborted,
    Usage,
    UserPrompt,
)
from ._messages import Message, ToolResultBlock, ToolUseBlock, message_text
from ._pvec import PVec

__all__ = [
    "CheckpointMark",
    "ConversationEntry",
    "SessionState",
    "apply",
    "conversation",
    "fold",
]


class ConversationEntry(msgspec.Struct, frozen=True, gc=False):
    """One contribution to the conversation: the message an event adds, and that event's seq."""

    seq: int
    message: Message


class CheckpointMark(msgspec.Struct, frozen=True, gc=False):
    """A user-origin prompt: a point the session can be restored to (the state before ``seq``)."""

    seq: int
    ts: float
    prompt: str


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything computed from a session's log up to ``head``.

    ``entries`` are the conversation contributions in log order (see :func:`conversation` for
    the merged messages); ``open_tool_calls`` are tool_use ids still waiting for their result.
    """

    head: int = 0
    last_ts: float = 0.0
    started: SessionStarted | None = None
    entries: PVec[ConversationEntry] = msgspec.field(default_factory=PVec)
    checkpoints: PVec[CheckpointMark] = msgspec.field(default_factory=PVec)
    snapshots: PVec[tuple[int, FileSnapshot]] = msgspec.field(default_factory=PVec)
    compactions: PVec[tuple[int, Compaction]] = msgspec.field(default_factory=PVec)
    open_tool_calls: tuple[str, ...] = ()
    usage: Usage = Usage()
    context_status: ContextStatus | None = None
    model_requests: PVec[tuple[int, ModelRequest]] = msgspec.field(default_factory=PVec)
    background_completed: int = 0
    turns_aborted: int = 0
    unknown_kinds: frozenset[str] = frozenset()


_replace = msgspec.structs.replace


def apply(state: SessionState, event: StoredEvent) -> SessionState:
    """Return the state after ``event``; ``state`` is unchanged.

    Raises :class:`InvalidArgumentError` when ``event.seq`` is not ``state.head + 1``.
    """
    seq = event.seq
    if seq != state.head + 1:
        raise InvalidArgumentError(
            f"event seq {seq} does not follow the state's head {state.head}"
        )
    body = event.body
    t = type(body)
    if t is UserPrompt:
        assert isinstance(body, UserPrompt)
        entry = ConversationEntry(seq, Message("user", body.content))
        answered = {b.tool_use_id for b in body.content if type(b) is ToolResultBlock}
        checkpoints = state.checkpoints
        if body.origin == "user":
            checkpoints = checkpoints.appended(
                CheckpointMark(seq, event.ts, message_text(body.content))
            )
        return _replace(
            state,
            head=seq,
            last_ts=event.ts,
            entries=state.entries.appended(entry),
            checkpoints=checkpoints,
            open_tool_calls=tuple(c for c in state.open_tool_calls if c not in answered)
            if answered
            else state.open_tool_calls,
        )
    if t is AssistantMessage:
        assert isinstance(body, AssistantMessage)
        calls = tuple(b.id for b in body.content if type(b) is ToolUseBlock)
        return _replace(
            state,
            head=seq,
            last_ts=event.ts,
            entries=state.entries.appended(
                ConversationEntry(seq, Message("assistant", body.content))
            ),
            usage=state.usage + body.usage,
            open_tool_calls=state.open_tool_calls + calls if calls else state.open_tool_calls,
        )
    if t is ToolResult:
        assert isinstance(body, ToolResult)
        result_id = body.block.tool_use_id
        return _replace(
            state,
            head=seq,
            last_ts=event.ts,
            entries=state.entries.appended(ConversationEntry(seq, Message("user", (body.block,)))),
            open_tool_calls=tuple(c for c in state.open_tool_calls if c != result_id),
        )
    if t is FileSnapshot:
        assert isinstance(body, FileSnapshot)
        return _replace(
            state, head=seq, last_ts=event.ts, snapshots=state.snapshots.appended((seq, body))
        )
    if t is Compaction:
        assert isinstance(body, Compaction)
        return _replace(
            state, head=seq, last_ts=event.ts, compactions=state.compactions.appended((seq, body))
        )
    if t is ModelRequest:
        assert isinstance(body, ModelRequest)
        return _replace(
            state,
            head=seq,
            last_ts=event.ts,
            model_requests=state.model_requests.appended((seq, body)),
        )
    if t is ContextStatus:
        assert isinstance(body, ContextStatus)
        return _replace(state, head=seq, last_ts=event.ts, context_status=body)
    if t is SessionStarted:
        assert isinstance(body, SessionStarted)
        return _replace(state, head=seq, last_ts=event.ts, started=body)
    if t is BackgroundCompleted:
        return _replace(
            state, head=seq, last_ts=event.ts, background_completed=state.background_completed + 1
        )
    if t is TurnAborted:
        return _replace(
            state,
            head=seq,
            last_ts=event.ts,
            turns_aborted=state.turns_aborted + 1,
        )
    if t is OpaqueEvent:
        kinds = state.unknown_kinds
        if event.kind not in kinds:
            kinds = kinds | {event.kind}
        return _replace(state, head=seq, last_ts=event.ts, unknown_kinds=kinds)
    raise InvalidArgumentError(f"not an event body: {t.__name__}")


def fold(events: Iterable[StoredEvent], state: SessionState | None = None) -> SessionState:
    """Apply ``events`` in order to ``state`` (an empty state by default) and return the result."""
    s = SessionState() if state is None else state
    for event in events:
        s = apply(s, event)
    return s


def conversation(state: SessionState) -> list[Message]:
    """Return the conversation as messages, merging consecutive entries of the same role.

    Within a merged user message the blocks keep log order (tool results then, e.g., a reminder).
    """
    out: list[Message] = []
    for entry in state.entries:
        m = entry.message
        if out and out[-1].role == m.role:
            last = out[-1]
            out[-1] = Message(m.role, last.content + m.content)
        else:
            out.append(m)
    return out
