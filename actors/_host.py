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
  waiting send leaves the queue when its cancel token fires (or its future is cancelled).
- A session runs one ``send`` at a time: a second one while it runs or waits raises
  :class:`AgentBusyError` at once.
- A session idle for ``idle_timeout_s`` is passivated by the dispatcher's own clock, without new
  traffic. Its state is the log: its next message folds it again. A session with background
  tasks, a message in flight or held for maintenance is never passivated.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

import msgspec
import pykka
import structlog

from liteagent.eventlog import CancelToken, LiteAgentError, OperationCancelledError

from ._envelope import (
    ActorStoppedError,
    ActorTimeoutError,
    Dispatcher,
    Message,
    complete,
    fail,
    start_actor,
    tell,
)
from ._errors import AgentBusyError
from ._session import (
    BackgroundTask,
    BackgroundTasks,
    GetState,
    Send,
    SessionActor,
)
from ._turn import SessionConfig

__all__ = ["AgentBusyError", "HostSaturatedError", "HostStats", "SessionHost"]

_log = structlog.get_logger("liteagent.actors")
_STOP_TIMEOUT = 10.0  # waiting for actors to stop (close, forget)
_QUERY_TIMEOUT = 30.0  # waiting for the dispatcher to answer
_ASK_TIMEOUT = 300.0  # a state read or a ref: time in the queue plus the fold
T = TypeVar("T")


class HostSaturatedError(LiteAgentError):
    """Raised when a send needs an actor, every slot of ``max_live_sessions`` is running a turn
    and ``max_queued_sends`` requests already wait: it is refused at once, nothing recorded."""


class HostStats(msgspec.Struct, frozen=True, kw_only=True):
    """The host's load for an operator's metrics: sessions with an actor (``live``, running ones
    included), sessions running a turn (``running``), requests waiting for a slot (``queued``),
    actors being passivated (``stopping``; their threads still count), and the two bounds."""

    live: int
    running: int
    queued: int
    stopping: int
    max_live_sessions: int
    max_queued_sends: int


@dataclass(eq=False, slots=True, weakref_slot=True)
class _Request:
    session_id: str
    kind: Literal["send", "ask", "ref"]
    message: Message | None
    cancel: CancelToken | None
    reply: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    queued: bool = False
    unregister: Callable[[], None] | None = None


@dataclass(eq=False, slots=True)
class _Live:
    session_id: str
    ref: pykka.ActorRef[Any]
    tasks: BackgroundTasks
    stopped: concurrent.futures.Future[None]
    running: _Request | None = None
    inflight: int = 0
    stopping: bool = False
    last_used: float = field(default_factory=time.monotonic)


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
    ) -> None:
        self.config = config
        self.max_live_sessions = max_live_sessions
        self.max_queued_sends = max_queued_sends
        self.idle_timeout_s = idle_timeout_s
        self._lock_ref = lock_ref
        # owned by the dispatcher thread
        self._live: dict[str, _Live] = {}
        self._idle: collections.OrderedDict[str, _Live] = collections.OrderedDict()  # LRU first
        self._stopping: set[_Live] = set()
        self._queue: collections.deque[_Request] = collections.deque()
        self._queued_sends: set[str] = set()
        self._holds: dict[str, int] = {}
        self._running = 0
        self._closed = False
        self._tasks_dirty = False
        # read from any thread (replaced whole, never mutated)
        self._tasks_view: tuple[BackgroundTasks, ...] = ()
        self._closing = False
        self._dispatcher = Dispatcher(
            "liteagent-host", after=(self._passivate_idle, self._pump, self._publish),
            sleep=self._sleep)
        self._post = self._dispatcher.post
        self._post_quietly = self._dispatcher.post_quietly

    # -- the caller's side: post and wait ---------------------------------------------------------

    def _submit(self, request: _Request) -> concurrent.futures.Future[Any]:
        if self._closing:
            raise ActorStoppedError("the agent is closed")
        # by a weak reference: the reply keeps its callbacks, and a cycle through it would
        # leave every finished request (its token, its result) to the cyclic collector
        request.reply.add_done_callback(partial(self._reply_done, weakref.ref(request)))
        self._post(partial(self._on_request, request))
        return request.reply

    def _query(self, fn: Callable[[], T]) -> T:
        return self._dispatcher.query(fn, _QUERY_TIMEOUT)

    def _wait(self, request: _Request) -> Any:
        future = self._submit(request)
        try:
            return future.result(_ASK_TIMEOUT)
        except concurrent.futures.TimeoutError as e:
            future.cancel()
            raise ActorTimeoutError(
                f"session {request.session_id!r} did not answer in {_ASK_TIMEOUT} s") from e

    # -- operations -------------------------------------------------------------------------------

    def send(
        self, session_id: str, text: str, cancel: CancelToken | None
    ) -> concurrent.futures.Future[Any]:
        """Run ``text`` as a turn of ``session_id``; the future completes with its TurnResult or
        error. It never blocks (the dispatcher does the work), so the asyncio shell calls it on
        the event loop. :class:`AgentBusyError`, :class:`HostSaturatedError` and a cancellation
        while waiting (:class:`OperationCancelledError`, nothing recorded) arrive through the
        future; cancelling the future cancels ``cancel``."""
        return self._submit(_Request(session_id, "send", Send(text), cancel or CancelToken()))

    def state(self, session_id: str) -> Any:
        """The session's folded state (from its actor, folding the log if needed)."""
        return self._wait(_Request(session_id, "ask", GetState(), None))

    def ref(self, session_id: str) -> pykka.ActorRef[Any]:
        """The session's actor (started, folding its log, if needed). For work under the
        session's maintenance lock, which keeps it from being passivated."""
        ref: pykka.ActorRef[Any] = self._wait(_Request(session_id, "ref", None, None))
        return ref

    def is_busy(self, session_id: str) -> bool:
        """Whether the session runs or waits to run a turn, or has background tasks."""
        return self._query(partial(self._busy, session_id))

    @property
    def live_sessions(self) -> list[str]:
        """The ids of the sessions with an actor."""
        return self._query(lambda: list(self._live))

    def stats(self) -> HostStats:
        """The current load (never blocks: it reads the sizes the dispatcher keeps). A waiting
        send that fails has left ``queued`` already; a finished turn leaves ``running`` just
        after its result is delivered."""
        return HostStats(live=len(self._live), running=self._running, queued=len(self._queue),
                         stopping=len(self._stopping), max_live_sessions=self.max_live_sessions,
                         max_queued_sends=self.max_queued_sends)

    def background_tasks(self) -> list[BackgroundTask]:
        """Every running background task of every live session (never blocks on the host)."""
        return [t for tasks in self._tasks_view for t in tasks.running()]

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the dispatcher thread: for short work that must not run on an event
        loop, such as firing a cancel token whose callbacks close sockets."""
        self._post(fn)

    def hold(self, session_id: str, held: bool) -> None:
        """The maintenance lock of ``session_id`` was taken (``held``) or given back: a held
        session is not passivated, and a send to it is refused at once."""
        self._post_quietly(partial(self._on_hold, session_id, held))

    def passivate(self, session_id: str) -> bool:
        """Stop the session's actor if it is idle; return whether it did (without waiting)."""
        return self._query(partial(self._passivate, session_id))

    def forget(self, session_id: str) -> None:
        """Stop the session's actors and wait for them (before its log is rewritten or deleted);
        refuses a busy session with :class:`AgentBusyError`."""
        stopped = self._query(partial(self._forget, session_id))
        _, late = concurrent.futures.wait(stopped, timeout=_STOP_TIMEOUT)
        if late:
            _log.warning("session.stop_timeout", session_id=session_id)

    def close(self) -> None:
        """Refuse new requests and fail the waiting ones, cancel running turns and background
        tasks, stop every actor and the dispatcher."""
        if self._closing:
            return
        self._closing = True
        try:
            stopped = self._query(self._close)
        except ActorStoppedError:
            return
        _, late = concurrent.futures.wait(stopped, timeout=_STOP_TIMEOUT)
        if late:
            _log.warning("host.stop_timeout", actors=len(late))
        self._dispatcher.stop(_STOP_TIMEOUT)

    # -- the dispatcher ---------------------------------------------------------------------------

    def _sleep(self) -> float:
        if self.idle_timeout_s is None or not self._idle:
            return math.inf  # the dispatcher caps its sleep
        oldest = next(iter(self._idle.values()))
        return oldest.last_used + self.idle_timeout_s - time.monotonic()

    def _publish(self) -> None:
        if self._tasks_dirty:
            self._tasks_dirty = False
            self._tasks_view = tuple(live.tasks for live in self._live.values())

    def _busy(self, session_id: str) -> bool:
        live = self._live.get(session_id)
        return session_id in self._queued_sends or (live is not None and (
            live.running is not None or bool(live.tasks.running())))

    def _reply_done(self, ref: weakref.ref[_Request],
                    future: concurrent.futures.Future[Any]) -> None:
        request = ref()  # gone: it finished, nothing holds it any more
        if request is not None and future.cancelled():  # by its caller: stop it
            if request.cancel is not None:
                request.cancel.cancel("the send was cancelled")
            self._post_quietly(partial(self._dequeue, request))

    def _on_request(self, request: _Request) -> None:
        if request.reply.done():
            return
        sid = request.session_id
        if self._closed:
            fail(request.reply, ActorStoppedError("the agent is closed"))
            return
        if request.kind == "send":
            refusal = self._refusal(request)
            if refusal is not None:
                fail(request.reply, refusal)
                return
        live = self._alive(sid)
        if live is None and (self._queue or not self._free_slot()):
            if len(self._queue) >= self.max_queued_sends:
                fail(request.reply, HostSaturatedError(
                    f"{self.max_live_sessions} sessions are running and {len(self._queue)} "
                    f"requests wait (max_queued_sends={self.max_queued_sends})"))
                return
            self._enqueue(request)
            return
        if live is None:
            live = self._start(request)
        if live is not None:
            self._place(request, live)

    def _refusal(self, request: _Request) -> LiteAgentError | None:
        sid = request.session_id
        if request.cancel is not None and request.cancel.cancelled:
            return OperationCancelledError(request.cancel.reason or "cancelled")
        live = self._live.get(sid)
        if sid in self._queued_sends or (live is not None and live.running is not None):
            return AgentBusyError(f"session {sid!r} is already running a turn")
        if sid in self._holds:
            return AgentBusyError(f"session {sid!r} is held for maintenance")
        return None

    def _alive(self, session_id: str) -> _Live | None:
        live = self._live.get(session_id)
        if live is not None and not live.ref.is_alive():  # it stopped by itself
            _log.warning("session.restarted", session_id=session_id)
            self._drop(live)
            return None
        return live

    def _free_slot(self) -> bool:
        return len(self._live) + len(self._stopping) < self.max_live_sessions

    def _start(self, request: _Request) -> _Live | None:
        sid = request.session_id
        tasks = BackgroundTasks()
        stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        box: list[_Live] = []
        try:
            ref = start_actor(SessionActor, sid, self.config, tasks, self._lock_ref,
                              on_stopped=partial(self._actor_stopped, stopped, box))
        except Exception as e:  # noqa: BLE001 -- no thread for it (RuntimeError): refuse
            fail(request.reply, HostSaturatedError(f"no actor for session {sid!r}: {e}"))
            return None
        live = _Live(sid, ref, tasks, stopped)
        box.append(live)
        self._live[sid] = live
        self._tasks_dirty = True
        return live

    def _place(self, request: _Request, live: _Live) -> None:
        self._idle.pop(live.session_id, None)
        live.last_used = time.monotonic()
        if request.kind == "ref":
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                request.reply.set_result(live.ref)
            self._mark_idle(live)
            return
        assert request.message is not None
        try:
            env = tell(live.ref, request.message, request.cancel)
        except ActorStoppedError as e:
            self._drop(live)
            fail(request.reply, e)
            return
        if request.kind == "send":
            live.running = request
            self._running += 1
        else:
            live.inflight += 1
        env.reply.add_done_callback(partial(self._handled, request, live))

    def _handled(self, request: _Request, live: _Live,
                 future: concurrent.futures.Future[Any]) -> None:
        """In the actor's thread: free the session first, then answer the caller (so the
        caller's next request finds the session free)."""
        self._post_quietly(partial(self._finished, request, live))
        complete(request.reply, future)

    def _finished(self, request: _Request, live: _Live) -> None:
        if request.kind == "send":
            live.running = None
            self._running -= 1
        else:
            live.inflight -= 1
        live.last_used = time.monotonic()
        self._mark_idle(live)

    def _mark_idle(self, live: _Live) -> None:
        sid = live.session_id
        if (live.running is None and live.inflight == 0 and sid not in self._holds
                and self._live.get(sid) is live):
            self._idle[sid] = live
            self._idle.move_to_end(sid)

    def _enqueue(self, request: _Request) -> None:
        request.queued = True
        self._queue.append(request)
        if request.kind == "send":
            self._queued_sends.add(request.session_id)
        if request.cancel is not None:
            request.unregister = request.cancel.on_cancel(
                partial(self._post_quietly, partial(self._dequeue, request)))

    def _unqueue(self, request: _Request) -> None:
        request.queued = False
        if request.kind == "send":
            self._queued_sends.discard(request.session_id)
        if request.unregister is not None:
            request.unregister()
            request.unregister = None

    def _dequeue(self, request: _Request) -> None:
        """A waiting request was cancelled: it leaves the queue and fails."""
        if not request.queued:
            return
        self._unqueue(request)
        self._queue.remove(request)
        token = request.cancel
        fail(request.reply, OperationCancelledError(
            (token.reason if token is not None else "") or "cancelled while waiting for a slot"))

    def _pump(self) -> None:
        """Serve the waiting requests in order while slots are free, then passivate idle
        sessions (least recently used first) to make room for the rest."""
        while self._queue and not self._closed:
            request = self._queue[0]
            live = self._alive(request.session_id)
            if live is None and not self._free_slot():
                break
            self._queue.popleft()
            self._unqueue(request)
            if request.reply.done():
                continue
            if live is None:
                live = self._start(request)
            if live is not None:
                self._place(request, live)
        want = len(self._queue) - len(self._stopping)
        for live in list(self._idle.values()):
            if want <= 0:
                break
            if not live.tasks.running():
                self._evict(live)
                want -= 1

    def _passivate_idle(self) -> None:
        if self.idle_timeout_s is None:
            return
        now = time.monotonic()
        while self._idle:
            live = next(iter(self._idle.values()))
            if live.last_used + self.idle_timeout_s > now:
                break
            if live.tasks.running():  # look again after another timeout
                live.last_used = now
                self._idle.move_to_end(live.session_id)
                continue
            _log.debug("session.passivated", session_id=live.session_id)
            self._evict(live)

    def _drop(self, live: _Live) -> None:
        if self._live.get(live.session_id) is live:
            del self._live[live.session_id]
            self._tasks_dirty = True
        self._idle.pop(live.session_id, None)

    def _evict(self, live: _Live) -> None:
        self._drop(live)
        if live.stopped.done():
            return
        live.stopping = True
        self._stopping.add(live)
        live.ref.stop(block=False)

    def _actor_stopped(self, stopped: concurrent.futures.Future[None], box: list[_Live]) -> None:
        """In the stopping actor's thread, after its inbox was failed."""
        if not stopped.done():
            stopped.set_result(None)
        if box:
            self._post_quietly(partial(self._on_stopped, box[0]))

    def _on_stopped(self, live: _Live) -> None:
        if live.stopping:
            live.stopping = False
            self._stopping.discard(live)
        elif self._live.get(live.session_id) is live:
            _log.warning("session.actor_stopped", session_id=live.session_id)
            self._drop(live)

    def _on_hold(self, session_id: str, held: bool) -> None:
        count = self._holds.get(session_id, 0) + (1 if held else -1)
        if count > 0:
            self._holds[session_id] = count
            self._idle.pop(session_id, None)
            return
        self._holds.pop(session_id, None)
        live = self._live.get(session_id)
        if live is not None:
            self._mark_idle(live)

    def _passivate(self, session_id: str) -> bool:
        live = self._live.get(session_id)
        if live is None or session_id not in self._idle or live.tasks.running():
            return False
        self._evict(live)
        return True

    def _forget(self, session_id: str) -> list[concurrent.futures.Future[None]]:
        if self._busy(session_id):
            raise AgentBusyError(f"session {session_id!r} is busy")
        live = self._live.get(session_id)
        if live is not None:
            self._evict(live)
        return [s.stopped for s in self._stopping if s.session_id == session_id]

    def _close(self) -> list[concurrent.futures.Future[None]]:
        self._closed = True
        while self._queue:
            request = self._queue.popleft()
            self._unqueue(request)
            fail(request.reply, ActorStoppedError("the agent is closed"))
        for live in list(self._live.values()):
            live.tasks.cancel_all("the agent is closing")
            running = live.running
            if running is not None and running.cancel is not None:
                running.cancel.cancel("the agent is closing")
            self._evict(live)
        return [live.stopped for live in self._stopping]
