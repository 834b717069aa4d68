"""The registry and the queue of a :class:`~liteagent.actors.SessionHost`, owned by its
dispatcher thread (every method here runs on it, in the order the requests arrive).

- :class:`Request` is one send, state read or ref; its :class:`Reply` is what the caller waits
  on. A send's cancel token is made when the send is placed with an actor (unless its caller
  gave one): a send waiting in the queue costs no token.
- :class:`Slots` keeps the live sessions (``dict[session_id, Live]``), the idle ones in LRU
  order, the actors being stopped (they still count against ``max_live_sessions``), the FIFO
  queue and the maintenance holds; it starts, places, queues, passivates and stops.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import pykka

from liteagent.eventlog import CancelToken
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError

from ._envelope import ActorMessage, ActorStoppedError, complete, fail, start_actor, tell
from ._errors import AgentBusyError
from ._pool import ThreadPool
from ._reply import Reply
from ._session import BackgroundLimit, BackgroundTasks, SessionActor
from ._turn import SessionConfig

__all__ = ["HostSaturatedError", "Live", "Request", "Slots"]

_log = get_logger("liteagent.actors")


class HostSaturatedError(LiteAgentError):
    """Raised when a send needs an actor, every slot of ``max_live_sessions`` is running a turn
    (or is otherwise taken: background tasks, maintenance, stopping actors promised to waiting
    requests) and ``max_queued_sends`` requests already wait: it is refused at once, nothing
    recorded. An idle session's slot is never a reason: it is passivated for the request."""


@dataclass(eq=False, slots=True, weakref_slot=True)
class Request:
    """One request of a caller; ``cancel`` is the send's token (made when it is placed, unless
    the caller gave one)."""

    session_id: str
    kind: Literal["send", "ask", "ref"]
    message: ActorMessage | None
    cancel: CancelToken | None
    reply: Reply = field(default_factory=Reply)
    queued: bool = False
    interrupted: str | None = None  # why its caller gave up (set in the caller's thread)
    unregister: Callable[[], None] | None = None
    nested: bool = False  # made on a session's own thread (a tool calling the agent)


_NESTED = (
    "a request made from inside a running turn (a tool calling the agent) cannot wait for a "
    "slot, which its own turn may be holding: "
)


@dataclass(eq=False, slots=True)
class Live:
    """A session with an actor."""

    session_id: str
    ref: pykka.ActorRef[Any]
    tasks: BackgroundTasks
    stopped: concurrent.futures.Future[None]
    running: Request | None = None
    inflight: int = 0
    stopping: bool = False
    last_used: float = field(default_factory=time.monotonic)


class Slots:
    """The dispatcher's state and commands (module docstring). ``post`` runs a command on the
    dispatcher thread later (from an actor's thread or a callback)."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        max_live_sessions: int,
        max_queued_sends: int,
        idle_timeout_s: float | None,
        lock_ref: pykka.ActorRef[Any] | None,
        post: Callable[[Callable[[], Any]], bool],
        max_background_tasks: int = 64,
    ) -> None:
        self.config = config
        self.max_live_sessions = max_live_sessions
        self.max_queued_sends = max_queued_sends
        self.background = BackgroundLimit(max_background_tasks)  # every session's together
        self.idle_timeout_s = idle_timeout_s
        self._lock_ref = lock_ref
        self._post = post
        self._threads = ThreadPool("liteagent-session")  # reused: no thread start per actor
        self.live: dict[str, Live] = {}
        self._idle: collections.OrderedDict[str, Live] = collections.OrderedDict()  # LRU first
        self.stopping: set[Live] = set()
        # FIFO; an ordered dict, so that a cancelled request leaves it in O(1) (a deque's remove
        # is O(n): cancelling ten thousand waiting sends kept the dispatcher busy for seconds)
        self.queue: collections.OrderedDict[Request, None] = collections.OrderedDict()
        self.queued_sends: set[str] = set()
        self._holds: dict[str, int] = {}
        self.running = 0
        self._closed = False
        self._tasks_dirty = False
        # read from any thread (replaced whole, never mutated)
        self.tasks_view: tuple[BackgroundTasks, ...] = ()

    def sleep(self) -> float:
        """Seconds until the oldest idle session is due for passivation (the dispatcher's
        clock)."""
        if self.idle_timeout_s is None or not self._idle:
            return math.inf  # the dispatcher caps its sleep
        oldest = next(iter(self._idle.values()))
        return oldest.last_used + self.idle_timeout_s - time.monotonic()

    def publish(self) -> None:
        """Publish the background tasks of the live sessions for readers on other threads."""
        if self._tasks_dirty:
            self._tasks_dirty = False
            self.tasks_view = tuple(live.tasks for live in self.live.values())

    def busy(self, session_id: str) -> bool:
        """Whether the session runs or waits to run a turn, or has background tasks."""
        live = self.live.get(session_id)
        return session_id in self.queued_sends or (
            live is not None and (live.running is not None or bool(live.tasks.running()))
        )

    def interrupt(self, request: Request, reason: str) -> None:
        """Its caller gave up on ``request``: one waiting for a slot leaves the queue and fails;
        a running send's turn is cancelled (its outcome still arrives)."""
        request.interrupted = request.interrupted or reason
        pending = not request.reply.done()
        if request.queued:
            self._dequeue(request, reason)
        if pending and request.kind == "send" and request.cancel is not None:
            request.cancel.cancel(reason)  # an ask's token is its caller's: never fired here

    def on_request(self, request: Request) -> None:
        """A new request: refuse it, place it with its session's actor (starting one in a free
        slot), or queue it."""
        if request.reply.done():
            return
        sid = request.session_id
        if self._closed:
            fail(request.reply, ActorStoppedError("the agent is closed"))
            return
        if self._given_up(request):
            return
        if request.kind == "send":
            refusal = self._refusal(request)
            if refusal is not None:
                fail(request.reply, refusal)
                return
        live = self._alive(sid)
        if live is None and (self.queue or not self._free_slot()):
            if request.nested and not self._frees(len(self.queue) + 1):
                # its own session holds a slot while it waits: waiting could deadlock
                fail(request.reply, HostSaturatedError(_NESTED + self._saturated()))
                return
            if not self._frees(len(self.queue) + 1 - self.max_queued_sends):
                fail(request.reply, HostSaturatedError(self._saturated()))
                return
            self._enqueue(request)
            return
        if live is None:
            live = self._start(request)
        if live is not None:
            self._place(request, live)

    def in_session_thread(self) -> bool:
        """Whether the calling thread runs one of this host's session actors."""
        return self._threads.runs_this_thread()

    def _frees(self, wanted: int) -> bool:
        """Whether at least ``wanted`` slots are free or free without a turn or a task ending
        (free slots the queue has not been served from yet, actors already stopping, idle
        sessions to passivate). The requests in the queue take them first, in order; the waits
        beyond them, for running turns, are what ``max_queued_sends`` bounds: so an idle
        session never makes a send wait or be refused."""
        wanted -= max(0, self.max_live_sessions - len(self.live))  # free and stopping slots
        if wanted <= 0:
            return True
        for live in self._idle.values():
            if not live.tasks.running():
                wanted -= 1
                if wanted <= 0:
                    return True
        return False

    def _saturated(self) -> str:
        """Why a request is refused with :class:`HostSaturatedError`: what holds the slots."""
        tasks = sum(
            1 for live in self.live.values() if live.running is None and live.tasks.running()
        )
        return (
            f"all {self.max_live_sessions} session slots are taken ({self.running} running a "
            f"turn, {tasks} with background tasks, {len(self.stopping)} stopping) and "
            f"{len(self.queue)} requests wait (max_queued_sends={self.max_queued_sends})"
        )

    def _refusal(self, request: Request) -> LiteAgentError | None:
        sid = request.session_id
        live = self.live.get(sid)
        if sid in self.queued_sends or (live is not None and live.running is not None):
            return AgentBusyError(f"session {sid!r} is already running a turn")
        if sid in self._holds:
            return AgentBusyError(f"session {sid!r} is held for maintenance")
        return None

    @staticmethod
    def _given_up(request: Request) -> bool:
        """Fail ``request`` when its caller gave up on it (its token fired, or it was
        interrupted) before it reached an actor: it never starts after that."""
        token = request.cancel
        if request.interrupted is not None:
            reason = request.interrupted
        elif token is not None and token.cancelled:
            reason = token.reason or "cancelled"
        else:
            return False
        fail(request.reply, OperationCancelledError(reason))
        return True

    def _alive(self, session_id: str) -> Live | None:
        live = self.live.get(session_id)
        if live is not None and not live.ref.is_alive():  # it stopped by itself
            _log.warning("session.restarted", session_id=session_id)
            self._drop(live)
            return None
        return live

    def _free_slot(self) -> bool:
        return len(self.live) + len(self.stopping) < self.max_live_sessions

    def _start(self, request: Request) -> Live | None:
        sid = request.session_id
        # a session with background tasks keeps its slot: when one ends, serve the queue again
        tasks = BackgroundTasks(self._poster(self._tasks_changed), self.background)
        stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        box: list[Live] = []
        try:
            ref = start_actor(
                SessionActor,
                sid,
                self.config,
                tasks,
                self._lock_ref,
                on_stopped=partial(self._actor_stopped, stopped, box),
                pool=self._threads,
            )
        except RuntimeError as e:  # no thread for it: refuse
            fail(request.reply, HostSaturatedError(f"no actor for session {sid!r}: {e}"))
            return None
        except LiteAgentError as e:  # the session cannot be opened (its log is damaged, say)
            fail(request.reply, e)
            return None
        except Exception as e:  # noqa: BLE001 -- the request gets it, the host goes on
            failure = ActorStoppedError(
                f"the actor of session {sid!r} could not start: {type(e).__name__}: {e}"
            )
            fail(request.reply, failure)
            return None
        live = Live(sid, ref, tasks, stopped)
        box.append(live)
        self.live[sid] = live
        self._tasks_dirty = True
        return live

    def _place(self, request: Request, live: Live) -> None:
        self._idle.pop(live.session_id, None)
        live.last_used = time.monotonic()
        if request.kind == "ref":
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                request.reply.set_result(live.ref)
            self._mark_idle(live)
            return
        assert request.message is not None
        if request.kind == "send" and request.cancel is None:
            request.cancel = CancelToken()
        try:
            env = tell(live.ref, request.message, request.cancel)
        except ActorStoppedError as e:
            self._drop(live)
            fail(request.reply, e)
            return
        except Exception as e:  # noqa: BLE001 -- e.g. a message that cannot be encoded
            # the request fails, never waits unanswered; the session's slot is free again
            fail(
                request.reply,
                e
                if isinstance(e, LiteAgentError)
                else ActorStoppedError(f"the session could not take the request: {e!r}"),
            )
            self._mark_idle(live)
            return
        if request.kind == "send":
            live.running = request
            self.running += 1
        else:
            live.inflight += 1
        env.reply.add_done_callback(partial(self._handled, request, live))

    def _poster(self, command: Callable[[], Any]) -> Callable[[], None]:
        """A callback, for another thread, that posts ``command`` to the dispatcher."""

        def post() -> None:
            self._post(command)

        return post

    def _handled(
        self, request: Request, live: Live, future: concurrent.futures.Future[Any]
    ) -> None:
        """In the actor's thread: the dispatcher frees the session, then answers the caller,
        so that the caller finds the session free and the counts (:class:`HostStats`) without
        it. Once the dispatcher has stopped, the caller is answered at once."""
        answer = partial(complete, request.reply, future)
        if not self._post(partial(self._finished, request, live, answer)):
            answer()

    def _finished(self, request: Request, live: Live, answer: Callable[[], Any]) -> None:
        try:
            if request.kind == "send":
                live.running = None
                self.running -= 1
            else:
                live.inflight -= 1
            live.last_used = time.monotonic()
            self._mark_idle(live)
        finally:
            answer()

    def _mark_idle(self, live: Live) -> None:
        sid = live.session_id
        if (
            live.running is None
            and live.inflight == 0
            and sid not in self._holds
            and self.live.get(sid) is live
        ):
            self._idle[sid] = live
            self._idle.move_to_end(sid)

    def _enqueue(self, request: Request) -> None:
        request.queued = True
        self.queue[request] = None
        if request.kind == "send":
            self.queued_sends.add(request.session_id)
        if request.cancel is not None:
            request.unregister = request.cancel.on_cancel(
                self._poster(partial(self._token_fired, request))
            )

    def _token_fired(self, request: Request) -> None:
        token = request.cancel
        self._dequeue(
            request,
            (token.reason if token is not None else "") or "cancelled while waiting for a slot",
        )

    def _unqueue(self, request: Request) -> None:
        request.queued = False
        if request.kind == "send":
            self.queued_sends.discard(request.session_id)
        if request.unregister is not None:
            request.unregister()
            request.unregister = None

    def _dequeue(self, request: Request, reason: str) -> None:
        """A waiting request was cancelled: it leaves the queue and fails."""
        if not request.queued:
            return
        self._unqueue(request)
        del self.queue[request]
        fail(request.reply, OperationCancelledError(reason))

    def _tasks_changed(self) -> None:
        """A background task ended: the ``after`` hooks that run next serve the queue (its
        session may now be passivated to make room) and publish the tasks."""
        self._tasks_dirty = True

    def pump(self) -> None:
        """Serve the waiting requests in order while slots are free, then passivate idle
        sessions (least recently used first) to make room for the rest."""
        while self.queue and not self._closed:
            request = next(iter(self.queue))
            live = self._alive(request.session_id)
            if live is None and not self._free_slot():
                break
            del self.queue[request]
            self._unqueue(request)
            if request.reply.done() or self._given_up(request):
                continue
            if live is None:
                live = self._start(request)
            if live is not None:
                self._place(request, live)
        want = len(self.queue) - len(self.stopping)
        for live in list(self._idle.values()) if want > 0 else ():
            if want <= 0:
                break
            if not live.tasks.running():
                self._evict(live)
                want -= 1

    def passivate_idle(self) -> None:
        """Passivate the sessions idle for ``idle_timeout_s`` (oldest first); when that leaves
        nothing live, the threads of the pool end as their actors stop (back to the baseline
        then, not ``idle_s`` later)."""
        if self.idle_timeout_s is None:
            return
        now = time.monotonic()
        passivated = False
        for _ in range(len(self._idle)):  # each at most once: a timeout too small to tell
            live = next(iter(self._idle.values()))  # apart from now must not loop forever
            if live.last_used + self.idle_timeout_s > now:
                break
            if live.tasks.running():  # look again after another timeout
                live.last_used = now
                self._idle.move_to_end(live.session_id)
                continue
            _log.debug("session.passivated", session_id=live.session_id)
            self._evict(live)
            passivated = True
        if passivated and not self.live and not self.queue:
            self._threads.shed()  # a quiet host: the threads end with their actors, not later

    def _drop(self, live: Live) -> None:
        if self.live.get(live.session_id) is live:
            del self.live[live.session_id]
            self._tasks_dirty = True
        self._idle.pop(live.session_id, None)

    def _evict(self, live: Live) -> None:
        self._drop(live)
        if live.stopped.done():
            return
        live.stopping = True
        self.stopping.add(live)
        live.ref.stop(block=False)

    def _actor_stopped(self, stopped: concurrent.futures.Future[None], box: list[Live]) -> None:
        """In the stopping actor's thread, after its inbox was failed."""
        if not stopped.done():
            stopped.set_result(None)
        if box:
            self._post(partial(self._on_stopped, box[0]))

    def _on_stopped(self, live: Live) -> None:
        if live.stopping:
            live.stopping = False
            self.stopping.discard(live)
        elif self.live.get(live.session_id) is live:
            _log.warning("session.actor_stopped", session_id=live.session_id)
            self._drop(live)

    def on_hold(self, session_id: str, held: bool) -> None:
        """The maintenance lock of ``session_id`` was taken (``held``) or given back."""
        count = self._holds.get(session_id, 0) + (1 if held else -1)
        if count > 0:
            self._holds[session_id] = count
            self._idle.pop(session_id, None)
            return
        self._holds.pop(session_id, None)
        live = self.live.get(session_id)
        if live is not None:
            self._mark_idle(live)

    def passivate(self, session_id: str) -> bool:
        """Stop the session's actor if it is idle; return whether it did."""
        live = self.live.get(session_id)
        if live is None or session_id not in self._idle or live.tasks.running():
            return False
        self._evict(live)
        return True

    def forget(self, session_id: str) -> list[concurrent.futures.Future[None]]:
        """Stop the session's actors (refusing a busy one); their stop futures."""
        if self.busy(session_id):
            raise AgentBusyError(f"session {session_id!r} is busy")
        live = self.live.get(session_id)
        if live is not None:
            self._evict(live)
        return [s.stopped for s in self.stopping if s.session_id == session_id]

    def close(self) -> list[concurrent.futures.Future[None]]:
        """Fail the waiting requests, cancel running turns and background tasks, stop every
        actor; the futures of their stops and of the background tasks' threads."""
        self._closed = True
        for request in list(self.queue):
            del self.queue[request]
            self._unqueue(request)
            fail(request.reply, ActorStoppedError("the agent is closed"))
        threads: list[concurrent.futures.Future[None]] = []
        for live in list(self.live.values()):
            live.tasks.cancel_all("the agent is closing")
            threads += live.tasks.threads()
            running = live.running
            if running is not None and running.cancel is not None:
                running.cancel.cancel("the agent is closing")
            self._evict(live)
        self._threads.close()  # their threads end as the actors stop
        return [*(live.stopped for live in self.stopping), *threads]
