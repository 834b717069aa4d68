"""Restoring a session to a checkpoint: the conversation (truncate the log) and the files (put
back what the agent's file tools changed), all or nothing.

Order, so that no crash leaves a silent half state:

1. hold the session's maintenance lock (no turn of this agent can start) and its lease (no
   other process or agent can start work on it), and check it is idle;
2. fold the log, validate the checkpoint, preflight every file (refuse with the reasons);
3. store each file's current content as a backup and append ``RestoreStarted`` (the intent)
   at the known position;
4. put the files back (the FileSnapshotActor of the workspace does it), rolling back to the
   backups if a write fails;
5. truncate the log to ``seq - 1`` at the intent's position (which removes the intent), or —
   for a files-only restore — append ``RestoreFinished``. A writer that got in first makes the
   truncate conflict: the files go back to their backups and the conflict is raised.

A crash between 3 and 5 leaves the intent at the end of the log: the session reports an
interrupted restore until :func:`finish_restore` or :func:`rollback_restore` settles it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pykka

from liteagent.eventlog import (
    CancelToken,
    CheckpointConflictError,
    Checkpointer,
    Lease,
    OperationCancelledError,
    RestoreFinished,
    RestoreStarted,
    SessionState,
    fold,
)

from ._envelope import ask
from ._hub import EventHub, LiveEvent
from ._lease import session_lease
from ._live import CheckpointRestore
from ._maintenance import held
from ._restore_files import backup_files
from ._restore_plan import (
    Checkpoint,
    InterruptedRestoreError,
    InvalidCheckpointError,
    RestoreRefusedError,
    checkpoints,
    plan_files,
    preflight,
)
from ._snapshots import ApplyRestore

__all__ = ["RestoreResult", "Restorer"]

_ASK_TIMEOUT = 600.0


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a restore did: the files it put back and whether it restored the conversation."""

    restored_files: tuple[str, ...]
    conversation_restored: bool


@dataclass
class Restorer:
    """Runs restores for one agent (in the caller's thread; files change in the workspace's
    FileSnapshotActor)."""

    checkpointer: Checkpointer
    workdir: Path
    lock_ref: pykka.ActorRef[Any]
    snapshot_ref: pykka.ActorRef[Any]
    hub: EventHub
    is_busy: Callable[[str], bool]
    forget: Callable[[str], None]

    def _fold(self, session_id: str) -> tuple[SessionState, int]:
        cp = self.checkpointer
        while True:
            head, generation = cp.position(session_id)
            state = fold(cp.read(session_id))
            if state.head == head:
                return state, generation

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """The session's checkpoints, oldest first."""
        state, _ = self._fold(session_id)
        return checkpoints(state, self.checkpointer.blobs)

    def pending(self, session_id: str) -> RestoreStarted | None:
        """The interrupted restore of the session, if any."""
        state, _ = self._fold(session_id)
        return None if state.pending_restore is None else state.pending_restore[1]

    def _publish(
        self, session_id: str, phase: str, completed: int = 0, total: int = 0, detail: str = ""
    ) -> None:
        self.hub.publish(
            LiveEvent(
                session_id,
                CheckpointRestore(phase=phase, completed=completed, total=total, detail=detail),
            )
        )

    @contextmanager
    def _hold(self, session_id: str) -> Iterator[Lease]:
        with (
            held(self.lock_ref, session_id, "restore", self.is_busy),
            session_lease(self.checkpointer, session_id, "a restore") as lease,
        ):
            self.forget(session_id)  # its actor refolds the log when it is used again
            yield lease

    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
    ) -> RestoreResult:
        """Restore ``session_id`` to the checkpoint at ``seq`` (see the module docstring)."""
        with self._hold(session_id) as lease:
            try:
                return self._restore(session_id, seq, files, conversation, cancel, lease=lease)
            except Exception as e:
                self._publish(session_id, "error", detail=f"{type(e).__name__}: {e}")
                raise

    def _restore(
        self,
        session_id: str,
        seq: int,
        files: bool,
        conversation: bool,
        cancel: CancelToken | None,
        *,
        lease: Lease,
    ) -> RestoreResult:
        cp = self.checkpointer
        state, generation = self._fold(session_id)
        if state.pending_restore is not None:
            raise InterruptedRestoreError(
                f"session {session_id!r} has an interrupted restore (started at seq "
                f"{state.pending_restore[0]}); finish or roll it back first"
            )
        if seq not in {c.seq for c in state.checkpoints}:
            raise InvalidCheckpointError(f"seq {seq} is not a checkpoint of session {session_id!r}")
        plans = plan_files(state, seq, cp.blobs, verify=True) if files else []
        problems = preflight(state, seq, self.workdir, plans) if files else []
        if problems:
            raise RestoreRefusedError(problems)
        if cancel is not None:
            cancel.raise_if_cancelled()
        self._publish(session_id, "start", 0, len(plans))
        if not plans:
            if conversation:
                cp.truncate(
                    session_id,
                    seq - 1,
                    expected_head=state.head,
                    expected_generation=generation,
                    lease=lease,
                )
            self._publish(session_id, "done", 0, 0)
            return RestoreResult(restored_files=(), conversation_restored=conversation)
        records = backup_files(
            self.workdir, [(p.path, p.target, p.target_hash) for p in plans], cp.blobs
        )
        intent = cp.append(
            session_id,
            [RestoreStarted(to_seq=seq, conversation=conversation, files=tuple(records))],
            expected_head=state.head,
            expected_generation=generation,
            lease=lease,
        )
        try:
            restored = ask(
                self.snapshot_ref,
                ApplyRestore(session_id, tuple(records), True),
                timeout=_ASK_TIMEOUT,
                cancel=cancel,
            )
        except Exception as e:  # files were put back (or never changed): record the outcome
            cp.append(
                session_id,
                [
                    RestoreFinished(
                        started_seq=intent, outcome="rolled_back", reason=f"{type(e).__name__}: {e}"
                    )
                ],
                lease=lease,
            )
            if cancel is not None and cancel.cancelled:
                raise OperationCancelledError(cancel.reason or "cancelled") from e
            raise
        if conversation:
            try:
                cp.truncate(
                    session_id,
                    seq - 1,
                    expected_head=intent,
                    expected_generation=generation,
                    lease=lease,
                )
            except CheckpointConflictError:
                ask(
                    self.snapshot_ref,
                    ApplyRestore(session_id, tuple(records), False),
                    timeout=_ASK_TIMEOUT,
                )
                cp.append(
                    session_id,
                    [
                        RestoreFinished(
                            started_seq=intent,
                            outcome="rolled_back",
                            reason="another writer appended to the session during the restore",
                        )
                    ],
                    lease=lease,
                )
                raise
        else:
            cp.append(
                session_id,
                [RestoreFinished(started_seq=intent, outcome="completed")],
                expected_head=intent,
                expected_generation=generation,
                lease=lease,
            )
        self._publish(session_id, "done", len(restored), len(restored))
        return RestoreResult(restored_files=tuple(restored), conversation_restored=conversation)

    def finish(self, session_id: str) -> RestoreResult:
        """Finish an interrupted restore: put every file to its target again, then truncate (or
        record completion). Raises CheckpointConflictError when the log moved on since."""
        with self._hold(session_id) as lease:
            state, generation = self._fold(session_id)
            if state.pending_restore is None:
                raise InvalidCheckpointError(f"session {session_id!r} has no interrupted restore")
            intent, started = state.pending_restore
            restored = ask(
                self.snapshot_ref,
                ApplyRestore(session_id, started.files, True),
                timeout=_ASK_TIMEOUT,
            )
            if started.conversation:
                self.checkpointer.truncate(
                    session_id,
                    started.to_seq - 1,
                    expected_head=intent,
                    expected_generation=generation,
                    lease=lease,
                )
            else:
                self.checkpointer.append(
                    session_id,
                    [RestoreFinished(started_seq=intent, outcome="completed")],
                    expected_head=state.head,
                    expected_generation=generation,
                    lease=lease,
                )
            return RestoreResult(
                restored_files=tuple(restored), conversation_restored=started.conversation
            )

    def rollback(self, session_id: str) -> list[str]:
        """Roll an interrupted restore back: every file returns to its backup."""
        with self._hold(session_id) as lease:
            state, generation = self._fold(session_id)
            if state.pending_restore is None:
                raise InvalidCheckpointError(f"session {session_id!r} has no interrupted restore")
            intent, started = state.pending_restore
            paths: list[str] = ask(
                self.snapshot_ref,
                ApplyRestore(session_id, started.files, False),
                timeout=_ASK_TIMEOUT,
            )
            self.checkpointer.append(
                session_id,
                [
                    RestoreFinished(
                        started_seq=intent,
                        outcome="rolled_back",
                        reason="rolled back after an interruption",
                    )
                ],
                expected_head=state.head,
                expected_generation=generation,
                lease=lease,
            )
            return paths
