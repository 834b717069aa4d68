"""AsyncLiteAgent: the asyncio shell of :class:`LiteAgent`.

Nothing it does on the event loop waits on a lock held across slow work, starts a thread, syncs
a file or folds a log: a send is posted to the session host's dispatcher and its future awaited;
storage reads, restores and compactions run on liteagent's own small pool. Cancelling the task
awaiting a method cancels its work (see :class:`AsyncLiteAgent`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator
from functools import partial
from types import TracebackType
from typing import Any

from liteagent.actors import (
    BackgroundTask,
    Checkpoint,
    CompactionProgress,
    CompactStats,
    HostStats,
    LiveEvent,
    RestoreResult,
    Subscription,
)
from liteagent.actors._reply import Reply
from liteagent.eventlog import (
    CancelToken,
    LiteAgentError,
    RestoreStarted,
    SessionInfo,
    validate_session_id,
)

from ._agent import OFF_LOOP, SETTLE_TIMEOUT, LiteAgent, LiteAgentResult, send_args
from ._core import AgentCore
from ._validate import check_bool, check_cancel, check_seq, check_session_id, check_text

__all__ = ["AsyncLiteAgent"]


class AsyncLiteAgent:
    """The asyncio form of :class:`LiteAgent`: the same methods, as coroutines (``subscribe``,
    ``host_stats`` and ``session_id`` excepted: they never block).

    Cancelling the awaiting task cancels the work: ``send``, ``compact`` and ``restore`` cancel
    their token and wait until the work has stopped; the other methods are skipped if they have
    not started, and otherwise finish in the background, because they cannot stop half-way:
    ``delete_session`` is one storage delete, ``finish_restore`` and ``rollback_restore`` are
    the recovery of an interrupted restore (stopping them would leave it interrupted), and the
    reads (``list_sessions``, ``list_checkpoints``, ``pending_restore``) change nothing.
    """

    def __init__(self, core: AgentCore) -> None:
        self._core = core
        self._sync = LiteAgent(core)

    @property
    def session_id(self) -> str:
        """The current session's id."""
        return self._core.session_id

    def _cancel(self, token: CancelToken) -> None:
        """Fire ``token`` off the loop (its callbacks may close sockets)."""
        try:
            self._core.host.call_soon(partial(token.cancel, "the awaiting task was cancelled"))
        except LiteAgentError:  # the agent is closed: nothing runs any more
            token.cancel("the awaiting task was cancelled")

    async def _await(self, future: concurrent.futures.Future[Any],
                     token: CancelToken | None = None) -> Any:
        """Await ``future`` of liteagent's pool; on cancellation cancel the work (see the class
        docstring): one loop future and one thread-safe wake-up per call (``wrap_future`` plus
        ``shield`` cost several times that on the loop)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        future.add_done_callback(partial(_wake, loop, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            future.cancel()  # a job that has not started never starts
            inner = asyncio.wrap_future(future)
            if token is not None:
                self._cancel(token)
                if not future.done():
                    await asyncio.wait({inner}, timeout=SETTLE_TIMEOUT)
            inner.add_done_callback(_retrieve)
            raise

    async def send(
        self,
        input: str,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> LiteAgentResult:
        """Like :meth:`LiteAgent.send` (a send waiting for a slot is awaited, not blocked on);
        cancelling the awaiting task cancels the turn, or takes a waiting send out of the queue
        (nothing recorded), and returns once the session is settled."""
        self._core.check_open()
        text, token, sid = send_args(self._core, input, session_id, cancel)
        self._core.turn_started(sid)
        try:
            reply = self._core.host.send(sid, text, token)  # never blocks: the host posts it
            result: LiteAgentResult = await _await_reply(reply)
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
        self._core.require_sessions("list_sessions")
        sessions: list[SessionInfo] = await self._await(OFF_LOOP.submit(self._sync.list_sessions))
        return sessions

    async def delete_session(self, session_id: str) -> None:
        """Like :meth:`LiteAgent.delete_session` (off the event loop)."""
        self._core.require_sessions("delete_session")
        validate_session_id(session_id)
        await self._await(OFF_LOOP.submit(self._sync.delete_session, session_id))

    def host_stats(self) -> HostStats:
        """Like :meth:`LiteAgent.host_stats` (a plain method: it never blocks)."""
        return self._sync.host_stats()

    async def compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactStats:
        """Like :meth:`LiteAgent.compact` (the work runs off the event loop)."""
        self._core.check_open()
        check_text(instructions, "instructions", optional=True)
        token = check_cancel(cancel) or CancelToken()
        result: CompactStats = await self._await(
            OFF_LOOP.submit(self._sync.compact, instructions, cancel=token), token)
        return result

    async def iter_compact(
        self, instructions: str | None = None, *, cancel: CancelToken | None = None
    ) -> AsyncIterator[CompactionProgress]:
        """Like :meth:`LiteAgent.iter_compact`, as an async iterator."""
        self._core.check_open()
        check_text(instructions, "instructions", optional=True)
        check_cancel(cancel)
        sid = self._core.session_id
        with self._core.hub.subscribe(4096) as sub:
            task = asyncio.ensure_future(self.compact(instructions, cancel=cancel))
            try:
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
            finally:
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task}, timeout=SETTLE_TIMEOUT)
            await task

    async def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """Like :meth:`LiteAgent.list_checkpoints` (off the event loop)."""
        self._core.check_open()
        check_session_id(session_id)
        result: list[Checkpoint] = await self._await(
            OFF_LOOP.submit(self._sync.list_checkpoints, session_id))
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
        """Like :meth:`LiteAgent.restore` (off the event loop); cancelling the awaiting task
        cancels the restore, which puts back what it changed."""
        self._core.check_open()
        validate_session_id(session_id)
        check_seq(seq)
        check_bool(files, "files")
        check_bool(conversation, "conversation")
        token = check_cancel(cancel) or CancelToken()
        result: RestoreResult = await self._await(OFF_LOOP.submit(
            partial(self._sync.restore, session_id, seq, files=files, conversation=conversation,
                    cancel=token)), token)
        return result

    async def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """Like :meth:`LiteAgent.pending_restore` (off the event loop)."""
        self._core.check_open()
        check_session_id(session_id)
        result: RestoreStarted | None = await self._await(
            OFF_LOOP.submit(self._sync.pending_restore, session_id))
        return result

    async def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Like :meth:`LiteAgent.finish_restore` (off the event loop; once started it is not
        stopped by a cancellation, see the class docstring)."""
        self._core.check_open()
        check_session_id(session_id)
        result: RestoreResult = await self._await(
            OFF_LOOP.submit(self._sync.finish_restore, session_id))
        return result

    async def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Like :meth:`LiteAgent.rollback_restore` (off the event loop; once started it is not
        stopped by a cancellation, see the class docstring)."""
        self._core.check_open()
        check_session_id(session_id)
        result: list[str] = await self._await(
            OFF_LOOP.submit(self._sync.rollback_restore, session_id))
        return result

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """Like :meth:`LiteAgent.subscribe` (iterate it in a thread, or poll ``get(0)``)."""
        return self._sync.subscribe(maxsize)

    async def background_tasks(self) -> list[BackgroundTask]:
        """Like :meth:`LiteAgent.background_tasks`."""
        return self._sync.background_tasks()

    async def close(self) -> None:
        """Like :meth:`LiteAgent.close` (stopping actors runs off the event loop)."""
        await asyncio.wrap_future(OFF_LOOP.submit(self._core.close))

    async def __aenter__(self) -> AsyncLiteAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def _await_reply(reply: Reply) -> Any:
    """Await a send's reply; when the awaiting task is cancelled, interrupt the send (out of
    the queue, or its turn cancelled) and wait, bounded, until it has settled. One loop future
    and one thread-safe wake-up: the loop's share of a send stays small when thousands start
    at once."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    reply.add_done_callback(partial(_wake, loop, waiter))
    try:
        return await waiter
    except asyncio.CancelledError:
        reply.interrupt("the awaiting task was cancelled")  # posted to the host's thread
        if not reply.done():
            settled: asyncio.Future[Any] = loop.create_future()
            reply.add_done_callback(partial(_wake, loop, settled))
            await asyncio.wait({settled}, timeout=SETTLE_TIMEOUT)
            settled.add_done_callback(_retrieve)
        raise


def _wake(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[Any],
          future: concurrent.futures.Future[Any] | Reply) -> None:
    """In the thread that completed ``future``: hand its outcome to ``waiter`` on the loop."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, waiter, future)


def _settle(waiter: asyncio.Future[Any], future: concurrent.futures.Future[Any] | Reply
            ) -> None:
    if waiter.done():  # the awaiting task was cancelled
        return
    if future.cancelled():
        waiter.cancel()
    elif (error := future.exception()) is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(future.result())


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a late outcome as seen (nobody awaits it any more)."""
    if not future.cancelled():
        future.exception()
