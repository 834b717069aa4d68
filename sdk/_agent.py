"""LiteAgent (blocking) and AsyncLiteAgent (asyncio): the same agent, two shells.

Both only wait: a turn runs on its session's actor thread, and its result arrives through a
``concurrent.futures.Future`` — ``future.result()`` for the blocking API, ``await
asyncio.wrap_future(future)`` for asyncio, so an event loop is never blocked and no executor
thread is parked per call. Starting actors, passivating them and queueing sends happen on the
session host's dispatcher thread; other blocking work (storage reads, restores, compactions)
runs on a small pool of liteagent's own.

Every argument is checked before anything is written (:class:`InvalidArgumentError`).
Cancelling the task awaiting an async method cancels its work: a job that has not started never
starts, and ``send``, ``compact`` and ``restore`` cancel their token and wait (bounded) until the
work has stopped and recorded how it ended, so the session is settled when ``CancelledError``
arrives.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from liteagent.actors import (
    BackgroundTask,
    Checkpoint,
    CompactionProgress,
    CompactStats,
    HostStats,
    LiveEvent,
    RestoreResult,
    Subscription,
    TurnResult,
)
from liteagent.eventlog import (
    CancelToken,
    RestoreStarted,
    SessionInfo,
    validate_session_id,
)

from ._core import AgentCore, new_session_id
from ._validate import (
    check_bool,
    check_cancel,
    check_prompt,
    check_seq,
    check_session_id,
    check_text,
)

if TYPE_CHECKING:
    from liteagent.actors._reply import Reply

__all__ = ["OFF_LOOP", "SETTLE_TIMEOUT", "CompactIterator", "LiteAgent", "LiteAgentResult",
           "send_args"]

LiteAgentResult = TurnResult
"""What ``send`` returns: ``text`` (the model's last text), the new ``messages``, ``usage``,
``stop_reason`` and the ``session_id``."""


SETTLE_TIMEOUT = 60.0  # how long a cancelled call waits for its work to stop
OFF_LOOP = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="liteagent")
"""liteagent's own small pool for blocking work of the asyncio shell (not the loop's default
executor, which DNS lookups and HTTP clients need)."""


def send_args(
    core: AgentCore, input: object, session_id: object, cancel: object
) -> tuple[str, CancelToken | None, str]:
    """The checked prompt, the caller's cancel token (``None``: the turn makes its own when it
    starts) and the session of a ``send``."""
    text = check_prompt(input)
    return text, check_cancel(cancel), core.session_for(check_session_id(session_id))


def _settle(reply: Reply) -> None:
    """Wait (bounded) for cancelled work to finish recording how it ended."""
    with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
        reply.exception(SETTLE_TIMEOUT)


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
                _settle(reply)  # wait for the turn to record its abort
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
        """Every stored session, most recently active first."""
        self._core.require_sessions("list_sessions")
        return self._core.checkpointer.list()

    def delete_session(self, session_id: str) -> None:
        """Delete a stored session (refused while it runs or has background tasks)."""
        self._core.require_sessions("delete_session")
        sid = self._core.session_for(validate_session_id(session_id))
        self._core.host.delete(sid)
        if sid == self._core.session_id:
            self._core.session_id = new_session_id()

    def host_stats(self) -> HostStats:
        """The load of the session host, for metrics: live, running and stopping sessions,
        queued sends, and the bounds (never blocks)."""
        self._core.check_open()
        return self._core.host.stats()

    # -- time travel ------------------------------------------------------------------------------

    def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """The session's checkpoints (one per user prompt), oldest first, with the files a
        restore to each would put back and those it cannot."""
        self._core.check_open()
        sid = self._core.session_for(check_session_id(session_id))
        return self._core.restorer.list_checkpoints(sid)

    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
    ) -> RestoreResult:
        """Restore the session to the checkpoint at ``seq``: the conversation as it was before
        that prompt (the log is truncated to ``seq - 1``) and every file the agent's file tools
        changed since. It refuses, changing nothing, when that is unsafe
        (:class:`RestoreRefusedError` names each file and why), and puts files back as they
        were if anything fails. Afterwards the current session is ``session_id``. Shell
        commands, custom tools and external services are not undone."""
        self._core.check_open()
        sid = self._core.session_for(validate_session_id(session_id))
        check_seq(seq)
        check_bool(files, "files")
        check_bool(conversation, "conversation")
        token = check_cancel(cancel)
        result = self._core.restorer.restore(sid, seq, files=files, conversation=conversation,
                                             cancel=token)
        self._core.session_id = sid
        return result

    def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """The session's interrupted restore (its intent record), or None."""
        self._core.check_open()
        return self._core.restorer.pending(self._core.session_for(check_session_id(session_id)))

    def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Complete an interrupted restore (files to their targets, then the log)."""
        self._core.check_open()
        return self._core.restorer.finish(self._core.session_for(check_session_id(session_id)))

    def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Undo an interrupted restore: every file goes back to how it was before it."""
        self._core.check_open()
        return self._core.restorer.rollback(
            self._core.session_for(check_session_id(session_id)))

    # -- compaction -------------------------------------------------------------------------------

    def compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactStats:
        """Compact the current session's context now with the agent's compactor.

        The session must be idle (it is held for maintenance meanwhile). The result is recorded
        as a compaction event that later requests use; the original events stay in the log.
        ``instructions`` steer a summarizing compactor. Cancelling leaves the session exactly as
        it was. Subscribers see ``compaction`` live events (:class:`CompactionProgress`).
        """
        self._core.check_open()
        check_text(instructions, "instructions", optional=True)
        token = check_cancel(cancel)
        return self._core.compaction.compact(self._core.session_id, instructions, token)

    def iter_compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactIterator:
        """Like :meth:`compact`, yielding its :class:`CompactionProgress` events as they happen;
        the stats are on the iterator's ``stats`` once it is exhausted."""
        self._core.check_open()
        check_text(instructions, "instructions", optional=True)
        token = check_cancel(cancel)
        return CompactIterator(self._core, instructions, token)

    # -- events -----------------------------------------------------------------------------------

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """Live events of every session of this agent: an iterator (and context manager) with a
        buffer of ``maxsize`` (an int >= 1); a slow subscriber misses events and is told how
        many."""
        self._core.check_open()
        return self._core.hub.subscribe(maxsize)

    def background_tasks(self) -> list[BackgroundTask]:
        """The background tasks still running."""
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


class CompactIterator:
    """Runs a compaction in a thread and yields its progress events (see ``iter_compact``)."""

    def __init__(self, core: AgentCore, instructions: str | None,
                 cancel: CancelToken | None) -> None:
        self.stats: CompactStats | None = None
        self._core = core
        self._sid = core.session_id
        self._sub = core.hub.subscribe(4096)
        self._future = OFF_LOOP.submit(core.compaction.compact, self._sid, instructions, cancel)

    def __iter__(self) -> Iterator[CompactionProgress]:
        try:
            while True:
                item = self._sub.get(0.05)
                if isinstance(item, LiveEvent) and item.session_id == self._sid and isinstance(
                    item.event, CompactionProgress
                ):
                    yield item.event
                    if item.event.phase in ("done", "error", "cancelled"):
                        break
                elif item is None and self._future.done():
                    break
            self.stats = self._future.result()
        finally:
            self._sub.close()
