"""LiteAgent (blocking) and AsyncLiteAgent (asyncio): the same agent, two shells.

Both only wait: a turn runs on its session's actor thread, and its result arrives through a
``concurrent.futures.Future`` — ``future.result()`` for the blocking API, ``await`` on a loop
future woken by the thread that completes it for asyncio, so an event loop is never blocked and
no executor thread is parked per call. Starting actors, passivating them and queueing sends
happen on the session host's dispatcher thread; other blocking work of the asyncio shell
(storage reads, restores, compactions) and the compaction behind ``iter_compact`` run on the
agent's own small pool (4 threads, named after the agent), which ``close()`` stops.

Every method that takes a session (``session_id=``, or the id a restore names) works on it
without a prior ``resume()`` and leaves the current session as it is, so a daemon serves any
number of sessions from one agent; only ``resume``, ``clear`` and deleting the current session
change it.

Every argument is checked before anything is written (:class:`InvalidArgumentError`).
Cancelling the task awaiting an async method cancels its work: a job that has not started never
starts, and ``send``, ``compact`` and ``restore`` cancel their token and wait (bounded) until the
work has stopped and recorded how it ended, so the session is settled when ``CancelledError``
arrives.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import TracebackType
from typing import Literal, overload

import msgspec

from liteagent.actors._branches import Branch
from liteagent.actors._compactor import CompactStats
from liteagent.actors._host import HostStats
from liteagent.actors._hub import Subscription
from liteagent.actors._preview import RestorePreview
from liteagent.actors._restore import RestoreResult
from liteagent.actors._restore_plan import Checkpoint
from liteagent.actors._session import BackgroundTask
from liteagent.actors._turn import LiteAgentResult
from liteagent.eventlog import CancelToken, GarbageReport, SessionInfo, validate_session_id
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog._gc import DEFAULT_GRACE
from liteagent.eventlog._ids import SESSION_ID_PATTERN
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidSessionIdError
from liteagent.eventlog.types import RestoreStarted

from ._compact_iter import CompactIterator
from ._core import AgentCore, new_session_id
from ._futures import settle
from ._travel_args import fork_args, gc_args, undo_args
from ._validate import (
    check_bool,
    check_cancel,
    check_prompt,
    check_seq,
    check_session_id,
    check_text,
    exact_str,
)

__all__ = [
    "LiteAgent",
    "LiteAgentResult",
    "checked_undo_args",
    "compact_args",
    "send_args",
]

_BRANCH_ID = re.compile(SESSION_ID_PATTERN)


def send_args(
    core: AgentCore, input: object, session_id: object, cancel: object
) -> tuple[str, CancelToken | None, str]:
    """The checked prompt, the caller's cancel token (``None``: the turn makes its own when it
    starts) and the session of a ``send``."""
    text = exact_str(check_prompt(input))
    return text, check_cancel(cancel), core.session_for(check_session_id(session_id))


def checked_undo_args(
    core: AgentCore, session_id: object, branch: object, cancel: object
) -> tuple[str, str | None, CancelToken | None]:
    """The checked session, branch id and cancel token of an ``undo_restore``; a ``branch``
    that cannot be one is refused naming ``branch`` (not as a bad session id)."""
    core.check_open()
    if branch is not None and (type(branch) is not str or not _BRANCH_ID.fullmatch(branch)):
        raise InvalidSessionIdError(
            branch,
            f"branch must be None or the id of one of list_branches(), got {shown(branch)}",
        )
    return undo_args(core, session_id, branch, cancel)


def compact_args(
    core: AgentCore, instructions: object, session_id: object, cancel: object
) -> tuple[str | None, str, CancelToken | None]:
    """The checked instructions, session and cancel token of a ``compact``."""
    core.check_open()
    checked = check_text(instructions, "instructions", optional=True)
    # blank instructions say nothing: the compaction runs as without them
    text = None if checked is None or not checked.strip() else exact_str(checked)
    sid = core.session_for(check_session_id(session_id), "compact")
    return text, sid, check_cancel(cancel)


class LiteAgent:
    """A coding agent whose sessions are event-sourced logs (see :func:`create_lite_agent`).

    ``send`` runs one prompt to the end of the model's turn. Sessions survive restarts: a new
    agent on the same checkpointer can ``resume(id)`` and continue with the whole conversation.
    """

    def __init__(self, core: AgentCore) -> None:
        self._core = core

    @property
    def session_id(self) -> str:
        """The current session's id."""
        return self._core.session_id

    def send(
        self,
        input: str,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> LiteAgentResult:
        """Run ``input`` as a user prompt in the current session (or ``session_id``) until the
        model ends its turn. An empty or whitespace-only prompt, or anything but a string, is
        refused with :class:`InvalidArgumentError` (nothing is recorded). When every
        ``max_live_sessions`` slot is running a turn, the send waits for one in FIFO order
        (``cancel`` ends the wait, recording nothing); :class:`HostSaturatedError` when
        ``max_queued_sends`` already wait. Raises :class:`AgentBusyError` if that session is
        already running, a :class:`ProviderError` or :class:`OperationCancelledError` when the
        turn stops early (the log records it and the next ``send`` continues), and
        :class:`CheckpointConflictError` if another process advanced the session."""
        self._core.check_open()
        text, token, sid = send_args(self._core, input, session_id, cancel)
        self._core.turn_started(sid)
        try:
            reply = self._core.host.send(sid, text, token)
            try:
                result: LiteAgentResult = reply.result()
            except KeyboardInterrupt:
                reply.interrupt("interrupted")  # out of the queue, or the turn cancelled
                settle(reply)  # wait for the turn to record its abort
                raise
        finally:
            self._core.turn_finished(sid)
        return result

    def resume(self, session_id: str) -> None:
        """Make ``session_id`` the current session (an unknown id starts empty)."""
        self._core.require_sessions("resume")
        self._core.session_id = self._core.session_for(validate_session_id(session_id))

    def clear(self) -> str:
        """Start a new, empty session and return its id; the old transcript stays stored."""
        self._core.check_open()
        self._core.session_id = new_session_id()
        return self._core.session_id

    def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, most recently active first (branch sessions, which keep what
        restores took away, are not listed: see :meth:`list_branches`)."""
        self._core.require_sessions("list_sessions")
        return [s for s in self._core.checkpointer.list() if not is_branch_session(s.id)]

    def delete_session(self, session_id: str) -> None:
        """Delete a stored session (refused while it runs or has background tasks) and its
        branches; :meth:`collect_garbage` then reclaims the blobs only they referenced.
        Deleting the current session makes a new, empty one current (as :meth:`clear`);
        deleting another leaves the current one as it is."""
        self._core.require_sessions("delete_session")
        sid = self._core.session_for(validate_session_id(session_id))
        self._core.delete_session(sid)
        if sid == self._core.session_id:
            self._core.session_id = new_session_id()

    def host_stats(self) -> HostStats:
        """The load of the session host, for metrics: live, running and stopping sessions,
        queued sends, running and waiting operations, and the bounds (never blocks)."""
        self._core.check_open()
        running, queued = self._core.operations.load()
        return msgspec.structs.replace(
            self._core.host.stats(),
            operations=running,
            queued_operations=queued,
            max_operations=self._core.operations.limit,
        )

    # -- time travel ------------------------------------------------------------------------------

    def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """The checkpoints of the current session (or ``session_id``), one per user prompt,
        oldest first, with the files a restore to each would put back and those it cannot."""
        self._core.check_open()
        sid = self._core.session_for(check_session_id(session_id), "list_checkpoints")
        return self._core.restorer.list_checkpoints(sid)

    @overload
    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
        dry_run: Literal[False] = False,
    ) -> RestoreResult: ...

    @overload
    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
        dry_run: Literal[True],
    ) -> RestorePreview: ...

    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
        dry_run: bool = False,
    ) -> RestoreResult | RestorePreview:
        """Restore the session to the checkpoint at ``seq``: the conversation as it was before
        that prompt (the log is truncated to ``seq - 1``) and every file the agent's file tools
        changed since. It refuses, changing nothing, when that is unsafe
        (:class:`RestoreRefusedError` names each file and why), and puts files back as they
        were if anything fails. What it takes away is kept as a branch
        (``result.branch``): :meth:`undo_restore` brings it back. The current session stays as
        it is (``resume(session_id)`` to continue the restored one without naming it). Shell
        commands, custom tools and external services are not undone: ``dry_run=True`` returns
        a :class:`RestorePreview` of what it would do and of those side effects, changing
        nothing."""
        self._core.check_open()
        sid = self._core.session_for(validate_session_id(session_id), "restore")
        check_seq(seq)
        check_bool(files, "files")
        check_bool(conversation, "conversation")
        token = check_cancel(cancel)
        if check_bool(dry_run, "dry_run"):
            return self._core.restorer.preview(sid, seq, files=files, conversation=conversation)
        return self._core.restore(sid, seq, files=files, conversation=conversation, cancel=token)

    def undo_restore(
        self, session_id: str, *, branch: str | None = None, cancel: CancelToken | None = None
    ) -> RestoreResult:
        """Undo a restore of the session: bring back the events it took away and put back the
        files as they were just before it. ``branch`` picks one of :meth:`list_branches`
        (default: the newest that can be brought back, a restore's before an undo's). The same
        rules as a restore: it refuses, changing nothing, when a file was changed since the
        restore or the session moved on since (:class:`RestoreRefusedError`), and is
        crash-safe. It is itself kept as a branch, so an undo can be undone. Raises
        :class:`NoBranchError` when there is nothing to bring back."""
        sid, wanted, token = checked_undo_args(self._core, session_id, branch, cancel)
        return self._core.undo(sid, wanted, token)

    def list_branches(self, session_id: str | None = None) -> list[Branch]:
        """What :meth:`undo_restore` can bring back into the current session (or
        ``session_id``), oldest first, each saying whether it can be brought back now."""
        self._core.check_open()
        sid = self._core.session_for(check_session_id(session_id), "list_branches")
        return self._core.restorer.list_branches(sid)

    def fork(self, session_id: str, seq: int, *, workdir: str | Path | None = None) -> str:
        """Start a new session whose log is the session's events before its checkpoint
        ``seq`` (sharing their blobs), ending with a :class:`Forked` record, and return its
        id; the original is untouched and the current session stays as it is. The fork shares
        the workspace: its files are as they are now. With ``workdir`` (another folder, a
        copy of the workspace), the files the agent's file tools changed since the checkpoint
        are put back there first (refused as a restore would, naming each file not as the
        agent last left it); continue the fork with an agent on that folder."""
        sid, checked, folder = fork_args(self._core, session_id, seq, workdir)
        return self._core.fork(sid, checked, folder)

    def collect_garbage(
        self,
        *,
        grace: float = DEFAULT_GRACE,
        branch_retention: float | None = None,
        dry_run: bool = False,
        cancel: CancelToken | None = None,
    ) -> GarbageReport:
        """Remove the blobs no session or branch of the store references that were written
        more than ``grace`` seconds ago (an hour by default), after deleting the branches of
        deleted sessions, those brought back, and (``branch_retention`` seconds) older ones.
        Safe while other processes append (see :func:`liteagent.eventlog.collect_garbage`);
        ``dry_run`` changes nothing."""
        g, retention, dry, token = gc_args(self._core, grace, branch_retention, dry_run, cancel)
        return self._core.collect_garbage(g, retention, dry, token)

    def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """The interrupted restore (its intent record) of the current session (or
        ``session_id``), or None."""
        self._core.check_open()
        return self._core.restorer.pending(
            self._core.session_for(check_session_id(session_id), "pending_restore")
        )

    def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Complete the interrupted restore of the current session (or ``session_id``): files
        to their targets, then the log."""
        self._core.check_open()
        sid = self._core.session_for(check_session_id(session_id), "finish_restore")
        self._core.history_rewritten(sid)
        return self._core.restorer.finish(sid)

    def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Undo the interrupted restore of the current session (or ``session_id``): every file
        goes back to how it was before it."""
        self._core.check_open()
        return self._core.restorer.rollback(
            self._core.session_for(check_session_id(session_id), "rollback_restore")
        )

    # -- compaction -------------------------------------------------------------------------------

    def compact(
        self,
        instructions: str | None = None,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> CompactStats:
        """Compact the context of the current session (or ``session_id``, which does not become
        the current one) now, with the agent's compactor.

        The session must be idle (it is held for maintenance meanwhile). The result is recorded
        as a compaction event that later requests use; the original events stay in the log.
        ``instructions`` steer a summarizing compactor (blank ones count as none). Cancelling
        leaves the session exactly as it was. Subscribers see ``compaction`` live events
        (:class:`CompactionProgress`). Raises :class:`CompactionFailedError` when the compactor
        fails or returns a result that would break the conversation (a tool call left without
        its result, an empty message), and :class:`ContextBudgetError` when the result's first
        prompt alone is over the budget: nothing is recorded then.
        """
        text, sid, token = compact_args(self._core, instructions, session_id, cancel)
        return self._core.compact(sid, text, token)

    def iter_compact(
        self,
        instructions: str | None = None,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> CompactIterator:
        """Start :meth:`compact` on the agent's pool and return an iterator over its
        :class:`CompactionProgress` events as they happen (it waits for each, never polls);
        it ends when the compaction does, raising what :meth:`compact` would, and the stats
        are then on its ``stats``. Closing it before the end (``close()``, or leaving its
        ``with`` block) cancels the compaction and waits, bounded, until it has
        stopped."""
        text, sid, token = compact_args(self._core, instructions, session_id, cancel)
        return CompactIterator(self._core, sid, text, token)

    # -- events -----------------------------------------------------------------------------------

    def subscribe(self, maxsize: int = 1024, *, session_id: str | None = None) -> Subscription:
        """Live events of every session of this agent, or of ``session_id`` only: an iterator
        (and context manager) with a buffer of ``maxsize`` (an int >= 1); a slow subscriber
        misses events and is told how many (:class:`Missed`). It ends when closed, or when the
        agent closes."""
        self._core.check_open()
        return self._core.hub.subscribe(maxsize, session_id=session_id)

    def background_tasks(self) -> list[BackgroundTask]:
        """The background tasks still running, of every session (each names its own)."""
        self._core.check_open()
        return self._core.host.background_tasks()

    def close(self) -> None:
        """Stop every actor and background task; release the checkpointer it created."""
        self._core.close()

    def __enter__(self) -> LiteAgent:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
