"""SessionHost: the live sessions of one agent, started on demand and passivated when idle.

It keeps ``dict[session_id, live session]`` (pykka's registry is a list with O(n) lookups), at
most ``max_live_sessions`` of them: starting one more stops the least recently used idle one
(not running a turn, no background task). A stopped or crashed session comes back by folding its
log on its next message. A session runs one ``send`` at a time; a second one while it runs is
refused with :class:`AgentBusyError` instead of queueing behind it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pykka
import structlog

from liteagent.eventlog import CancelToken

from ._envelope import ActorStoppedError, Envelope, ask, tell
from ._session import (
    AgentBusyError,
    BackgroundTask,
    BackgroundTasks,
    GetState,
    Send,
    SessionActor,
)
from ._turn import SessionConfig

__all__ = ["AgentBusyError", "SessionHost"]


_log = structlog.get_logger("liteagent.actors")
_STOP_TIMEOUT = 10.0
_ASK_TIMEOUT = 60.0


@dataclass
class _Live:
    ref: pykka.ActorRef[Any]
    tasks: BackgroundTasks
    busy: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    running: CancelToken | None = None


class SessionHost:
    """Starts, finds and passivates the SessionActors of one agent."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        max_live_sessions: int = 256,
        lock_ref: pykka.ActorRef[Any] | None = None,
    ) -> None:
        self.config = config
        self.max_live_sessions = max_live_sessions
        self._lock_ref = lock_ref
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- the registry -----------------------------------------------------------------------------

    def _get(self, session_id: str) -> _Live:
        with self._lock:
            if self._closed:
                raise ActorStoppedError("the agent is closed")
            live = self._live.get(session_id)
            if live is not None and live.ref.is_alive():
                live.last_used = time.monotonic()
                return live
            if live is not None:
                _log.warning("session.restarted", session_id=session_id)
            tasks = live.tasks if live is not None else BackgroundTasks()
            live = self._live[session_id] = _Live(
                SessionActor.start(session_id, self.config, tasks, self._lock_ref), tasks
            )
            evict = self._pick_idle_locked(exclude=session_id)
        for sid, old in evict:
            self._stop(sid, old)
        return live

    def _pick_idle_locked(self, exclude: str) -> list[tuple[str, _Live]]:
        excess = len(self._live) - self.max_live_sessions
        if excess <= 0:
            return []
        idle = sorted(
            (
                (sid, live)
                for sid, live in self._live.items()
                if sid != exclude and not live.busy.locked() and not live.tasks.running()
            ),
            key=lambda item: item[1].last_used,
        )[:excess]
        for sid, _ in idle:
            del self._live[sid]
        return idle

    @staticmethod
    def _stop(session_id: str, live: _Live) -> None:
        try:
            live.ref.stop(block=True, timeout=_STOP_TIMEOUT)
        except pykka.Timeout:
            _log.warning("session.stop_timeout", session_id=session_id)

    @property
    def live_sessions(self) -> list[str]:
        """The ids of the sessions with a running actor."""
        with self._lock:
            return [sid for sid, live in self._live.items() if live.ref.is_alive()]

    def passivate(self, session_id: str) -> bool:
        """Stop the session's actor if it is idle; return whether it did."""
        with self._lock:
            live = self._live.get(session_id)
            if live is None or live.busy.locked() or live.tasks.running():
                return False
            del self._live[session_id]
        self._stop(session_id, live)
        return True

    # -- operations -------------------------------------------------------------------------------

    def send(self, session_id: str, text: str, cancel: CancelToken | None) -> Envelope:
        """Start a turn; the returned envelope's ``reply`` completes with its TurnResult.

        It never waits on another actor, so the asyncio shell can call it on the event loop;
        the session's actor checks the maintenance lock itself.
        """
        live = self._get(session_id)
        if not live.busy.acquire(blocking=False):
            raise AgentBusyError(f"session {session_id!r} is already running a turn")
        token = cancel or CancelToken()
        try:
            env = tell(live.ref, Send(text), token)
        except BaseException:
            live.busy.release()
            raise
        live.running = token

        def done(_: object) -> None:
            live.running = None
            live.busy.release()

        env.reply.add_done_callback(done)
        return env

    def is_busy(self, session_id: str) -> bool:
        """Whether the session is running a turn or has background tasks."""
        with self._lock:
            live = self._live.get(session_id)
        return live is not None and (live.busy.locked() or bool(live.tasks.running()))

    def ref(self, session_id: str) -> pykka.ActorRef[Any]:
        """The session's actor (started, folding its log, if needed)."""
        return self._get(session_id).ref

    def state(self, session_id: str) -> Any:
        """The session's folded state (from its actor, folding the log if needed)."""
        return ask(self._get(session_id).ref, GetState(), timeout=_ASK_TIMEOUT)

    def background_tasks(self) -> list[BackgroundTask]:
        """Every running background task of every live session."""
        with self._lock:
            lives = list(self._live.values())
        return [t for live in lives for t in live.tasks.running()]

    def forget(self, session_id: str) -> None:
        """Stop and drop the session's actor (before its log is deleted); refuses a busy one."""
        with self._lock:
            live = self._live.get(session_id)
            if live is None:
                return
            if live.busy.locked() or live.tasks.running():
                raise AgentBusyError(f"session {session_id!r} is busy")
            del self._live[session_id]
        self._stop(session_id, live)

    def close(self) -> None:
        """Cancel background tasks and stop every actor."""
        with self._lock:
            self._closed = True
            lives = list(self._live.items())
            self._live.clear()
        for _, live in lives:
            live.tasks.cancel_all("the agent is closing")
            running = live.running
            if running is not None:
                running.cancel("the agent is closing")
        for sid, live in lives:
            self._stop(sid, live)
