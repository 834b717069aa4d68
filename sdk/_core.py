"""AgentCore: what the sync and async facades share — the checkpointer, the actors, the
agent's own worker pool, the current session id. The facades only wait on futures (blocking or
with asyncio)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pykka

from liteagent.actors import (
    EventHub,
    FileSnapshotActor,
    MaintenanceLockActor,
    ManualCompaction,
    Restorer,
    SessionConfig,
    SessionHost,
)
from liteagent.actors._compactor import CompactStats
from liteagent.actors._envelope import ActorStoppedError
from liteagent.actors._host_slots import HostSaturatedError
from liteagent.actors._restore import RestoreResult
from liteagent.context import ContextOptions
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    GarbageReport,
    collect_garbage,
    validate_session_id,
)
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import InvalidSessionIdError, OperationCancelledError
from liteagent.providers import ModelProvider
from liteagent.tools import Tool

from ._errors import AgentClosedError, SessionsDisabledError
from ._idle import IdleCompaction
from ._operations import MAX_OPERATIONS, OperationPool

__all__ = ["CLOSE_WAIT_S", "MAX_OPERATIONS", "POOL_WORKERS", "AgentCore", "new_session_id"]

_log = get_logger("liteagent.sdk")
_AGENT_IDS = itertools.count(1)
_CLOSE_WAIT = 120.0  # how long a second close() waits for the first (whose waits are bounded)
T = TypeVar("T")

POOL_WORKERS = 4
"""The threads of each agent's own executor, which runs the reads the facades do not do on the
caller's thread (the asyncio shell's ``list_sessions``, ``list_checkpoints``, ...) and hands
every longer operation (a compaction, a restore, a collection, ``iter_compact``'s compaction)
to the agent's :class:`OperationPool`, which runs up to :data:`MAX_OPERATIONS` of them at once.
Reads never wait behind operations; a hand-over may start a thread, so the asyncio shell never
makes one on the loop. The executor's threads start with an async agent."""

COMPACTOR_STOP_S = 10.0
"""How long close() waits, in all, for the compactors still running after it cancelled their
compactions (one that ignores its cancellation is left to end by itself)."""

CLOSE_WAIT_S = 30.0
"""How long close() waits for the cancelled compactions, restores and collections of other
threads to end before it stops the actors under them."""


def _run_job(
    future: concurrent.futures.Future[T],
    fn: Callable[..., T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """On the executor's or the operation pool's thread: run ``fn`` into ``future`` unless it
    was cancelled."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 -- the caller gets it; the thread serves on
        future.set_exception(e)
    else:
        future.set_result(result)


def _operation_job(
    future: concurrent.futures.Future[T],
    fn: Callable[..., T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Callable[[], None] | None:
    """On the operation pool's thread: run ``fn`` unless ``future`` was cancelled, and return
    what completes ``future``, which the pool calls once the job no longer counts as running
    (so ``host_stats()`` read by the answered caller does not count it)."""
    if not future.set_running_or_notify_cancel():
        return None
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 -- the caller gets it; the thread serves on
        return partial(future.set_exception, e)
    return partial(future.set_result, result)


def _handed_over(
    future: concurrent.futures.Future[Any], handover: concurrent.futures.Future[None]
) -> None:
    """The executor's hand-over of ``future``'s job ended: when no thread could take the job
    (none could start), ``future`` fails, since nothing will run it."""
    if handover.cancelled():
        future.cancel()
    elif (error := handover.exception()) is not None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            future.set_exception(
                HostSaturatedError(f"no thread could run the operation: {error}")
                if isinstance(error, RuntimeError)
                else error
            )


def new_session_id() -> str:
    """A fresh session id: sortable by creation time, unique (``20261129-224501-3f9a1c``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _weakly(method: Callable[[str, tuple[int, int] | None], None]) -> Callable[..., None]:
    """``method`` called through a weak reference to its object (a no-op once it is gone)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


class AgentCore:
    """The state of one agent, shared by :class:`LiteAgent` and :class:`AsyncLiteAgent`."""

    def __init__(
        self,
        *,
        provider: ModelProvider,
        model_name: str,
        workdir: Path,
        checkpointer: Checkpointer,
        owns_checkpointer: bool,
        sessions: bool,
        tools: Sequence[Tool],
        system_prompt: str | None,
        middleware: Sequence[Any],
        compactor: Any,
        context: ContextOptions | None = None,
        max_turns: int,
        max_tokens: int,
        max_live_sessions: int,
        max_queued_sends: int = 10_000,
        idle_timeout_s: float | None = 300.0,
        max_background_tasks: int = 64,
        max_operations: int = MAX_OPERATIONS,
    ) -> None:
        self.sessions = sessions
        self.checkpointer = checkpointer
        self._owns_checkpointer = owns_checkpointer
        self.provider = provider
        self.hub = EventHub()
        self.name = f"liteagent-agent{next(_AGENT_IDS)}"
        """The prefix of this agent's own threads (its pool's are ``<name>-pool_<n>``)."""
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=POOL_WORKERS, thread_name_prefix=f"{self.name}-pool"
        )
        self.operations = OperationPool(f"{self.name}-op", limit=max_operations)
        self._lock = threading.Lock()
        self._quiet = threading.Condition(self._lock)  # notified when an operation ends
        self._operations: dict[int, int] = {}  # thread id -> operations running in it
        self._closed = False
        self._pid = os.getpid()  # a forked child's copy of the agent is not an agent
        # done once the first close() has finished: a later close() waits for it
        self.close_done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._closing = CancelToken()  # fired by close(): cancels the compactions and restores
        self._refs: list[pykka.ActorRef[Any]] = []
        self._host: SessionHost | None = None  # for _held, which may run before it exists
        self.idle: IdleCompaction | None = None
        try:
            snapshot_ref = FileSnapshotActor.start(workdir, checkpointer.blobs, self.hub)
            self._refs.append(snapshot_ref)
            lock_ref = MaintenanceLockActor.start(self._held)
            self._refs.append(lock_ref)
            self.lock_ref = lock_ref
            config = SessionConfig(
                checkpointer=checkpointer,
                provider=provider,
                model_name=model_name,
                workdir=workdir,
                tools=tuple(tools),
                system_prompt=system_prompt,
                max_turns=max_turns,
                max_tokens=max_tokens,
                middleware=tuple(middleware),
                hub=self.hub,
                snapshot_ref=snapshot_ref,
                context=context,
                on_turn_end=_weakly(self._turn_left),  # no cycle: the agent is freed by
                # reference counting, not left for the cyclic collector
            )
            self.host = self._host = SessionHost(
                config,
                max_live_sessions=max_live_sessions,
                max_queued_sends=max_queued_sends,
                idle_timeout_s=idle_timeout_s,
                lock_ref=lock_ref,
                max_background_tasks=max_background_tasks,
            )
            self.compaction = ManualCompaction(
                compactor=compactor,
                lock_ref=lock_ref,
                checkpointer=checkpointer,
                hub=self.hub,
                is_busy=self.host.is_busy,
                session_ref=self.host.ref,
                state=self.host.state,
            )
            self.restorer = Restorer(
                checkpointer=checkpointer,
                workdir=workdir,
                lock_ref=lock_ref,
                snapshot_ref=snapshot_ref,
                hub=self.hub,
                is_busy=self.host.is_busy,
                forget=self.host.forget,
            )
            delay = context.idle_compact_after if context is not None else None
            self.idle = (
                None
                if delay is None
                else IdleCompaction(
                    delay,
                    compact=lambda sid, cancel, left: self.compact(
                        sid, None, cancel, idle=True, unless_moved_from=left
                    ),
                    is_busy=self.host.is_busy,
                    state=self.host.state,
                    run=self.operations.run,
                    limit=max(1, max_operations // 2),
                )
            )
        except BaseException:
            if self._host is not None:
                self._host.close()
            self._stop_refs()
            self.pool.shutdown()
            raise
        self.session_id = new_session_id()

    def prestart_pool(self) -> None:
        """Start every thread of the pool now, so that a submit from an event loop never starts
        one (a pool starts a thread only when none is idle: each of these jobs keeps its thread
        busy until all have started)."""
        barrier = threading.Barrier(POOL_WORKERS + 1)
        for _ in range(POOL_WORKERS):
            self.pool.submit(barrier.wait, 10)
        barrier.wait(10)

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Run the read ``fn(*args, **kwargs)`` on the agent's executor (never blocks, once
        prestarted); :class:`AgentClosedError` after close(). Reads never wait behind the
        operations of :meth:`submit_operation`. The future's ``cancel()`` keeps a job that has
        not started from ever starting."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._hand(future, partial(_run_job, future, fn, args, kwargs))
        return future

    def submit_operation(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Run the operation ``fn(*args, **kwargs)`` (a compaction, a restore, a collection:
        anything that may take long) on the agent's :class:`OperationPool`, handed over by its
        executor, so that the caller (an event loop) never starts a thread; never blocks, once
        prestarted; :class:`AgentClosedError` after close(). The future's ``cancel()`` keeps a
        job that has not started from ever starting."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        job = partial(_operation_job, future, fn, args, kwargs)
        self._hand(future, partial(self.operations.run, job))
        return future

    def _hand(self, future: concurrent.futures.Future[Any], job: Callable[[], None]) -> None:
        """Give ``job`` (which completes ``future``) to the executor. When it takes none, the
        job is cancelled (the executor may still run it later: it then does nothing) and the
        error says why: a close() in another thread meanwhile, or no thread could start."""
        self.check_open()
        try:
            handover = self.pool.submit(job)
        except RuntimeError as e:
            future.cancel()
            if self._closed:
                raise AgentClosedError("the agent is closed") from e
            raise HostSaturatedError(f"no thread could run the call: {e}") from e
        handover.add_done_callback(partial(_handed_over, future))

    @contextlib.contextmanager
    def _until_closed(self, cancel: CancelToken | None) -> Iterator[CancelToken]:
        """``cancel`` (or a new token), which close() fires while the work runs, so that the
        pool's threads are free to be joined soon after."""
        token = cancel or CancelToken()
        me = threading.get_ident()
        with self._lock:
            self._operations[me] = self._operations.get(me, 0) + 1
        unregister = self._closing.on_cancel(partial(token.cancel, "the agent was closed"))
        try:
            yield token
        except ActorStoppedError as e:
            if not self._closed:
                raise
            # close() stopped an actor the operation still had to ask: it was not handled, so
            # the operation did not complete; that is what a cancellation by close() means.
            raise OperationCancelledError("the agent was closed") from e
        finally:
            unregister()
            with self._lock:
                if self._operations[me] == 1:
                    del self._operations[me]
                else:
                    self._operations[me] -= 1
                self._quiet.notify_all()

    def _wait_for_operations(self) -> None:
        """Wait (at most :data:`CLOSE_WAIT_S`) until the compactions, restores and collections
        running in other threads have ended: they were cancelled, and they still need the
        actors (a restore puts files back, every operation gives its lock back), so these
        must not stop under them."""
        me = threading.get_ident()
        with self._lock:
            if not self._quiet.wait_for(
                lambda: not set(self._operations) - {me}, timeout=CLOSE_WAIT_S
            ):
                _log.warning("agent.close_operations_running", threads=len(self._operations))

    def compact(
        self,
        session_id: str,
        instructions: str | None,
        cancel: CancelToken | None,
        *,
        idle: bool = False,
        unless_moved_from: tuple[int, int] | None = None,
    ) -> CompactStats:
        """Run a compaction of ``session_id`` (cancelled by close()). One asked for (not the
        ``idle`` one) first cancels an idle compaction of the session in progress and waits for
        it to stop, so that it is not refused as busy because of it. With
        ``unless_moved_from``, refused when the log is no longer at that position."""
        if not idle and self.idle is not None:
            self.idle.turn_started(session_id)
        with self._until_closed(cancel) as token:
            return self.compaction.compact(
                session_id, instructions, token, unless_moved_from=unless_moved_from
            )

    def restore(
        self,
        session_id: str,
        seq: int,
        *,
        files: bool,
        conversation: bool,
        cancel: CancelToken | None,
    ) -> RestoreResult:
        """Run a restore of ``session_id`` (cancelled by close(): it puts back what it changed)."""
        self.history_rewritten(session_id)
        with self._until_closed(cancel) as token:
            return self.restorer.restore(
                session_id, seq, files=files, conversation=conversation, cancel=token
            )

    def undo(
        self, session_id: str, branch: str | None, cancel: CancelToken | None
    ) -> RestoreResult:
        """Bring a branch of ``session_id`` back (cancelled by close(), as a restore)."""
        self.history_rewritten(session_id)
        with self._until_closed(cancel) as token:
            return self.restorer.undo(session_id, branch, cancel=token)

    def fork(self, session_id: str, seq: int, workdir: Path | None) -> str:
        """Fork ``session_id`` before its checkpoint ``seq`` into a new session; its id."""
        return self.restorer.fork(session_id, seq, new_session_id(), workdir=workdir)

    def collect_garbage(
        self,
        grace: float,
        branch_retention: float | None,
        dry_run: bool,
        cancel: CancelToken | None,
    ) -> GarbageReport:
        """Collect the store's garbage (cancelled by close())."""
        with self._until_closed(cancel) as token:
            return collect_garbage(
                self.checkpointer,
                grace=grace,
                branch_retention=branch_retention,
                dry_run=dry_run,
                cancel=token,
            )

    def delete_session(self, session_id: str) -> None:
        """Delete ``session_id`` (under its lease) and then its branches, whose blobs the next
        garbage collection reclaims with the session's own. A close() meanwhile waits for it
        (bounded), or cancels it (:class:`OperationCancelledError`) before it stops an actor
        the deletion still had to ask."""
        with self._until_closed(None):
            self.host.delete(session_id)

    def _held(self, session_id: str, held: bool) -> None:
        """The maintenance lock of ``session_id`` changed hands (told by its actor)."""
        if self._host is not None:
            self._host.hold(session_id, held)

    def turn_started(self, session_id: str, *, wait: bool = True) -> bool:
        """A send is starting on ``session_id``: stops its idle timer and cancels an idle
        compaction of it in progress, waiting for it to stop with ``wait`` (see
        :meth:`settle_idle`). Returns whether that compaction is still in progress."""
        if self.idle is not None:
            return self.idle.turn_started(session_id, wait=wait)
        return False

    def settle_idle(self, session_id: str) -> None:
        """Wait (bounded) until the cancelled idle compaction of ``session_id`` has stopped."""
        if self.idle is not None:
            self.idle.settle(session_id)

    def history_rewritten(self, session_id: str) -> None:
        """A restore, an undo or the finish of one is about to rewrite ``session_id``'s history:
        no idle compaction until its next turn ends (one appended after a restore would keep
        that restore from being undone)."""
        if self.idle is not None:
            self.idle.turn_started(session_id)

    def _turn_left(self, session_id: str, position: tuple[int, int] | None) -> None:
        """A session's thread: a send ended, leaving the log at ``position`` (see
        ``IdleCompaction.turn_left``)."""
        if self.idle is not None:
            self.idle.turn_left(session_id, position)

    def turn_finished(self, session_id: str) -> None:
        """A send ended on ``session_id`` (starts its idle timer)."""
        if self.idle is not None and not self._closed:
            self.idle.turn_finished(session_id)

    def check_open(self) -> None:
        """Raise AgentClosedError after close(), and in a forked child of the agent's process
        (its actors and threads stayed in the parent)."""
        if self._closed:
            raise AgentClosedError("the agent is closed")
        if os.getpid() != self._pid:
            raise AgentClosedError(
                f"this agent belongs to process {self._pid}, of which this process is a forked "
                "child (the agent's threads stayed there): create an agent of its own"
            )

    def require_sessions(self, method: str) -> None:
        """Raise SessionsDisabledError when sessions are off."""
        self.check_open()
        if not self.sessions:
            raise SessionsDisabledError(f"{method}() needs sessions=True")

    def session_for(self, session_id: str | None, method: str = "send") -> str:
        """The id to use: ``session_id`` (validated) or the current one; never changes the
        current one."""
        if session_id is None:
            return self.session_id
        if not self.sessions and session_id != self.session_id:
            raise SessionsDisabledError(f"{method}(session_id=...) needs sessions=True")
        sid = validate_session_id(session_id)
        if is_branch_session(sid):
            raise InvalidSessionIdError(
                sid,
                f"{sid!r} is a branch a restore or an undo keeps, not a session: "
                "list_branches() and undo_restore() bring it back",
            )
        return sid

    def _stop_refs(self) -> None:
        for ref in self._refs:
            try:
                ref.stop(block=True, timeout=10)
            except pykka.Timeout:
                _log.warning("agent.actor_stop_timeout", actor=ref.actor_class.__name__)

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._closed

    def close(self) -> None:
        """Cancel the compactions, restores and collections in progress and wait (a bounded
        while) for them to end, stop every actor (cancelling turns and background tasks), then
        the pool's threads (its jobs have stopped or failed by
        then), and close an owned checkpointer. Not from a thread of the pool (it could not
        join itself). A close() while another runs returns once that one has finished."""
        if os.getpid() != self._pid:  # a forked child's copy: nothing here to stop or wait for
            self._closed = True
            return
        with self._lock:
            first = not self._closed
            self._closed = True
        if not first:  # another close() runs: return once it has finished (a bounded wait)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self.close_done.result(_CLOSE_WAIT)
            return
        try:
            self._close()
        finally:
            self.close_done.set_result(None)

    def _close(self) -> None:
        self.pool.shutdown(wait=False)  # no new jobs; those queued run and find the agent closed
        self._closing.cancel("the agent was closed")
        try:
            if self.idle is not None:
                self.idle.close()
            self.host.close()
            self._wait_for_operations()
        finally:
            self.compaction.stop(timeout=COMPACTOR_STOP_S)
            self._stop_refs()
            self.hub.close()
            self.pool.shutdown(wait=True)
            self.operations.close(CLOSE_WAIT_S)
            if self._owns_checkpointer:
                self.checkpointer.close()
