"""LiteAgent (blocking) and AsyncLiteAgent (asyncio): the same agent, two shells.

Both only wait: a turn runs on its session's actor thread, and its result arrives through a
``concurrent.futures.Future`` — ``future.result()`` for the blocking API, ``await
asyncio.wrap_future(future)`` for asyncio, so an event loop is never blocked and no executor
thread is parked per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

from liteagent.actors import (
    BackgroundTask,
    Checkpoint,
    CompactionProgress,
    CompactStats,
    LiveEvent,
    RestoreResult,
    Subscription,
    TurnResult,
)
from liteagent.eventlog import CancelToken, RestoreStarted, SessionInfo

from ._core import AgentCore, new_session_id

__all__ = ["AsyncLiteAgent", "LiteAgent", "LiteAgentResult"]

LiteAgentResult = TurnResult
"""What ``send`` returns: ``text`` (the model's last text), the new ``messages``, ``usage``,
``stop_reason`` and the ``session_id``."""


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
        model ends its turn. Raises :class:`AgentBusyError` if that session is already running,
        a :class:`ProviderError` or :class:`OperationCancelledError` when the turn stops early
        (the log records it and the next ``send`` continues), and
        :class:`CheckpointConflictError` if another process advanced the session."""
        self._core.check_open()
        token = cancel or CancelToken()
        sid = self._core.session_for(session_id)
        self._core.turn_started(sid)
        try:
            env = self._core.host.send(sid, input, token)
            try:
                result: LiteAgentResult = env.reply.result()
            except KeyboardInterrupt:
                token.cancel("interrupted")
                env.reply.exception()  # wait for the turn to record its abort
                raise
        finally:
            self._core.turn_finished(sid)
        return result

    def resume(self, session_id: str) -> None:
        """Make ``session_id`` the current session (an unknown id starts empty)."""
        self._core.require_sessions("resume")
        self._core.session_id = self._core.session_for(session_id)

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
        sid = self._core.session_for(session_id)
        self._core.host.forget(sid)
        self._core.checkpointer.delete(sid)
        if sid == self._core.session_id:
            self._core.session_id = new_session_id()

    # -- time travel ------------------------------------------------------------------------------

    def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """The session's checkpoints (one per user prompt), oldest first, with the files a
        restore to each would put back and those it cannot."""
        self._core.check_open()
        return self._core.restorer.list_checkpoints(self._core.session_for(session_id))

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
        sid = self._core.session_for(session_id)
        result = self._core.restorer.restore(sid, seq, files=files, conversation=conversation,
                                             cancel=cancel)
        self._core.session_id = sid
        return result

    def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """The session's interrupted restore (its intent record), or None."""
        self._core.check_open()
        return self._core.restorer.pending(self._core.session_for(session_id))

    def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Complete an interrupted restore (files to their targets, then the log)."""
        self._core.check_open()
        return self._core.restorer.finish(self._core.session_for(session_id))

    def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Undo an interrupted restore: every file goes back to how it was before it."""
        self._core.check_open()
        return self._core.restorer.rollback(self._core.session_for(session_id))

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
        return self._core.compaction.compact(self._core.session_id, instructions, cancel)

    def iter_compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactIterator:
        """Like :meth:`compact`, yielding its :class:`CompactionProgress` events as they happen;
        the stats are on the iterator's ``stats`` once it is exhausted."""
        self._core.check_open()
        return CompactIterator(self._core, instructions, cancel)

    # -- events -----------------------------------------------------------------------------------

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """Live events of every session of this agent: an iterator (and context manager) with a
        buffer of ``maxsize``; a slow subscriber misses events and is told how many."""
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
        self._future = _OFF_LOOP.submit(core.compaction.compact, self._sid, instructions, cancel)

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


class AsyncLiteAgent:
    """The asyncio form of :class:`LiteAgent`: the same methods, as coroutines."""

    def __init__(self, core: AgentCore) -> None:
        self._core = core
        self._sync = LiteAgent(core)

    @property
    def session_id(self) -> str:
        """The current session's id."""
        return self._core.session_id

    async def send(
        self,
        input: str,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> LiteAgentResult:
        """Like :meth:`LiteAgent.send`; cancelling the awaiting task cancels the turn."""
        self._core.check_open()
        token = cancel or CancelToken()
        sid = self._core.session_for(session_id)
        self._core.turn_started(sid)
        try:
            # Starting a session's actor starts a thread: do that off the event loop.
            env = await _off_loop(self._core.host.send, sid, input, token)
            result: LiteAgentResult = await asyncio.wrap_future(env.reply)
        except asyncio.CancelledError:
            token.cancel("the awaiting task was cancelled")
            raise
        finally:
            self._core.turn_finished(sid)
        return result

    async def resume(self, session_id: str) -> None:
        """Like :meth:`LiteAgent.resume`."""
        self._sync.resume(session_id)

    async def clear(self) -> str:
        """Like :meth:`LiteAgent.clear`."""
        return self._sync.clear()

    async def list_sessions(self) -> list[SessionInfo]:
        """Like :meth:`LiteAgent.list_sessions` (the storage read runs off the event loop)."""
        sessions: list[SessionInfo] = await _off_loop(self._sync.list_sessions)
        return sessions

    async def delete_session(self, session_id: str) -> None:
        """Like :meth:`LiteAgent.delete_session`."""
        await _off_loop(self._sync.delete_session, session_id)

    async def compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactStats:
        """Like :meth:`LiteAgent.compact` (the work runs off the event loop)."""
        token = cancel or CancelToken()
        try:
            result: CompactStats = await _off_loop(
                lambda: self._sync.compact(instructions, cancel=token))
        except asyncio.CancelledError:
            token.cancel("the awaiting task was cancelled")
            raise
        return result

    async def iter_compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> AsyncIterator[CompactionProgress]:
        """Like :meth:`LiteAgent.iter_compact`, as an async iterator."""
        self._core.check_open()
        sid = self._core.session_id
        with self._core.hub.subscribe(4096) as sub:
            task = asyncio.ensure_future(self.compact(instructions, cancel=cancel))
            while True:
                item = sub.get(0)
                if item is None:
                    if task.done():
                        break
                    await asyncio.sleep(0.01)
                    continue
                if isinstance(item, LiveEvent) and item.session_id == sid and isinstance(
                    item.event, CompactionProgress
                ):
                    yield item.event
            await task

    async def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """Like :meth:`LiteAgent.list_checkpoints`."""
        result: list[Checkpoint] = await _off_loop(self._sync.list_checkpoints, session_id)
        return result

    async def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
    ) -> RestoreResult:
        """Like :meth:`LiteAgent.restore` (the work runs off the event loop)."""
        result: RestoreResult = await _off_loop(
            lambda: self._sync.restore(session_id, seq, files=files, conversation=conversation,
                                       cancel=cancel))
        return result

    async def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """Like :meth:`LiteAgent.pending_restore`."""
        result: RestoreStarted | None = await _off_loop(self._sync.pending_restore, session_id)
        return result

    async def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Like :meth:`LiteAgent.finish_restore`."""
        result: RestoreResult = await _off_loop(self._sync.finish_restore, session_id)
        return result

    async def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Like :meth:`LiteAgent.rollback_restore`."""
        result: list[str] = await _off_loop(self._sync.rollback_restore, session_id)
        return result

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """Like :meth:`LiteAgent.subscribe` (iterate it in a thread, or poll ``get(0)``)."""
        return self._sync.subscribe(maxsize)

    async def background_tasks(self) -> list[BackgroundTask]:
        """Like :meth:`LiteAgent.background_tasks`."""
        return self._sync.background_tasks()

    async def close(self) -> None:
        """Like :meth:`LiteAgent.close` (stopping actors runs off the event loop)."""
        await _off_loop(self._core.close)

    async def __aenter__(self) -> AsyncLiteAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


_OFF_LOOP = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="liteagent")


async def _off_loop(fn: Any, *args: Any) -> Any:
    """Run a short blocking call on liteagent's own small pool (not the loop's default
    executor, which DNS lookups and HTTP clients need)."""
    return await asyncio.wrap_future(_OFF_LOOP.submit(fn, *args))
