"""SessionHost: the live sessions of one agent, started on demand, bounded, passivated when idle.

One dispatcher thread owns the registry (``dict[session_id, live session]``; pykka's registry is
a list with O(n) lookups): every start, reservation, send and passivation happens on it, in the
order the requests arrive, so a session can never be chosen for passivation between a caller
finding it and sending to it. Callers only post a request and wait on (or await) its future; a
message that still reaches a stopped actor fails with :class:`ActorStoppedError`.

- At most ``max_live_sessions`` actors exist, counting those still stopping, so threads are
  bounded, running sessions included. A request for a session without an actor takes a free
  slot; the least recently used idle sessions are passivated to make room for waiting ones.
- When every slot runs a turn, requests needing an actor wait in FIFO order, at most
  ``max_queued_sends`` of them; beyond that :class:`HostSaturatedError` is raised at once. A
  request that can have the slot of an idle session (passivated for it) or of an actor already
  stopping is never refused: it waits only for that stop, in the queue (so ``queued`` may
  exceed ``max_queued_sends`` by such requests, never by one waiting for a turn). A waiting
  send leaves the queue when its cancel token fires or its caller interrupts it (or cancels
  its future), and never starts after that.
- A session runs one ``send`` at a time: a second one while it runs or waits raises
  :class:`AgentBusyError` at once.
- At most ``max_background_tasks`` background tasks (each a thread) run at once, every
  session's together; a tool asking for one more gets an error result the model reads.
- A session idle for ``idle_timeout_s`` is passivated by the dispatcher's own clock, without new
  traffic. Its state is the log: its next message folds it again. A session with background
  tasks, a message in flight or held for maintenance is never passivated.
"""

from __future__ import annotations

import concurrent.futures
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import msgspec
import pykka

from liteagent.eventlog import CancelToken
from liteagent.eventlog._branches import branch_prefix
from liteagent.eventlog._lease import check_lease_held
from liteagent.eventlog._logger import get_logger

from ._envelope import ActorStoppedError, ActorTimeoutError, Dispatcher
from ._errors import AgentBusyError
from ._host_slots import HostSaturatedError, Request, Slots
from ._lease import session_lease
from ._reply import Reply
from ._session import BackgroundTask, GetState, Send
from ._turn import SessionConfig

__all__ = ["AgentBusyError", "HostSaturatedError", "HostStats", "SessionHost"]

_log = get_logger("liteagent.actors")
_STOP_TIMEOUT = 10.0  # waiting for actors to stop (close, forget)
_QUERY_TIMEOUT = 30.0  # waiting for the dispatcher to answer
_ASK_TIMEOUT = 300.0  # a state read or a ref: time in the queue plus the fold
T = TypeVar("T")


class HostStats(msgspec.Struct, frozen=True, kw_only=True):
    """The host's load for an operator's metrics: sessions with an actor (``live``, running ones
    included), sessions running a turn (``running``), requests waiting for a slot (``queued``;
    beyond ``max_queued_sends`` only by those taking the slot of a session being passivated),
    actors being passivated (``stopping``; their threads still count), background tasks running
    (``background_tasks``, each a thread), and the three bounds; then the agent's operations
    (compactions, restores, collections of the asyncio API and ``iter_compact``) running and
    waiting, and their bound (``max_operations``)."""

    live: int
    running: int
    queued: int
    stopping: int
    background_tasks: int
    max_live_sessions: int
    max_queued_sends: int
    max_background_tasks: int
    operations: int = 0
    queued_operations: int = 0
    max_operations: int = 0


class SessionHost:
    """Starts, finds, bounds and passivates the SessionActors of one agent."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        max_live_sessions: int = 256,
        max_queued_sends: int = 10_000,
        idle_timeout_s: float | None = 300.0,
        lock_ref: pykka.ActorRef[Any] | None = None,
        max_background_tasks: int = 64,
    ) -> None:
        self.config = config
        self.max_live_sessions = max_live_sessions
        self.max_queued_sends = max_queued_sends
        self.max_background_tasks = max_background_tasks
        self.idle_timeout_s = idle_timeout_s
        self._closing = False
        self._dispatcher: Dispatcher | None = None
        slots = self._slots = Slots(
            config,
            max_live_sessions=max_live_sessions,
            max_queued_sends=max_queued_sends,
            idle_timeout_s=idle_timeout_s,
            lock_ref=lock_ref,
            post=self._post_later,
            max_background_tasks=max_background_tasks,
        )
        self._dispatcher = Dispatcher(
            "liteagent-host",
            after=(slots.passivate_idle, slots.pump, slots.publish),
            sleep=slots.sleep,
        )
        self._post = self._dispatcher.post

    def _post_later(self, command: Callable[[], Any]) -> bool:
        """Post from a callback or an actor's thread (nothing to do once stopped); return
        whether it was posted."""
        return self._dispatcher is not None and self._dispatcher.post_quietly(command)

    # -- the caller's side: post and wait ---------------------------------------------------------

    def _submit(self, request: Request) -> Reply:
        if self._closing:
            raise ActorStoppedError("the agent is closed")
        request.nested = self._slots.in_session_thread()
        reply = request.reply
        # by a weak reference: the reply keeps its callbacks, and a cycle through it would
        # leave every finished request (its token, its result) to the cyclic collector
        ref = weakref.ref(request)
        reply.add_done_callback(partial(self._reply_done, ref))
        reply.on_interrupt(partial(self._interrupt, ref))
        self._post(partial(self._slots.on_request, request))
        return reply

    def _reply_done(self, ref: weakref.ref[Request], reply: Reply) -> None:
        if reply.cancelled():  # by its caller: stop the turn, or leave the queue
            self._interrupt(ref, "the send was cancelled")

    def _interrupt(self, ref: weakref.ref[Request], reason: str) -> None:
        request = ref()  # gone: it finished, nothing holds it any more
        if request is not None:
            # at once, in the caller's thread: from now on the dispatcher never places it
            request.interrupted = request.interrupted or reason
            self._post_later(partial(self._slots.interrupt, request, reason))

    def _query(self, fn: Callable[[], T]) -> T:
        assert self._dispatcher is not None
        return self._dispatcher.query(fn, _QUERY_TIMEOUT)

    def _wait(self, request: Request) -> Any:
        reply = self._submit(request)
        try:
            return reply.result(_ASK_TIMEOUT)
        except concurrent.futures.TimeoutError as e:
            reply.cancel()
            raise ActorTimeoutError(
                f"session {request.session_id!r} did not answer in {_ASK_TIMEOUT} s"
            ) from e

    # -- operations -------------------------------------------------------------------------------

    def send(self, session_id: str, text: str, cancel: CancelToken | None) -> Reply:
        """Run ``text`` as a turn of ``session_id``; the reply completes with its LiteAgentResult or
        error. It never blocks (the dispatcher does the work), so the asyncio shell calls it on
        the event loop. :class:`AgentBusyError`, :class:`HostSaturatedError` and a cancellation
        while waiting (:class:`OperationCancelledError`, nothing recorded) arrive through the
        reply. ``reply.interrupt(reason)`` stops the send (out of the queue, or its turn
        cancelled: ``cancel`` fires) and its outcome still arrives; cancelling the reply does
        that too. Without ``cancel``, the turn gets a token of its own when it starts."""
        return self._submit(Request(session_id, "send", Send(text), cancel))

    def state(self, session_id: str, cancel: CancelToken | None = None) -> Any:
        """The session's folded state (from its actor, folding the log if needed). While it
        waits for a slot, ``cancel`` firing takes it out of the queue at once
        (:class:`OperationCancelledError`); the token itself is never fired here."""
        return self._wait(Request(session_id, "ask", GetState(), cancel))

    def ref(self, session_id: str, cancel: CancelToken | None = None) -> pykka.ActorRef[Any]:
        """The session's actor (started, folding its log, if needed), cancellable while it
        waits for a slot as :meth:`state`. For work under the session's maintenance lock,
        which keeps it from being passivated."""
        ref: pykka.ActorRef[Any] = self._wait(Request(session_id, "ref", None, cancel))
        return ref

    def is_busy(self, session_id: str) -> bool:
        """Whether the session runs or waits to run a turn, or has background tasks."""
        return self._query(partial(self._slots.busy, session_id))

    @property
    def live_sessions(self) -> list[str]:
        """The ids of the sessions with an actor."""
        return self._query(lambda: list(self._slots.live))

    def stats(self) -> HostStats:
        """The current load (never blocks: it reads the sizes the dispatcher keeps). A waiting
        send that fails has left ``queued`` already, and a finished turn has left ``running``,
        when its caller gets the answer."""
        s = self._slots
        return HostStats(
            live=len(s.live),
            running=s.running,
            queued=len(s.queue),
            stopping=len(s.stopping),
            background_tasks=s.background.held,
            max_live_sessions=self.max_live_sessions,
            max_queued_sends=self.max_queued_sends,
            max_background_tasks=self.max_background_tasks,
        )

    def background_tasks(self) -> list[BackgroundTask]:
        """Every running background task of every live session (never blocks on the host)."""
        return [t for tasks in self._slots.tasks_view for t in tasks.running()]

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the dispatcher thread: for short work that must not run on an event
        loop, such as firing a cancel token whose callbacks close sockets."""
        self._post(fn)

    def hold(self, session_id: str, held: bool) -> None:
        """The maintenance lock of ``session_id`` was taken (``held``) or given back: a held
        session is not passivated, and a send to it is refused at once."""
        self._post_later(partial(self._slots.on_hold, session_id, held))

    def passivate(self, session_id: str) -> bool:
        """Stop the session's actor if it is idle; return whether it did (without waiting)."""
        return self._query(partial(self._slots.passivate, session_id))

    def forget(self, session_id: str) -> None:
        """Stop the session's actors and wait for them (before its log is rewritten or deleted);
        refuses a busy session with :class:`AgentBusyError`."""
        stopped = self._query(partial(self._slots.forget, session_id))
        _, late = concurrent.futures.wait(stopped, timeout=_STOP_TIMEOUT)
        if late:
            _log.warning("session.stop_timeout", session_id=session_id)

    def delete(self, session_id: str) -> None:
        """Delete the session: under its lease (:class:`AgentBusyError` while this or another
        process runs it), its actors stopped first, then its log, fenced by the lease (a
        lease lost meanwhile, to a process that took the session over while this one was
        paused, raises :class:`LeaseLostError` and deletes nothing), then its branches."""
        cp = self.config.checkpointer
        with session_lease(cp, session_id, "deleting it") as lease:
            self.forget(session_id)
            cp.delete(session_id, lease=lease)
            prefix = branch_prefix(session_id)
            for info in cp.list():
                if info.id.startswith(prefix):
                    check_lease_held(lease)
                    cp.delete(info.id)

    def close(self) -> None:
        """Refuse new requests and fail the waiting ones, cancel running turns and background
        tasks, stop every actor and the dispatcher; waits (at most ``_STOP_TIMEOUT`` seconds)
        for the actors and the background tasks' threads to end."""
        if self._closing:
            return
        self._closing = True
        try:
            stopped = self._query(self._slots.close)
        except ActorStoppedError:
            return
        _, late = concurrent.futures.wait(stopped, timeout=_STOP_TIMEOUT)
        if late:
            _log.warning("host.stop_timeout", still_running=len(late))
        assert self._dispatcher is not None
        self._dispatcher.stop(_STOP_TIMEOUT)
