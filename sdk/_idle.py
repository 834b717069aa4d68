"""Idle compaction for daemons: a session left idle for ``idle_compact_after`` seconds while its
last request was above its budget is compacted between turns, without waiting for input.

The agent starts it by itself, so it never stands in the way of the user: a send (or a restore)
of the session it is compacting cancels it and waits for it to stop (a cancelled compaction
leaves the session as it was) instead of failing with ``AgentBusyError``."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from typing import Any

from liteagent.eventlog import CancelToken, LiteAgentError
from liteagent.eventlog._logger import get_logger

__all__ = ["IdleCompaction"]

_log = get_logger("liteagent.sdk")
_MAX_SLEEP = 60.0
_JOIN_TIMEOUT = 1.0  # a compaction in progress is not waited for: it fails on the closed agent
_STOP_WAIT_S = 30.0  # how long a send waits for a cancelled idle compaction to stop


class IdleCompaction:
    """One deadline per session, set when a turn ends and cleared when one starts; one thread
    for all of them, never one per session.

    When a deadline passes and the session is still idle (no turn, no background task) and its
    latest context status says the conversation was over budget (``tokens > budget``),
    ``compact`` runs in that thread (the agent's compactor, under the maintenance lock, like
    ``agent.compact()``), one session at a time, with a cancel token that
    :meth:`turn_started` fires.
    """

    def __init__(
        self,
        delay: float,
        *,
        compact: Callable[[str, CancelToken], Any],
        is_busy: Callable[[str], bool],
        state: Callable[[str, CancelToken], Any],
    ) -> None:
        self.delay = delay
        self._compact = compact
        self._is_busy = is_busy
        self._state = state
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._closed = False
        self._running: tuple[str, CancelToken] | None = None  # the compaction in progress
        self._thread = threading.Thread(target=self._run, name="liteagent-idle", daemon=True)
        self._thread.start()  # here, not on an event loop at the first turn

    def turn_started(self, session_id: str, *, wait: bool = True) -> bool:
        """Clear the session's deadline (a turn is starting, or a restore rewrites it), and
        cancel an idle compaction of it in progress; with ``wait``, wait (bounded) until that
        one has stopped. Returns whether one of the session is still in progress."""
        with self._cond:
            self._due.pop(session_id, None)
            running = self._running
            if running is None or running[0] != session_id:
                return False
            running[1].cancel("a turn or restore of the session is starting")
            if wait and threading.current_thread() is not self._thread:
                self._cond.wait_for(lambda: self._running is not running, timeout=_STOP_WAIT_S)
            return self._running is running

    def settle(self, session_id: str) -> None:
        """Wait (bounded) until no idle compaction of ``session_id`` is in progress (after
        :meth:`turn_started` cancelled it without waiting)."""
        self.turn_started(session_id, wait=True)

    def turn_finished(self, session_id: str) -> None:
        """Set (or move) the session's deadline."""
        with self._cond:
            if self._closed:
                return
            due = time.monotonic() + self.delay
            self._due[session_id] = due
            heapq.heappush(self._heap, (due, session_id))
            self._cond.notify()

    def _next(self) -> tuple[str, CancelToken] | None:
        """Wait for the next deadline; the session whose deadline passed (its compaction now in
        progress), or None when closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # moved or cleared since
                if self._heap and self._heap[0][0] <= now:
                    _, session_id = heapq.heappop(self._heap)
                    del self._due[session_id]
                    # in progress from here on, so that a send from now on cancels it
                    self._running = (session_id, CancelToken())
                    return self._running
                wait = self._heap[0][0] - now if self._heap else _MAX_SLEEP
                self._cond.wait(min(wait, _MAX_SLEEP))
            return None

    def _run(self) -> None:
        while (running := self._next()) is not None:
            self._fire(*running)

    def _fire(self, session_id: str, cancel: CancelToken) -> None:
        try:
            cancel.raise_if_cancelled()
            if self._is_busy(session_id):
                return
            # with the token: a send of the session takes this read out of the host's queue
            status = self._state(session_id, cancel).context_status
            if status is None or status.tokens <= status.budget:
                return
            _log.info(
                "context.idle_compaction",
                session_id=session_id,
                tokens=status.tokens,
                budget=status.budget,
            )
            self._compact(session_id, cancel)
        except LiteAgentError as e:  # busy again, closed meanwhile, ...: try after the next turn
            _log.info("context.idle_compaction_skipped", session_id=session_id, reason=repr(e))
        except Exception as e:  # noqa: BLE001 -- the timer thread must not die loudly
            _log.warning("context.idle_compaction_failed", session_id=session_id, error=repr(e))
        finally:
            with self._cond:
                self._running = None
                self._cond.notify_all()

    def close(self) -> None:
        """Clear every deadline and stop the thread (after a compaction it is running)."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._heap.clear()
            if self._running is not None:
                self._running[1].cancel("the agent is closing")
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT)
