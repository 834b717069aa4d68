"""The crash-safe step restores and undos share: change the conversation and the files together,
keeping what is taken away as a branch.

One operation is an intent record (:class:`RestoreStarted`) and, for an undo that brings events
back, those events right before it, appended at the known position in one write; then:

1. the branch session that keeps what the operation takes away (see :mod:`._branches`), one
   append (its content is a function of the log and the intent, so finishing an interrupted
   operation writes the same one);
2. the files, through ``apply`` (a failed write puts the files already changed back);
3. the conclusion: truncate the log (a restore: to before the checkpoint, which removes the
   intent; an undo: to just before its intent) or, for files only, record completion.

Until the conclusion the session has an interrupted restore (the intent is its last record):
:meth:`Switch.finish` does the remaining steps again (each is idempotent), :meth:`Switch.rollback`
puts every file back to its backup, deletes the branch, and cuts the log back (an undo's
events go again) or records the rollback. A writer that appended after the intent makes the
truncate conflict: a restore then rolls back; an undo, whose events and files are in place,
records its completion instead. A conclusion the store refuses otherwise (an I/O error, damage)
rolls back too, as far as the store lets it, and raises that error: what the rollback cannot
record stays an interrupted restore. A lease lost meanwhile (this process was stopped for
longer than its ttl, and another took the session over) stops the operation where it is, with
no rollback: the session is the new holder's, which finds the interrupted restore and settles
it; no file is written and nothing deleted once the lease may be another's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from liteagent.eventlog import CancelToken, Checkpointer, Lease, StoredEvent
from liteagent.eventlog._lease import check_lease_fresh
from liteagent.eventlog.errors import (
    CheckpointConflictError,
    LiteAgentError,
    OperationCancelledError,
    SessionLeasedError,
)
from liteagent.eventlog.types import (
    Event,
    OpaqueEvent,
    RestoreFile,
    RestoreFinished,
    RestoreStarted,
)

from ._branches import branch_for, touch_refs, write_branch
from ._restore_plan import reason

__all__ = ["Apply", "Switch"]

Apply = Callable[[Sequence[RestoreFile], bool, CancelToken | None], list[str]]
"""``apply(files, to_target, cancel) -> paths``: put the files to their targets or backups."""


@dataclass
class Switch:
    """Runs the step on one session under its lease (see the module docstring)."""

    checkpointer: Checkpointer
    session_id: str
    lease: Lease
    apply: Apply

    def run(
        self,
        events: Sequence[StoredEvent],
        generation: int,
        intent: RestoreStarted,
        *,
        tail: Sequence[Event | OpaqueEvent] = (),
        conclude_to: int | None,
        cancel: CancelToken | None = None,
    ) -> list[str]:
        """Append ``tail`` and ``intent`` after ``events`` (the whole log, at ``generation``),
        write the branch, put the files, then truncate to ``conclude_to`` (``None``: record
        completion). Returns the paths put back."""
        cp, sid = self.checkpointer, self.session_id
        head = events[-1].seq if events else 0
        touch_refs(cp.blobs, [*tail, intent])
        intent_seq = cp.append(
            sid,
            [*tail, intent],
            expected_head=head,
            expected_generation=generation,
            lease=self.lease,
        )
        log = [
            *events,
            *(StoredEvent(head + 1 + i, 0.0, "", body) for i, body in enumerate(tail)),
        ]
        try:
            self._write_branch(log, intent_seq, intent)
            restored = self.apply(intent.files, True, cancel)
        except SessionLeasedError:  # another holder has the session: it settles the restore
            raise
        except Exception as e:  # the files were put back (or never changed)
            self._roll_back(intent_seq, intent, reason(e), files=False)
            if cancel is not None and cancel.cancelled:
                raise OperationCancelledError(cancel.reason or "cancelled") from e
            raise
        self._conclude(intent_seq, intent, conclude_to, generation)
        return restored

    def _write_branch(
        self, log: Sequence[StoredEvent], intent_seq: int, intent: RestoreStarted
    ) -> None:
        if intent.branch is not None:
            check_lease_fresh(self.lease)  # a rollback elsewhere may have deleted it already
            header, removed = branch_for(self.session_id, log, intent_seq, intent)
            write_branch(self.checkpointer, intent.branch, header, removed)

    def _conclude(
        self, intent_seq: int, intent: RestoreStarted, conclude_to: int | None, generation: int
    ) -> None:
        cp, sid = self.checkpointer, self.session_id
        try:
            if conclude_to is None:
                cp.append(
                    sid,
                    [RestoreFinished(started_seq=intent_seq, outcome="completed")],
                    expected_head=intent_seq,
                    expected_generation=generation,
                    lease=self.lease,
                )
            else:
                cp.truncate(
                    sid,
                    conclude_to,
                    expected_head=intent_seq,
                    expected_generation=generation,
                    lease=self.lease,
                )
        except CheckpointConflictError:
            if intent.rollback_to is not None:  # an undo's events and files are in place
                cp.append(
                    sid,
                    [RestoreFinished(started_seq=intent_seq, outcome="completed")],
                    lease=self.lease,
                )
                self._forget(intent)
                return
            self._roll_back(
                intent_seq, intent, "another writer appended to the session during the restore"
            )
            raise
        except SessionLeasedError:  # another holder has the session: it settles the restore
            raise
        except LiteAgentError as e:  # the files are in place, but the log cannot say so
            with contextlib.suppress(LiteAgentError):  # what it cannot record stays pending
                self._roll_back(intent_seq, intent, f"the log could not be concluded: {e}")
            raise
        self._forget(intent)

    def _forget(self, intent: RestoreStarted) -> None:
        """After an undo: its branch is back in the session, so its branch session goes."""
        if intent.undo_of is not None:
            with contextlib.suppress(LiteAgentError):
                self.checkpointer.delete(intent.undo_of)

    def _roll_back(
        self, intent_seq: int, intent: RestoreStarted, reason: str, *, files: bool = True
    ) -> list[str]:
        """Files back to their backups (``files``), the branch deleted, and the log cut back
        to what it was before the operation (an undo's brought-back events and the intent
        taken away), so that a restore that failed or was cancelled leaves the session as it
        was, and the restore before it can still be undone; when the log moved on since the
        intent, or cannot be cut, the rollback is recorded instead."""
        cp, sid = self.checkpointer, self.session_id
        paths = self.apply(intent.files, False, None) if files else [f.path for f in intent.files]
        if intent.branch is not None:
            check_lease_fresh(self.lease)  # the branch is the new holder's if the lease is
            cp.delete(intent.branch)
        cut_to = intent_seq - 1 if intent.rollback_to is None else intent.rollback_to
        try:
            cp.truncate(sid, cut_to, expected_head=intent_seq, lease=self.lease)
        except LiteAgentError:  # moved on, or a log that cannot be cut: recorded instead
            pass
        else:
            return paths
        cp.append(
            sid,
            [RestoreFinished(started_seq=intent_seq, outcome="rolled_back", reason=reason)],
            lease=self.lease,
        )
        return paths

    def finish(
        self,
        events: Sequence[StoredEvent],
        generation: int,
        intent_seq: int,
        intent: RestoreStarted,
    ) -> list[str]:
        """Finish the interrupted operation whose intent is at ``intent_seq`` of ``events``:
        the branch (if it is missing), the files, the conclusion. Raises
        :class:`CheckpointConflictError` when the log moved on since the intent."""
        self._write_branch(events, intent_seq, intent)
        restored = self.apply(intent.files, True, None)
        cp, sid = self.checkpointer, self.session_id
        head = events[-1].seq if events else 0
        if intent.conversation:
            cp.truncate(
                sid,
                intent.to_seq - 1,
                expected_head=intent_seq,
                expected_generation=generation,
                lease=self.lease,
            )
        else:
            cp.append(
                sid,
                [RestoreFinished(started_seq=intent_seq, outcome="completed")],
                expected_head=head,
                expected_generation=generation,
                lease=self.lease,
            )
        self._forget(intent)
        return restored

    def rollback(self, intent_seq: int, intent: RestoreStarted) -> list[str]:
        """Roll the interrupted operation back: every file to its backup, the branch deleted,
        an undo's events taken away again (or the rollback recorded)."""
        return self._roll_back(intent_seq, intent, "rolled back after an interruption")
