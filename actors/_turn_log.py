"""One session's log as its turn loop sees it: the folded state, conditional appends, and how
a turn that stopped is recorded.

Every append is conditional on the position the session knows (head and generation). One that
fails is remembered: when the turn is then recorded as aborted, the log is looked at first, so a
store that wrote and then reported an error has its events adopted instead of being written
over, and a log another writer moved is left alone. The abort record's notice closes the turn in
the conversation (see :class:`~liteagent.eventlog.types.TurnAborted`), so the next prompt starts a
turn of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from liteagent.eventlog import Checkpointer, Lease, SessionState, StoredEvent, fold
from liteagent.eventlog._eventcodec import kind_of
from liteagent.eventlog._fold import apply_all
from liteagent.eventlog.errors import CheckpointConflictError, CodecError, SessionLeasedError
from liteagent.eventlog.types import Event, ToolUseBlock, TurnAborted

from ._background import lost, lost_records
from ._turn_tools import interrupted_results, safe_text

__all__ = ["SessionLog"]

_REASON_CHARS = 500  # of an error message kept in a turn-aborted record and its notice
_LOST = (
    "the agent running it was closed (which stops its tasks) or its process ended before the "
    "task finished; its output and exit code will never be reported"
)


class SessionLog:
    """The folded state of one session and its appends (module docstring)."""

    def __init__(self, session_id: str, checkpointer: Checkpointer, log: Any) -> None:
        self.session_id = session_id
        self.checkpointer = checkpointer
        self.log = log
        self.state = SessionState()
        self.generation = 0
        self.loaded = False
        self._failed: tuple[int, list[Event]] | None = None  # an append that raised
        self.lease: Lease | None = None  # held while a turn, restore or compaction runs

    def refresh(self) -> None:
        """Take in what another process appended since this one last wrote or read the log
        (it may have run a turn under the session's lease): the new events are folded onto the
        state, so a session that two processes take turns on costs each turn only what the
        other appended. A log cut back or replaced since (a new generation) is folded again
        whole before the next use."""
        if not self.loaded:
            return
        cp = self.checkpointer
        head, generation = cp.position(self.session_id)
        if head == self.state.head and (not head or generation == self.generation):
            return
        if self.state.head and head > self.state.head and generation == self.generation:
            try:
                state = fold(cp.read(self.session_id, self.state.head), self.state)
                again = cp.position(self.session_id)
            except BaseException:
                self.loaded = False
                raise
            if again.generation == generation:  # a prefix of the same history: appends conflict
                self.state = state  # if the log moved on again meanwhile, and fold it then
                return
        self.loaded = False

    def load(self) -> None:
        """Fold the session's log (resuming after a restart, a passivation or a conflict)."""
        cp = self.checkpointer
        head, generation = cp.position(self.session_id)
        state = fold(cp.read(self.session_id))
        if state.head != head:  # appended meanwhile: read on to a consistent position
            head, generation = cp.position(self.session_id)
            state = fold(cp.read(self.session_id, state.head), state)
        self.state, self.generation, self.loaded = state, generation, True
        self._failed = None

    def append(self, events: Sequence[Event]) -> None:
        """Append ``events`` atomically at the session's known position and apply them.

        After a failure other than :class:`CodecError` (which writes nothing) the session folds
        its log again before its next turn: a store that failed may still have written. A lease
        the session's lease no longer held (released, or taken over after it expired) refuses
        the append (:class:`LeaseLostError`: the backend checks it with the write)."""
        cp = self.checkpointer
        expected_generation = self.generation if self.state.head else None
        ts = time.time()
        try:
            head = cp.append(
                self.session_id,
                events,
                expected_head=self.state.head,
                expected_generation=expected_generation,
                ts=ts,
                lease=self.lease,
            )
        except CodecError:
            raise
        except (CheckpointConflictError, SessionLeasedError):
            self.loaded = False  # another writer advanced the log: fold it before the next turn
            raise
        except BaseException:
            self.loaded = False  # the store failed, and may have written after all
            self._failed = (self.state.head, list(events))
            raise
        first = head - len(events) + 1
        new = [
            StoredEvent(seq, ts, kind_of(e), e)
            for seq, e in zip(range(first, head + 1), events, strict=True)
        ]
        self.state = apply_all(self.state, new)
        if not self.generation:
            self.generation = cp.position(self.session_id).generation

    def failed_with(self, event: Event) -> bool:
        """Whether the last append raised with ``event`` as its last event."""
        return self._failed is not None and self._failed[1][-1] is event

    def closing(self, reason: str, *, notice: bool = True) -> list[Event]:
        """Synthetic results for the open tool calls and the turn-aborted record; with
        ``notice``, the record closes the turn in the conversation (see TurnAborted)."""
        reason = safe_text(reason)[:_REASON_CHARS]
        calls = [ToolUseBlock(c, "", {}) for c in self.state.open_tool_calls]
        text = None
        if notice and (calls or self.state.turn_open):
            text = f"[liteagent: this turn stopped before the model finished: {reason}]"
        return [*interrupted_results(calls, reason), TurnAborted(reason=reason, notice=text)]

    def lost_background(self) -> list[Event]:
        """What closes the background tasks open in the log that will never report (their
        process is gone, see ``_background``): a failed end for each and a notice for the
        model; nothing when there are none."""
        return lost_records(lost(self.state), _LOST)

    def interrupted_turn(self) -> list[Event]:
        """What closes a turn that another process (or a crash) cut short, found open in the
        log: synthetic results for its open tool calls and a turn-aborted record, to be written
        before anything else enters the conversation; nothing when no call is open."""
        if not self.state.open_tool_calls:
            return []
        return self.closing("the previous turn was interrupted", notice=False)

    def record_abort(self, error: BaseException, reason: str, *, started: bool = True) -> None:
        """Record the aborted turn (``reason`` says why). After an append that failed, the log
        is looked at first (see :meth:`_settle_failed_append`); after a conflict (another
        writer) nothing is tried. A turn that had not ``started`` (its prompt append failed) is
        recorded only when that prompt was written after all. When nothing can be recorded,
        the next ``send`` folds the log again and repairs what it finds."""
        if isinstance(error, SessionLeasedError):  # another holder has the session now
            self.log.warning("turn.abort_not_recorded", error="the session's lease was lost")
            return
        settled = (
            "conflict"
            if isinstance(error, CheckpointConflictError)
            else self._settle_failed_append()
        )
        if settled == "conflict":
            self.log.warning("turn.abort_not_recorded", error="another writer moved the log")
            return
        if not started and settled != "written":
            return
        try:
            self.append(self.closing(reason))
        except BaseException as e:  # noqa: BLE001 -- the original error is what the caller sees
            self.log.warning("turn.abort_not_recorded", error=repr(e))
            self.loaded = False
        else:
            self.loaded = True  # the state is the log's again

    def _settle_failed_append(self) -> str:
        """After an append that raised, where the log is: ``"clean"`` (no append failed, or
        its events were not written), ``"written"`` (a store that wrote and then failed: the
        events are applied now), or ``"conflict"`` (the log holds anything else, or cannot be
        read)."""
        failed, self._failed = self._failed, None
        if failed is None:
            return "clean"
        head, events = failed
        cp = self.checkpointer
        try:
            position = cp.position(self.session_id)
            if position.head == head:
                return "clean"
            if position.head != head + len(events):
                return "conflict"
            written = list(cp.read(self.session_id, head))
        except Exception as e:  # noqa: BLE001 -- the store is still failing
            self.log.warning("turn.log_unreadable", error=repr(e))
            return "conflict"
        if [e.body for e in written] != list(events):
            return "conflict"
        self.state = apply_all(self.state, written)
        self.generation = position.generation
        return "written"
