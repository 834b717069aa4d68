"""Time travel for one agent: restoring a session to a checkpoint, undoing that, forking, and
the preview of a restore.

A restore, and an undo, hold the session's maintenance lock (no turn of this agent can start)
and its lease (no other process or agent can start work on it), check it is idle, fold the
log, preflight every file (refusing with the reasons), and then run the crash-safe step of
:mod:`._switch`: the intent, the branch that keeps what is taken away, the files, the
conclusion. A crash in between leaves the intent at the end of the log: the session reports an
interrupted restore until :meth:`Restorer.finish` or :meth:`Restorer.rollback` settles it.

A restore to the checkpoint at ``seq`` (``conversation``) truncates the log to ``seq - 1`` and
puts back every file the agent's file tools changed since; what it takes away is a branch
(:mod:`._branches`) that :meth:`Restorer.undo` brings back, refusing (naming each file) when a
file is no longer as the restore left it. An undo is kept as a branch too, so it can be undone.
A fork copies the log before a checkpoint into a new session (the original is untouched).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pykka

from liteagent.eventlog import CancelToken, Checkpointer, Lease, SessionState, StoredEvent, fold
from liteagent.eventlog._branches import new_branch_id
from liteagent.eventlog.errors import CheckpointConflictError, LiteAgentError
from liteagent.eventlog.types import RestoreFile, RestoreStarted

from ._branches import Branch, list_branches, read_branch
from ._envelope import ask
from ._errors import AgentBusyError
from ._fork import fork_session
from ._hub import EventHub, LiveEvent
from ._lease import describe_holder, session_lease
from ._ledger import untracked_seqs
from ._live import CheckpointRestore
from ._maintenance import held
from ._preview import RestorePreview, preview_restore
from ._restore_files import backup_files, remove_created_folders
from ._restore_plan import (
    Checkpoint,
    InterruptedRestoreError,
    InvalidCheckpointError,
    NoBranchError,
    RestoreRefusedError,
    checkpoints,
    created_folders,
    current_hash,
    plan_files,
    preflight,
    unreadable,
    unsafe_path,
)
from ._snapshots import ApplyRestore
from ._switch import Switch

__all__ = ["RestoreResult", "Restorer"]

_ASK_TIMEOUT = 600.0
_READ_ATTEMPTS = 10


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a restore (or an undo) did: the files it put back, whether it changed the
    conversation, and ``branch``: the branch that keeps what it took away
    (``undo_restore(session_id, branch=...)`` brings it back; ``None`` when it changed
    nothing)."""

    restored_files: tuple[str, ...]
    conversation_restored: bool
    branch: str | None = None


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

    def _read(self, session_id: str) -> tuple[list[StoredEvent], SessionState, int]:
        """The whole log, its fold and its generation, as of one moment."""
        cp = self.checkpointer
        for attempt in range(_READ_ATTEMPTS):
            head, generation = cp.position(session_id)
            try:
                events = list(cp.read(session_id))
            except CheckpointConflictError:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                continue
            if (events[-1].seq if events else 0) == head:
                return events, fold(events), generation
        raise CheckpointConflictError(session_id, None, None, "the session kept changing")

    def _fold(self, session_id: str) -> tuple[SessionState, int]:
        _, state, generation = self._read(session_id)
        return state, generation

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """The session's checkpoints, oldest first."""
        events, state, _ = self._read(session_id)
        return checkpoints(state, self.checkpointer.blobs, untracked_seqs(events))

    def pending(self, session_id: str) -> RestoreStarted | None:
        """The interrupted restore of the session, if any (not one that is running now)."""
        try:
            _, state, _ = self._read_settled(session_id)
        except AgentBusyError:
            return None  # a restore is running: nothing was interrupted
        return None if state.pending_restore is None else state.pending_restore[1]

    def _read_settled(self, session_id: str) -> tuple[list[StoredEvent], SessionState, int]:
        """:meth:`_read` for an operation that takes no lease, such that a restore intent in
        the log is an interrupted restore's: raises AgentBusyError while one is running (its
        lease is held, here or in another process). A restore holds the lease from before its
        intent is written until after its last write, so an intent read while the lease was
        free, with the log unchanged since, is one whose holder stopped."""
        cp = self.checkpointer
        for _ in range(_READ_ATTEMPTS):
            events, state, generation = self._read(session_id)
            if state.pending_restore is None:
                return events, state, generation
            holder = cp.lease_holder(session_id)
            if holder is not None:
                raise AgentBusyError(
                    f"session {session_id!r} has a restore running: {describe_holder(holder)} "
                    "holds its lease"
                )
            if cp.position(session_id) == (events[-1].seq if events else 0, generation):
                return events, state, generation
        raise CheckpointConflictError(session_id, None, None, "the session kept changing")

    def list_branches(self, session_id: str) -> list[Branch]:
        """The session's branches, oldest first (see :func:`._branches.list_branches`)."""
        events, state, _ = self._read(session_id)
        pending = state.pending_restore
        return list_branches(
            self.checkpointer, session_id, events, None if pending is None else pending[1].branch
        )

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
    def _hold(self, session_id: str, purpose: str = "a restore") -> Iterator[Lease]:
        with (
            held(self.lock_ref, session_id, "restore", self.is_busy),
            session_lease(self.checkpointer, session_id, purpose) as lease,
        ):
            self.forget(session_id)  # its actor refolds the log when it is used again
            try:
                yield lease
            except Exception as e:
                self._publish(session_id, "error", detail=f"{type(e).__name__}: {e}")
                raise

    def _switch(self, session_id: str, lease: Lease) -> Switch:
        def apply(files: Sequence[RestoreFile], to_target: bool, cancel: CancelToken | None) -> Any:
            return ask(
                self.snapshot_ref,
                ApplyRestore(session_id, tuple(files), to_target),
                timeout=_ASK_TIMEOUT,
                cancel=cancel,
                lease=lease,  # no file is written once the lease may be another's
            )

        return Switch(self.checkpointer, session_id, lease, apply)

    @staticmethod
    def _idle(session_id: str, state: SessionState) -> None:
        if state.pending_restore is not None:
            raise InterruptedRestoreError(
                f"session {session_id!r} has an interrupted restore (started at seq "
                f"{state.pending_restore[0]}); finish or roll it back first"
            )

    @staticmethod
    def _checkpoint(session_id: str, state: SessionState, seq: int) -> None:
        if seq not in {c.seq for c in state.checkpoints}:
            raise InvalidCheckpointError(f"seq {seq} is not a checkpoint of session {session_id!r}")

    def preview(
        self, session_id: str, seq: int, *, files: bool = True, conversation: bool = True
    ) -> RestorePreview:
        """What :meth:`restore` would do now (it takes no lock and changes nothing)."""
        events, state, _ = self._read_settled(session_id)
        self._idle(session_id, state)
        self._checkpoint(session_id, state, seq)
        return preview_restore(
            session_id,
            state,
            events,
            seq,
            files=files,
            conversation=conversation,
            workdir=self.workdir,
            blobs=self.checkpointer.blobs,
        )

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
            events, state, generation = self._read(session_id)
            self._idle(session_id, state)
            self._checkpoint(session_id, state, seq)
            cp = self.checkpointer
            plans = plan_files(state, seq, cp.blobs, verify=True) if files else []
            problems = preflight(state, seq, self.workdir, plans) if files else []
            if problems:
                raise RestoreRefusedError(problems)
            if cancel is not None:
                cancel.raise_if_cancelled()
            if not plans and not conversation:
                return RestoreResult(restored_files=(), conversation_restored=False)
            self._publish(session_id, "start", 0, len(plans))
            records = backup_files(self.workdir, plans, cp.blobs)
            intent = RestoreStarted(
                to_seq=seq,
                conversation=conversation,
                files=tuple(records),
                branch=new_branch_id(session_id),
            )
            restored = self._switch(session_id, lease).run(
                events,
                generation,
                intent,
                conclude_to=seq - 1 if conversation else None,
                cancel=cancel,
            )
            if plans:
                remove_created_folders(self.workdir, created_folders(state, seq))
            self._publish(session_id, "done", len(restored), len(restored))
            return RestoreResult(
                restored_files=tuple(restored),
                conversation_restored=conversation,
                branch=intent.branch,
            )

    def undo(
        self, session_id: str, branch: str | None = None, *, cancel: CancelToken | None = None
    ) -> RestoreResult:
        """Bring back ``branch`` (default: the newest one that can be brought back now,
        preferring those a restore made over those an undo made): its events and its files as
        they were before that operation. Refuses (:class:`RestoreRefusedError`, changing
        nothing) when the session moved on since, or a file is no longer as the operation
        left it; :class:`NoBranchError` when there is no such branch."""
        with self._hold(session_id, "an undo") as lease:
            events, state, generation = self._read(session_id)
            self._idle(session_id, state)
            chosen = self._choose(session_id, events, branch)
            header, bodies = read_branch(self.checkpointer, chosen.id)
            problems = self._undo_problems(header.files)
            if problems:
                raise RestoreRefusedError(problems, "undo")
            if cancel is not None:
                cancel.raise_if_cancelled()
            self._publish(session_id, "start", 0, len(header.files))
            records = tuple(
                RestoreFile(
                    path=f.path,
                    target=f.backup,
                    target_hash=f.backup_hash,
                    backup=f.target,
                    backup_hash=f.target_hash,
                    target_mode=f.backup_mode,
                    backup_mode=f.target_mode,
                )
                for f in header.files
            )
            head = state.head
            new = new_branch_id(session_id)
            tail: list[Any] = []
            if header.conversation and bodies:  # bring the events back after the log
                tail = bodies
                to_seq = head + len(bodies) + 1
                intent = RestoreStarted(
                    to_seq=to_seq,
                    conversation=True,
                    files=records,
                    branch=new,
                    undo_of=chosen.id,
                    rollback_to=head,
                )
                conclude_to: int | None = to_seq - 1
            else:  # take the events an undo brought back away again, or files only
                intent = RestoreStarted(
                    to_seq=header.at_seq,
                    conversation=header.conversation,
                    files=records,
                    branch=new,
                    undo_of=chosen.id,
                )
                conclude_to = header.at_seq - 1 if header.conversation else None
            restored = self._switch(session_id, lease).run(
                events, generation, intent, tail=tail, conclude_to=conclude_to, cancel=cancel
            )
            self._publish(session_id, "done", len(restored), len(restored))
            return RestoreResult(
                restored_files=tuple(restored),
                conversation_restored=header.conversation,
                branch=new,
            )

    def _choose(self, session_id: str, events: list[StoredEvent], wanted: str | None) -> Branch:
        branches = list_branches(self.checkpointer, session_id, events, None)
        if wanted is not None:
            match = [b for b in branches if b.id == wanted]
            if not match:
                raise NoBranchError(f"session {session_id!r} has no branch {wanted!r}")
            chosen = match[0]
        else:
            ready = [b for b in branches if b.available]
            if not branches:
                raise NoBranchError(
                    f"session {session_id!r} has no branch to bring back (no restore took "
                    "anything away, or it was brought back already)"
                )
            if not ready:
                newest = branches[-1]
                raise RestoreRefusedError([("", f"branch {newest.id}: {newest.reason}")], "undo")
            by_restore = [b for b in ready if b.made_by == "restore"]
            chosen = (by_restore or ready)[-1]
        if not chosen.available:
            raise RestoreRefusedError([("", f"branch {chosen.id}: {chosen.reason}")], "undo")
        return chosen

    def _undo_problems(self, files: Sequence[RestoreFile]) -> list[tuple[str, str]]:
        blobs = self.checkpointer.blobs
        problems = []
        removing = frozenset(f.path for f in files if f.backup is None)
        for f in files:
            unsafe = unsafe_path(self.workdir, f.path, removing)
            if unsafe:
                problems.append((f.path, unsafe))
                continue
            if f.backup is not None:
                try:
                    blobs.get(f.backup)
                except LiteAgentError as e:
                    problems.append(
                        (f.path, f"its content before the restore ({f.backup}) cannot be read: {e}")
                    )
                    continue
            try:
                now = current_hash(self.workdir / f.path)
            except OSError as e:
                problems.append((f.path, unreadable(e)))
                continue
            if now != f.target_hash:
                what = "deleted" if now is None else "changed"
                problems.append(
                    (
                        f.path,
                        f"it was {what} since the restore put it back "
                        "(by the user, a shell command, the agent or another session)",
                    )
                )
        return problems

    def fork(self, session_id: str, seq: int, new_id: str, *, workdir: Path | None = None) -> str:
        """Fork ``session_id`` before its checkpoint ``seq`` into ``new_id`` (see
        :func:`._fork.fork_session`)."""
        events, state, _ = self._read_settled(session_id)
        self._idle(session_id, state)
        self._checkpoint(session_id, state, seq)
        if workdir is not None and workdir.resolve() == self.workdir.resolve():
            workdir = None  # the same workspace: shared, as by default
        return fork_session(
            self.checkpointer, session_id, events, state, seq=seq, new_id=new_id, workdir=workdir
        )

    def finish(self, session_id: str) -> RestoreResult:
        """Finish an interrupted restore (or undo): its branch, every file to its target
        again, then the log. Raises CheckpointConflictError when the log moved on since."""
        with self._hold(session_id) as lease:
            events, state, generation = self._read(session_id)
            if state.pending_restore is None:
                raise InvalidCheckpointError(f"session {session_id!r} has no interrupted restore")
            intent_seq, intent = state.pending_restore
            self._settle_problems(intent.files, "finish_restore")
            restored = self._switch(session_id, lease).finish(
                events, generation, intent_seq, intent
            )
            if intent.files and intent.undo_of is None:  # a restore: as restore() ends
                remove_created_folders(self.workdir, created_folders(state, intent.to_seq))
            return RestoreResult(
                restored_files=tuple(restored),
                conversation_restored=intent.conversation,
                branch=intent.branch,
            )

    def rollback(self, session_id: str) -> list[str]:
        """Roll an interrupted restore (or undo) back: every file returns to its backup."""
        with self._hold(session_id) as lease:
            state, _ = self._fold(session_id)
            if state.pending_restore is None:
                raise InvalidCheckpointError(f"session {session_id!r} has no interrupted restore")
            intent_seq, intent = state.pending_restore
            self._settle_problems(intent.files, "rollback_restore")
            return self._switch(session_id, lease).rollback(intent_seq, intent)

    def _settle_problems(self, files: Sequence[RestoreFile], operation: str) -> None:
        """Refuse (naming each file, changing nothing) to settle an interrupted operation over a
        file someone changed since: one that holds neither what the operation puts there nor
        what it found there (an absent file is fine: putting one there destroys nothing), or
        whose path is no longer safe (a symlink swapped in)."""
        problems = []
        for f in files:
            unsafe = unsafe_path(self.workdir, f.path)
            if unsafe:
                problems.append((f.path, unsafe))
                continue
            try:
                now = current_hash(self.workdir / f.path)
            except OSError as e:
                problems.append((f.path, unreadable(e)))
                continue
            if now is not None and now not in (f.target_hash, f.backup_hash):
                problems.append(
                    (
                        f.path,
                        "it was changed after the operation was interrupted (by the user, a "
                        "shell command or another session); move it away, and "
                        f"{operation}() puts it as it should be",
                    )
                )
        if problems:
            raise RestoreRefusedError(problems, operation)
