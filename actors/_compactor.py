"""Manual compaction: CompactorActor runs a compactor off the session's thread, and
:class:`ManualCompaction` orchestrates ``agent.compact()``.

The session must be idle: compaction holds its maintenance lock, so no turn starts meanwhile.
The compactor sees the session's current view (earlier compactions applied); its result is
recorded as a ``Compaction`` event whose ``replacement`` the projection uses from then on — the
original events stay in the log — with the references of the bodies it spilled
(``Compaction.spilled``, computed from the bodies: see ``CompactResult.spilled_refs``), which the
``context`` tool may then read. Cancelling leaves the session exactly as it was (nothing is
appended): the cancel token reaches the compactor (``Compactor.run``), so a summarizer's model
call in flight stops and the compactor actor is free for the next compaction at once.
Progress goes to subscribers as ``compaction`` live events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pykka

from liteagent.context import Compactor
from liteagent.context._view import ConversationView
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    Compaction,
    InvalidArgumentError,
    Lease,
    Message,
    OperationCancelledError,
    PassRecord,
    SessionState,
    Usage,
)

from ._envelope import ActorBase, ActorMessage, Envelope, ask, ask_or_cancel
from ._hub import EventHub, LiveEvent
from ._lease import session_lease
from ._live import CompactionProgress
from ._maintenance import held
from ._restore_plan import InterruptedRestoreError
from ._session import RecordCompaction

__all__ = ["CompactStats", "CompactorActor", "ManualCompaction", "RunCompaction"]

_TIMEOUT = 3600.0  # a summarizing compactor may make several model calls


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
    """Runs one agent's compactor, one compaction at a time, off the sessions' threads."""

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
        return self.compactor.run(
            message.messages, message.usage, message.instructions, cancel=envelope.cancel
        )


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

    compactor_ref: pykka.ActorRef[Any]
    lock_ref: pykka.ActorRef[Any]
    checkpointer: Checkpointer
    hub: EventHub
    is_busy: Callable[[str], bool]
    session_ref: Callable[[str, CancelToken], pykka.ActorRef[Any]]
    state: Callable[[str, CancelToken], SessionState]

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
        self, session_id: str, instructions: str | None, cancel: CancelToken | None
    ) -> CompactStats:
        """Compact the session's view now (see the module docstring)."""
        token = cancel or CancelToken()
        with (
            held(self.lock_ref, session_id, "compaction", self.is_busy),
            session_lease(self.checkpointer, session_id, "a compaction") as lease,
        ):
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
        result = ask_or_cancel(
            self.compactor_ref,
            RunCompaction(messages, usage, instructions),
            timeout=_TIMEOUT,
            cancel=cancel,
        )
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
