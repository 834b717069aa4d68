"""AsyncLiteAgent: the asyncio shell of :class:`LiteAgent`.

Nothing it does on the event loop waits on a lock held across slow work, starts a thread, syncs a
file or folds a log: a send is posted to the session host's dispatcher and its future awaited;
storage reads run on the agent's own executor, whose threads all start with the agent (so a submit
from the loop never starts one), which hands restores, compactions and collections to the agent's
operation pool (up to ``max_operations`` at once, a thread each: reads never wait behind them), and
``close()`` runs on a thread the dispatcher starts. Live events reach the loop through
:class:`AsyncSubscription` (one thread-safe wake-up per batch, no thread per subscriber). Cancelling
the task awaiting a method cancels its work (see :class:`AsyncLiteAgent`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from liteagent.actors._branches import Branch
from liteagent.actors._compactor import CompactStats
from liteagent.actors._host import HostStats
from liteagent.actors._hub import AsyncSubscription
from liteagent.actors._preview import RestorePreview
from liteagent.actors._restore import RestoreResult
from liteagent.actors._restore_plan import Checkpoint
from liteagent.actors._session import BackgroundTask
from liteagent.eventlog import CancelToken, GarbageReport, SessionInfo, validate_session_id
from liteagent.eventlog._gc import DEFAULT_GRACE
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import RestoreStarted

from ._agent import LiteAgent, LiteAgentResult, checked_undo_args, compact_args, send_args
from ._compact_iter import AsyncCompactIterator
from ._core import _CLOSE_WAIT, AgentCore
from ._futures import await_job, await_reply, post, resolve
from ._travel_args import fork_args, gc_args
from ._validate import check_bool, check_cancel, check_seq, check_session_id

__all__ = ["AsyncLiteAgent"]


class AsyncLiteAgent:
    """The asyncio form of :class:`LiteAgent`: the same methods, as coroutines (``subscribe``,
    ``iter_compact``, ``host_stats`` and ``session_id`` excepted: they never block, and the
    first two return async iterators).

    Cancelling the awaiting task cancels the work: ``send``, ``compact``, ``restore``,
    ``undo_restore`` and ``collect_garbage`` cancel their token and wait until the work has
    stopped; the other methods are skipped if they have not started, and otherwise finish in
    the background, because they cannot stop half-way: ``delete_session`` is one storage
    delete, ``fork`` one write (after the files it puts back), ``finish_restore`` and
    ``rollback_restore`` are the recovery of an interrupted restore (stopping them would leave
    it interrupted), and the reads (``list_sessions``, ``list_checkpoints``,
    ``list_branches``, ``pending_restore``, a restore's ``dry_run``) change nothing.
    """

    def __init__(self, core: AgentCore) -> None:
        self._core = core
        self._sync = LiteAgent(core)
        try:
            core.prestart_pool()  # here, not on the loop at the first submit
        except BaseException:
            core.close()
            raise

    @property
    def session_id(self) -> str:
        """The current session's id."""
        return self._core.session_id

    async def _await(
        self, future: concurrent.futures.Future[Any], token: CancelToken | None = None
    ) -> Any:
        """Await ``future`` of the agent's pool; on cancellation cancel the work (see the class
        docstring)."""
        return await await_job(self._core, future, token)

    def _session(self, session_id: str | None, method: str) -> str:
        """The session a call names, or the current one at the time of the call."""
        self._core.check_open()
        return self._core.session_for(check_session_id(session_id), method)

    async def _run(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the agent's pool, awaited (a cancellation skips a job that
        has not started)."""
        return await self._await(self._core.submit(fn, *args, **kwargs))

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
        if self._core.turn_started(sid, wait=False):  # an idle compaction of it, cancelled
            # off the loop, never queued behind operations (a cancelled compaction's caller
            # returns at once: the wait is short)
            await self._run(self._core.settle_idle, sid)
        try:
            reply = self._core.host.send(sid, text, token)  # never blocks: the host posts it
            result: LiteAgentResult = await await_reply(reply)
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
        sessions: list[SessionInfo] = await self._run(self._sync.list_sessions)
        return sessions

    async def delete_session(self, session_id: str) -> None:
        """Like :meth:`LiteAgent.delete_session` (off the event loop)."""
        self._core.require_sessions("delete_session")
        validate_session_id(session_id)
        await self._await(self._core.submit_operation(self._sync.delete_session, session_id))

    def host_stats(self) -> HostStats:
        """Like :meth:`LiteAgent.host_stats` (a plain method: it never blocks)."""
        return self._sync.host_stats()

    async def compact(
        self,
        instructions: str | None = None,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> CompactStats:
        """Like :meth:`LiteAgent.compact` (the work runs off the event loop); cancelling the
        awaiting task cancels the compaction, which then changes nothing."""
        text, sid, given = compact_args(self._core, instructions, session_id, cancel)
        token = given or CancelToken()
        result: CompactStats = await self._await(
            self._core.submit_operation(self._core.compact, sid, text, token), token
        )
        return result

    def iter_compact(
        self,
        instructions: str | None = None,
        *,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
    ) -> AsyncCompactIterator:
        """Like :meth:`LiteAgent.iter_compact`, as an async iterator (``async for progress in
        agent.iter_compact(...)``) that waits for each event without blocking the loop;
        cancelling the iterating task, ``aclose()`` or leaving its ``async with`` block before
        the end cancels the compaction and waits, bounded, until it has stopped. A plain
        method: the compaction starts at once."""
        text, sid, token = compact_args(self._core, instructions, session_id, cancel)
        return AsyncCompactIterator(self._core, sid, text, token)

    async def list_checkpoints(self, session_id: str | None = None) -> list[Checkpoint]:
        """Like :meth:`LiteAgent.list_checkpoints` (off the event loop)."""
        sid = self._session(session_id, "list_checkpoints")  # the current one now, not later
        result: list[Checkpoint] = await self._await(
            self._core.submit(self._sync.list_checkpoints, sid)
        )
        return result

    @overload
    async def restore(
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
    async def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
        dry_run: Literal[True],
    ) -> RestorePreview: ...

    async def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool = True,
        conversation: bool = True,
        cancel: CancelToken | None = None,
        dry_run: bool = False,
    ) -> RestoreResult | RestorePreview:
        """Like :meth:`LiteAgent.restore` (off the event loop); cancelling the awaiting task
        cancels the restore, which puts back what it changed."""
        self._core.check_open()
        validate_session_id(session_id)
        check_seq(seq)
        check_bool(files, "files")
        check_bool(conversation, "conversation")
        check_bool(dry_run, "dry_run")
        token = check_cancel(cancel) or CancelToken()
        result: RestoreResult | RestorePreview = await self._await(
            self._core.submit_operation(
                partial(
                    self._sync.restore,
                    session_id,
                    seq,
                    files=files,
                    conversation=conversation,
                    cancel=token,
                    dry_run=dry_run,
                )
            ),
            token,
        )
        return result

    async def undo_restore(
        self, session_id: str, *, branch: str | None = None, cancel: CancelToken | None = None
    ) -> RestoreResult:
        """Like :meth:`LiteAgent.undo_restore` (off the event loop); cancelling the awaiting
        task cancels the undo, which puts back what it changed."""
        sid, wanted, given = checked_undo_args(self._core, session_id, branch, cancel)
        token = given or CancelToken()
        result: RestoreResult = await self._await(
            self._core.submit_operation(self._core.undo, sid, wanted, token), token
        )
        return result

    async def list_branches(self, session_id: str | None = None) -> list[Branch]:
        """Like :meth:`LiteAgent.list_branches` (off the event loop)."""
        sid = self._session(session_id, "list_branches")  # the current one now, not later
        result: list[Branch] = await self._await(self._core.submit(self._sync.list_branches, sid))
        return result

    async def fork(self, session_id: str, seq: int, *, workdir: str | Path | None = None) -> str:
        """Like :meth:`LiteAgent.fork` (off the event loop)."""
        sid, checked, folder = fork_args(self._core, session_id, seq, workdir)
        result: str = await self._await(
            self._core.submit_operation(self._core.fork, sid, checked, folder)
        )
        return result

    async def collect_garbage(
        self,
        *,
        grace: float = DEFAULT_GRACE,
        branch_retention: float | None = None,
        dry_run: bool = False,
        cancel: CancelToken | None = None,
    ) -> GarbageReport:
        """Like :meth:`LiteAgent.collect_garbage` (off the event loop); cancelling the awaiting
        task stops it between steps (what it deleted stays deleted; nothing referenced ever
        is)."""
        g, retention, dry, given = gc_args(self._core, grace, branch_retention, dry_run, cancel)
        token = given or CancelToken()
        result: GarbageReport = await self._await(
            self._core.submit_operation(self._core.collect_garbage, g, retention, dry, token), token
        )
        return result

    async def pending_restore(self, session_id: str | None = None) -> RestoreStarted | None:
        """Like :meth:`LiteAgent.pending_restore` (off the event loop)."""
        sid = self._session(session_id, "pending_restore")  # the current one now, not later
        result: RestoreStarted | None = await self._await(
            self._core.submit(self._sync.pending_restore, sid)
        )
        return result

    async def finish_restore(self, session_id: str | None = None) -> RestoreResult:
        """Like :meth:`LiteAgent.finish_restore` (off the event loop; once started it is not
        stopped by a cancellation, see the class docstring)."""
        sid = self._session(session_id, "finish_restore")  # the current one now, not later
        result: RestoreResult = await self._await(
            self._core.submit_operation(self._sync.finish_restore, sid)
        )
        return result

    async def rollback_restore(self, session_id: str | None = None) -> list[str]:
        """Like :meth:`LiteAgent.rollback_restore` (off the event loop; once started it is not
        stopped by a cancellation, see the class docstring)."""
        sid = self._session(session_id, "rollback_restore")  # the current one now, not later
        result: list[str] = await self._await(
            self._core.submit_operation(self._sync.rollback_restore, sid)
        )
        return result

    def subscribe(self, maxsize: int = 1024, *, session_id: str | None = None) -> AsyncSubscription:
        """Like :meth:`LiteAgent.subscribe`, as an :class:`AsyncSubscription`: ``async for
        event in sub`` (or ``async with agent.subscribe() as sub``, which closes it) waits for
        each event without blocking the loop, in the order they were published, and ends once
        it is closed, or the agent is, after the events already buffered. The buffer and its
        overflow rule are those of the blocking one."""
        self._core.check_open()
        return self._core.hub.subscribe_async(maxsize, session_id=session_id)

    async def background_tasks(self) -> list[BackgroundTask]:
        """Like :meth:`LiteAgent.background_tasks` (it reads what the host keeps: it never
        blocks)."""
        return self._sync.background_tasks()

    async def close(self) -> None:
        """Like :meth:`LiteAgent.close`: the actors and the pool are stopped, and their threads
        joined, by a thread the host's dispatcher starts (the loop starts none, and a thread of
        the pool could not join itself); returns once they are gone."""
        core = self._core
        if core.closed:  # another close() runs or ran: return once it has finished
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_WAIT):
                    await asyncio.shield(asyncio.wrap_future(core.close_done))
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def close() -> None:
            try:
                core.close()
            except BaseException as e:  # noqa: BLE001 -- handed to the awaiting task
                post(loop, resolve, done, e)
            else:
                post(loop, resolve, done)

        closer = threading.Thread(target=close, name=f"{core.name}-close", daemon=True)
        try:
            core.host.call_soon(closer.start)
        except LiteAgentError:  # the host has stopped: a close() elsewhere is ending it
            close()
        await asyncio.shield(done)
        await _ended(closer)

    async def __aenter__(self) -> AsyncLiteAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def _ended(thread: threading.Thread) -> None:
    """Wait, without blocking the loop, until ``thread`` (not started, or one whose last step
    resolved what the caller awaited) has ended: a moment at most, bounded by the close wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _CLOSE_WAIT
    while thread.is_alive() and loop.time() < deadline:
        await asyncio.sleep(0.001)
