"""Manual compaction: a CompactorActor runs the compactor off the session's thread, one actor
per compaction, and :class:`ManualCompaction` orchestrates ``agent.compact()``.

The session must be idle: compaction holds its maintenance lock, so no turn starts meanwhile.
The compactor sees the session's current view (earlier compactions applied); its result is
recorded as a ``Compaction`` event whose ``replacement`` the projection uses from then on — the
original events stay in the log — with the references of the bodies it spilled
(``Compaction.spilled``, computed from the bodies: see ``CompactResult.spilled_refs``), which the
``context`` tool may then read. Cancelling leaves the session exactly as it was (nothing is
appended): the cancel token reaches the compactor (``Compactor.run``), so a summarizer's model
call in flight stops; the caller returns at once even when the compactor does not stop (its
actor ends when it returns, and nothing it returns is recorded). Compactions of different
sessions run at once, each on its own actor: one slow or stuck summarizer delays no other
session. Progress goes to subscribers as ``compaction`` live events.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
import pykka

from liteagent.context import Compactor, CompactResult
from liteagent.context._view import ConversationView
from liteagent.eventlog import CancelToken, Checkpointer, Lease, Position, SessionState
from liteagent.eventlog._messages import merge_adjacent
from liteagent.eventlog.errors import (
    CheckpointConflictError,
    InvalidArgumentError,
    LiteAgentError,
    OperationCancelledError,
)
from liteagent.eventlog.types import (
    Compaction,
    Message,
    PassRecord,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

from ._envelope import ActorBase, ActorMessage, Envelope, ask, ask_or_cancel, start_actor
from ._host_slots import HostSaturatedError
from ._hub import EventHub, LiveEvent
from ._lease import session_lease
from ._live import CompactionProgress
from ._maintenance import held
from ._restore_plan import InterruptedRestoreError
from ._session import RecordCompaction

__all__ = [
    "CompactStats",
    "CompactionFailedError",
    "CompactorActor",
    "ManualCompaction",
    "RunCompaction",
]

_TIMEOUT = 3600.0  # a summarizing compactor may make several model calls


class CompactionFailedError(LiteAgentError):
    """Raised when the agent's compactor failed with an exception that is not one of
    liteagent's own (the original is its ``__cause__``), or returned something that is not a
    :class:`~liteagent.context.CompactResult` of messages. Nothing was recorded."""


class RunCompaction(ActorMessage, tag="run_compaction", frozen=True):
    """Compact ``messages`` (the cancel token travels beside); reply with the CompactResult."""

    messages: tuple[Message, ...]
    usage: Usage | None = None
    instructions: str | None = None


class CompactStats(msgspec.Struct, frozen=True, kw_only=True):
    """What a manual compaction did: estimated tokens of the view before and after, and
    whether anything was recorded ("nothing to reduce" is a valid outcome)."""

    before: int
    after: int
    changed: bool = True


class CompactorActor(ActorBase):
    """Runs an agent's compactor for one compaction, off the session's thread (started for it,
    stopped after it)."""

    decoder = msgspec.msgpack.Decoder(RunCompaction)

    def __init__(self, compactor: Any) -> None:
        super().__init__()
        self.compactor = compactor

    def handle(self, message: Any, envelope: Envelope) -> Any:
        assert isinstance(message, RunCompaction)
        if not isinstance(self.compactor, Compactor):
            raise InvalidArgumentError(
                f"the compactor must be a Compactor, got {type(self.compactor).__name__}"
            )
        try:
            result = self.compactor.run(
                message.messages, message.usage, message.instructions, cancel=envelope.cancel
            )
        except LiteAgentError:
            raise
        except Exception as e:
            raise CompactionFailedError(
                f"the compactor failed: {type(e).__name__}: {e}"[:2000]
            ) from e
        if not isinstance(result, CompactResult):
            raise CompactionFailedError(
                f"the compactor returned {type(result).__name__}, not a CompactResult of messages"
            )
        result = _well_typed(result)
        if result.changed and not result.messages and message.messages:
            raise CompactionFailedError(
                "the compactor's result holds no message (the next request would carry the "
                "new prompt alone); it was not recorded"
            )
        problem = pairing_problem(result.messages, message.messages) if result.changed else None
        if problem is not None:
            raise CompactionFailedError(f"the compactor's result {problem}; it was not recorded")
        return result


_RESULT = msgspec.msgpack.Decoder(CompactResult)


def _well_typed(result: CompactResult) -> CompactResult:
    """``result`` as it reads back from its encoding: a plain copy whose every field has its
    declared type. :class:`CompactionFailedError` when a field does not (a text block holding
    an int, a role ``"system"``, ``messages=None``): such a result could not be recorded."""
    try:
        return _RESULT.decode(msgspec.msgpack.encode(result))
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError, RecursionError) as e:
        raise CompactionFailedError(
            f"the compactor returned a CompactResult that does not hold what its fields "
            f"declare ({e}); it was not recorded"[:2000]
        ) from e


def pairing_problem(messages: Sequence[Message], given: Sequence[Message] = ()) -> str | None:
    """What in ``messages`` (as the conversation merges them) no request may carry: an empty
    message, a ``tool_use`` whose ``tool_result`` is not in the next message (the last message
    aside: the view answers a dangling call), a ``tool_result`` that answers no call of the
    message before it, a tool use id called more often than in the ``given`` conversation.
    ``None`` when there is nothing: every later request starts from a
    recorded compaction, so one that broke a pair would make the provider refuse them all."""
    merged = merge_adjacent(messages)
    ids = Counter(b.id for m in given for b in m.content if type(b) is ToolUseBlock)
    for k, m in enumerate(merged):
        if not m.content:
            return f"has an empty message ({k})"
        for b in m.content:
            if type(b) is ToolUseBlock:
                if ids[b.id] <= 0:
                    return f"calls tool use id {b.id!r} more often than the conversation"
                ids[b.id] -= 1
        results = {b.tool_use_id for b in m.content if type(b) is ToolResultBlock}
        before = merged[k - 1] if k else None
        called = (
            {b.id for b in before.content if type(b) is ToolUseBlock}
            if before is not None and before.role == "assistant"
            else set()
        )
        if not results <= called:
            return f"answers calls the message before does not make (message {k})"
        if m.role == "assistant" and k + 1 < len(merged):
            uses = {b.id for b in m.content if type(b) is ToolUseBlock}
            answers = {b.tool_use_id for b in merged[k + 1].content if type(b) is ToolResultBlock}
            if not uses <= answers:
                return f"leaves calls of message {k} unanswered"
    return None


_STAGES = {
    "budget": "archive",
    "spill": "archive",
    "snip": "normalize",
    "micro": "normalize",
    "summarize": "summarize",
    "circuit_open": "summarize",
}


def _stage(pass_name: str) -> str:
    for key, stage in _STAGES.items():
        if key in pass_name:
            return stage
    return "project"


@dataclass
class ManualCompaction:
    """Runs ``agent.compact()`` for one agent."""

    compactor: Any
    lock_ref: pykka.ActorRef[Any]
    checkpointer: Checkpointer
    hub: EventHub
    is_busy: Callable[[str], bool]
    session_ref: Callable[[str, CancelToken], pykka.ActorRef[Any]]
    state: Callable[[str, CancelToken], SessionState]
    _running: set[pykka.ActorRef[Any]] = field(default_factory=set)  # under _lock
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, timeout: float) -> None:
        """Stop the compactor actors still running (for close(), after it cancelled their
        compactions; a compactor that ignored the cancellation may still run): wait at most
        ``timeout`` for them all."""
        deadline = time.monotonic() + timeout
        with self._lock:
            refs = list(self._running)
        for ref in refs:
            with contextlib.suppress(pykka.Timeout):
                ref.stop(block=True, timeout=max(0.0, deadline - time.monotonic()))

    def _run(self, message: RunCompaction, cancel: CancelToken) -> CompactResult:
        """Run the compactor on an actor of its own; it is told to stop once the reply (or the
        cancellation) is in, and ends when the compactor returns."""
        box: list[pykka.ActorRef[Any]] = []
        try:
            ref = start_actor(CompactorActor, self.compactor, on_stopped=partial(self._ended, box))
        except RuntimeError as e:  # no thread could start
            raise HostSaturatedError(f"no thread for the compaction: {e}") from e
        with self._lock:
            box.append(ref)
            self._running.add(ref)
        try:
            result: CompactResult = ask_or_cancel(ref, message, timeout=_TIMEOUT, cancel=cancel)
            return result
        finally:
            ref.stop(block=False)

    def _ended(self, box: list[pykka.ActorRef[Any]]) -> None:
        """In a compactor actor's thread, once it has stopped."""
        with self._lock:
            self._running.difference_update(box)

    def _publish(
        self,
        session_id: str,
        phase: str,
        *,
        stage: str = "",
        completed: int = 0,
        total: int = 0,
        detail: str = "",
    ) -> None:
        self.hub.publish(
            LiveEvent(
                session_id,
                CompactionProgress(
                    phase=phase, stage=stage, completed=completed, total=total, detail=detail
                ),
            )
        )

    def compact(
        self,
        session_id: str,
        instructions: str | None,
        cancel: CancelToken | None,
        *,
        unless_moved_from: tuple[int, int] | None = None,
    ) -> CompactStats:
        """Compact the session's view now (see the module docstring). With
        ``unless_moved_from`` (an idle compaction: where the session's last turn here left the
        log), refuse with :class:`CheckpointConflictError`, changing nothing, when the log is no
        longer there (another agent or process wrote or restored it since)."""
        token = cancel or CancelToken()
        with (
            held(self.lock_ref, session_id, "compaction", self.is_busy),
            session_lease(self.checkpointer, session_id, "a compaction") as lease,
        ):
            if unless_moved_from is not None:
                now = self.checkpointer.position(session_id)
                if tuple(now) != unless_moved_from:
                    raise CheckpointConflictError(
                        session_id,
                        Position(*unless_moved_from),
                        now,
                        "the session moved on since its last turn here",
                    )
            try:
                return self._compact(session_id, instructions, token, lease)
            except OperationCancelledError:
                self._publish(session_id, "cancelled", detail="nothing was changed")
                raise
            except Exception as e:
                self._publish(session_id, "error", detail=f"{type(e).__name__}: {e}")
                raise

    def _compact(
        self, session_id: str, instructions: str | None, cancel: CancelToken, lease: Lease
    ) -> CompactStats:
        self._publish(session_id, "start", stage="measure")
        state = self.state(session_id, cancel)
        if state.pending_restore is not None:
            # A compaction appended after the intent would leave finish_restore() nothing to
            # finish: the restore cuts the log at the intent it wrote.
            raise InterruptedRestoreError(
                f"session {session_id!r} has an interrupted restore (started at seq "
                f"{state.pending_restore[0]}): call finish_restore() or rollback_restore() "
                "before compacting it"
            )
        view = ConversationView()
        messages = view.sync(state)
        usage = state.last_usage
        result = self._run(RunCompaction(messages, usage, instructions), cancel)
        cancel.raise_if_cancelled()
        total = len(result.passes)
        for i, report in enumerate(result.passes, start=1):
            self._publish(
                session_id,
                "progress",
                stage=_stage(report.name),
                completed=i,
                total=total,
                detail=report.detail or report.name,
            )
        if not result.changed:
            self._publish(session_id, "done", stage="project", detail="nothing to reduce")
            return CompactStats(
                before=result.tokens_before, after=result.tokens_after, changed=False
            )
        self._publish(session_id, "progress", stage="persist", completed=0, total=1)
        record = Compaction(
            first_seq=1,
            last_seq=state.head,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            passes=tuple(
                PassRecord(
                    name=r.name,
                    tokens_before=r.tokens_before,
                    tokens_after=r.tokens_after,
                    detail=r.detail,
                )
                for r in result.passes
            ),
            instructions=instructions,
            replacement=tuple(result.messages),
            spilled=result.spilled_refs(messages),
        )
        ask(
            self.session_ref(session_id, cancel),
            RecordCompaction(record, state.head),
            timeout=60,
            lease=lease,
        )
        self._publish(session_id, "done", stage="persist", completed=1, total=1)
        return CompactStats(before=result.tokens_before, after=result.tokens_after)
