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
    BackgroundStarted,
    BranchCreated,
    Compaction,
    ContentArchived,
    ContextStatus,
    FileSnapshot,
    Forked,
    ModelRequestRecord,
    OpaqueEvent,
    RestoreFinished,
    RestoreStarted,
    SessionStarted,
    StoredEvent,
    ToolResult,
    TranscriptImported,
    TurnAborted,
    Usage,
    UserPrompt,
)
from ._messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    merge_adjacent,
    message_text,
)
from ._pvec import PVec

__all__ = [
    "CheckpointMark",
    "ConversationEntry",
    "SessionState",
    "apply",
    "apply_all",
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
    ``turn_open`` is whether a turn has not ended: a user prompt or a tool result came after the
    model's last answer and no turn-aborted notice closed it since (a background notice between
    turns does not open one). ``background_open`` are the background tasks started and not
    yet ended, in start order (one per task id: a second start of an id replaces the first).
    ``forked_from`` is the record of the fork that made the session; ``branch`` the header of a
    branch session (see :class:`BranchCreated`).
    """

    head: int = 0
    last_ts: float = 0.0
    started: SessionStarted | None = None
    entries: PVec[ConversationEntry] = msgspec.field(default_factory=PVec)
    checkpoints: PVec[CheckpointMark] = msgspec.field(default_factory=PVec)
    snapshots: PVec[tuple[int, FileSnapshot]] = msgspec.field(default_factory=PVec)
    compactions: PVec[tuple[int, Compaction]] = msgspec.field(default_factory=PVec)
    open_tool_calls: tuple[str, ...] = ()
    turn_open: bool = False
    usage: Usage = Usage()
    last_usage: Usage | None = None
    context_status: ContextStatus | None = None
    model_requests: PVec[tuple[int, ModelRequestRecord]] = msgspec.field(default_factory=PVec)
    archived: PVec[tuple[int, ContentArchived]] = msgspec.field(default_factory=PVec)
    background_completed: int = 0
    background_open: tuple[BackgroundStarted, ...] = ()
    turns_aborted: int = 0
    unknown_kinds: frozenset[str] = frozenset()
    pending_restore: tuple[int, RestoreStarted] | None = None
    file_restores: PVec[tuple[int, RestoreStarted]] = msgspec.field(default_factory=PVec)
    forked_from: Forked | None = None
    branch: BranchCreated | None = None


def apply(state: SessionState, event: StoredEvent) -> SessionState:
    """Return the state after ``event``; ``state`` is unchanged.

    Raises :class:`InvalidArgumentError` when ``event.seq`` is not ``state.head + 1`` (or
    ``state`` is no SessionState, ``event`` no StoredEvent).
    """
    return apply_all(_checked_state(state), (event,))


def fold(events: Iterable[StoredEvent], state: SessionState | None = None) -> SessionState:
    """Apply ``events`` in order to ``state`` (an empty state by default) and return the result.
    Raises :class:`InvalidArgumentError` for events that are no iterable of StoredEvents in seq
    order (and a ``state`` that is no SessionState)."""
    given: object = events
    if not isinstance(given, Iterable):
        raise InvalidArgumentError(
            f"events must be an iterable of StoredEvent, got {type(given).__name__}"
        )
    return apply_all(SessionState() if state is None else _checked_state(state), events)


def _checked_state(state: object) -> SessionState:
    if not isinstance(state, SessionState):
        raise InvalidArgumentError(f"state must be a SessionState, got {type(state).__name__}")
    return state


def apply_all(  # noqa: PLR0915 -- one flat dispatch loop is the fast fold
    state: SessionState, events: Iterable[StoredEvent]
) -> SessionState:
    """Return the state after ``events``, in order; ``state`` is unchanged.

    This is the one implementation of the fold: it gathers what the events add in local lists
    and builds one new state at the end, so folding n events costs O(n) with small constants.
    Raises :class:`InvalidArgumentError` (and returns nothing) when a seq does not follow.
    """
    head, last_ts, started = state.head, state.last_ts, state.started
    entries: list[ConversationEntry] = []
    checkpoints: list[CheckpointMark] = []
    snapshots: list[tuple[int, FileSnapshot]] = []
    compactions: list[tuple[int, Compaction]] = []
    requests: list[tuple[int, ModelRequestRecord]] = []
    archived: list[tuple[int, ContentArchived]] = []
    open_calls = list(state.open_tool_calls)
    turn_open = state.turn_open
    usage = state.usage
    last_usage = state.last_usage
    u_in = u_out = u_cc = u_cr = 0
    context_status = state.context_status
    background, aborted = state.background_completed, state.turns_aborted
    tasks: dict[str, BackgroundStarted] | None = None  # the open tasks, once one changes
    pending = state.pending_restore
    forked, branch = state.forked_from, state.branch
    restores: list[tuple[int, RestoreStarted]] = []
    unknown: set[str] | None = None
    for event in events:
        if type(event) is not StoredEvent:
            raise InvalidArgumentError(f"events must be StoredEvents, got {type(event).__name__}")
        seq = event.seq
        if seq != head + 1:
            raise InvalidArgumentError(f"event seq {seq} does not follow the head {head}")
        head, last_ts = seq, event.ts
        body = event.body
        t = type(body)
        # Most frequent kinds first. The typed aliases narrow for mypy without a runtime check
        # (the `t is X` test is the check).
        if t is ToolResult:
            result: ToolResult = body  # type: ignore[assignment]
            entries.append(ConversationEntry(seq, Message("user", (result.block,))))
            _answer(open_calls, result.block.tool_use_id)
            turn_open = True
        elif t is AssistantMessage:
            reply: AssistantMessage = body  # type: ignore[assignment]
            entries.append(ConversationEntry(seq, Message("assistant", reply.content)))
            turn_open = False
            u = last_usage = reply.usage
            u_in += u.input_tokens
            u_out += u.output_tokens
            u_cc += u.cache_creation_input_tokens
            u_cr += u.cache_read_input_tokens
            open_calls.extend(b.id for b in reply.content if type(b) is ToolUseBlock)
        elif t is ModelRequestRecord:
            requests.append((seq, body))  # type: ignore[arg-type]
        elif t is FileSnapshot:
            snapshots.append((seq, body))  # type: ignore[arg-type]
        elif t is UserPrompt:
            prompt: UserPrompt = body  # type: ignore[assignment]
            entries.append(ConversationEntry(seq, Message("user", prompt.content)))
            for b in prompt.content:
                if type(b) is ToolResultBlock:
                    _answer(open_calls, b.tool_use_id)
            if prompt.origin == "user":
                checkpoints.append(CheckpointMark(seq, event.ts, message_text(prompt.content)))
                turn_open = True
        elif t is ContentArchived:
            archived.append((seq, body))  # type: ignore[arg-type]
        elif t is ContextStatus:
            context_status = body  # type: ignore[assignment]
        elif t is Compaction:
            compactions.append((seq, body))  # type: ignore[arg-type]
        elif t is SessionStarted:
            started = body  # type: ignore[assignment]
        elif t is BackgroundCompleted:
            background += 1
            done: BackgroundCompleted = body  # type: ignore[assignment]
            if tasks is None:
                tasks = {t.task_id: t for t in state.background_open}
            tasks.pop(done.task_id, None)
        elif t is BackgroundStarted:
            begun: BackgroundStarted = body  # type: ignore[assignment]
            if tasks is None:
                tasks = {t.task_id: t for t in state.background_open}
            tasks.pop(begun.task_id, None)  # a second start of an id moves it last
            tasks[begun.task_id] = begun
        elif t is TurnAborted:
            aborted += 1
            stop: TurnAborted = body  # type: ignore[assignment]
            if stop.notice:
                entries.append(
                    ConversationEntry(seq, Message("assistant", (TextBlock(stop.notice),)))
                )
                turn_open = False
        elif t is RestoreStarted:
            pending = (seq, body)  # type: ignore[assignment]
        elif t is RestoreFinished:
            finished: RestoreFinished = body  # type: ignore[assignment]
            if pending is not None and pending[0] == finished.started_seq:
                if finished.outcome == "completed":
                    restores.append((seq, pending[1]))
                pending = None
        elif t is Forked:
            forked = body  # type: ignore[assignment]
        elif t is BranchCreated:
            branch = body  # type: ignore[assignment]
        elif t is TranscriptImported:
            pass  # how an imported transcript was written: for its export only
        elif t is OpaqueEvent:
            if unknown is None:
                unknown = set(state.unknown_kinds)
            unknown.add(event.kind)
        else:
            raise InvalidArgumentError(f"not an event body: {t.__name__}")
    if u_in or u_out or u_cc or u_cr:
        usage = Usage(
            input_tokens=usage.input_tokens + u_in,
            output_tokens=usage.output_tokens + u_out,
            cache_creation_input_tokens=usage.cache_creation_input_tokens + u_cc,
            cache_read_input_tokens=usage.cache_read_input_tokens + u_cr,
        )
    return SessionState(
        head=head,
        last_ts=last_ts,
        started=started,
        entries=state.entries.extended(entries),
        checkpoints=state.checkpoints.extended(checkpoints),
        snapshots=state.snapshots.extended(snapshots),
        compactions=state.compactions.extended(compactions),
        open_tool_calls=tuple(open_calls),
        turn_open=turn_open,
        usage=usage,
        last_usage=last_usage,
        context_status=context_status,
        model_requests=state.model_requests.extended(requests),
        archived=state.archived.extended(archived),
        background_completed=background,
        background_open=state.background_open if tasks is None else tuple(tasks.values()),
        turns_aborted=aborted,
        unknown_kinds=state.unknown_kinds if unknown is None else frozenset(unknown),
        pending_restore=pending,
        file_restores=state.file_restores.extended(restores),
        forked_from=forked,
        branch=branch,
    )


def _answer(open_calls: list[str], tool_use_id: str) -> None:
    """Remove ``tool_use_id`` from the open calls (every occurrence, as a result answers it)."""
    while tool_use_id in open_calls:
        open_calls.remove(tool_use_id)


def conversation(state: SessionState) -> list[Message]:
    """Return the conversation as messages, merging consecutive entries of the same role.

    Within a merged user message the blocks keep log order (tool results then, e.g., a reminder).
    Raises :class:`InvalidArgumentError` when ``state`` is no SessionState.
    """
    return merge_adjacent(entry.message for entry in _checked_state(state).entries)
