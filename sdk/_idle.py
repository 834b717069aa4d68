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
from functools import partial
from typing import Any

from liteagent.eventlog import CancelToken
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import LiteAgentError

__all__ = ["MAX_IDLE_COMPACTIONS", "IdleCompaction"]

_log = get_logger("liteagent.sdk")
_MAX_SLEEP = 60.0
_JOIN_TIMEOUT = 1.0  # a compaction in progress is not waited for: it fails on the closed agent
_STOP_WAIT_S = 30.0  # how long a send waits for a cancelled idle compaction to stop
MAX_IDLE_COMPACTIONS = 4
"""How many idle compactions run at once by default (half the agent's operation pool: the
operations users ask for keep room beside them)."""


class IdleCompaction:
    """One deadline per session, set when a turn ends and cleared when one starts; one timer
    thread for all of them, never one per session.

    When a deadline passes and the session is still idle (no turn, no background task), its
    log still where its last send here left it (see :meth:`turn_left`), and its latest context
    status says the conversation was over budget (``tokens > budget``),
    ``compact`` runs (the agent's compactor, under the maintenance lock, like
    ``agent.compact()``) on a thread ``run`` gives it (the agent's operation pool), up to
    ``limit`` sessions at once, each with a cancel token that
    :meth:`turn_started` fires. A deadline that passes while that many run waits for one to end.
    """

    def __init__(
        self,
        delay: float,
        *,
        compact: Callable[[str, CancelToken, tuple[int, int] | None], Any],
        is_busy: Callable[[str], bool],
        state: Callable[[str, CancelToken], Any],
        run: Callable[[Callable[[], None]], None],
        limit: int = MAX_IDLE_COMPACTIONS,
    ) -> None:
        self.delay = delay
        self._compact = compact
        self._is_busy = is_busy
        self._state = state
        self._run_job = run
        self.limit = limit
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._closed = False
        self._running: dict[str, CancelToken] = {}  # the compactions in progress
        self._started: set[CancelToken] = set()  # those of them that began on a pool thread
        # where each session's last send left its log (see turn_left)
        self._left: dict[str, tuple[int, int] | None] = {}
        self._thread = threading.Thread(target=self._run, name="liteagent-idle", daemon=True)
        self._thread.start()  # here, not on an event loop at the first turn

    def turn_started(self, session_id: str, *, wait: bool = True) -> bool:
        """Clear the session's deadline (a turn is starting, or a restore rewrites it), and
        cancel an idle compaction of it in progress; with ``wait``, wait (bounded) until that
        one has stopped. Returns whether one of the session is still in progress."""
        with self._cond:
            self._due.pop(session_id, None)
            self._left.pop(session_id, None)
            token = self._running.get(session_id)
            if token is None:
                return False
            token.cancel("a turn or restore of the session is starting")
            if token not in self._started:  # still queued on the operation pool: it will do
                del self._running[session_id]  # nothing when it runs (the caller may be
                self._cond.notify_all()  # holding the pool's last free place)
                return False
            if wait:
                self._cond.wait_for(
                    lambda: self._running.get(session_id) is not token, timeout=_STOP_WAIT_S
                )
            return self._running.get(session_id) is token

    def settle(self, session_id: str) -> None:
        """Wait (bounded) until no idle compaction of ``session_id`` is in progress (after
        :meth:`turn_started` cancelled it without waiting)."""
        self.turn_started(session_id, wait=True)

    def turn_left(self, session_id: str, position: tuple[int, int] | None) -> None:
        """A send of the session ended (on its thread), leaving its log at ``position`` (its
        head and generation; None when unknown): its idle compaction compacts only a log still
        there, never one another agent or process wrote or restored since (a compaction after
        a restore would keep that restore from being undone)."""
        with self._cond:
            if not self._closed:
                self._left[session_id] = position

    def turn_finished(self, session_id: str) -> None:
        """Set (or move) the session's deadline."""
        with self._cond:
            if self._closed:
                return
            due = time.monotonic() + self.delay
            self._due[session_id] = due
            heapq.heappush(self._heap, (due, session_id))
            self._cond.notify_all()

    def running(self) -> int:
        """How many idle compactions are in progress (for tests)."""
        with self._cond:
            return len(self._running)

    def _next(self) -> tuple[str, CancelToken, tuple[int, int] | None] | None:
        """Wait for the next deadline and a free place; the session whose deadline passed (its
        compaction now in progress) with where its last send left its log, or None when
        closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # moved or cleared since
                if len(self._running) >= self.limit:
                    self._cond.wait(_MAX_SLEEP)  # until one ends (or a deadline moves)
                    continue
                if self._heap and self._heap[0][0] <= now:
                    _, session_id = heapq.heappop(self._heap)
                    del self._due[session_id]
                    if session_id in self._running:  # still compacting: after this one
                        self.turn_finished_locked(session_id)
                        continue
                    # in progress from here on, so that a send from now on cancels it
                    token = self._running[session_id] = CancelToken()
                    return session_id, token, self._left.pop(session_id, None)
                wait = self._heap[0][0] - now if self._heap else _MAX_SLEEP
                self._cond.wait(min(wait, _MAX_SLEEP))
            return None

    def turn_finished_locked(self, session_id: str) -> None:
        """:meth:`turn_finished` with the lock held."""
        due = time.monotonic() + self.delay
        self._due[session_id] = due
        heapq.heappush(self._heap, (due, session_id))

    def _run(self) -> None:
        while (running := self._next()) is not None:
            session_id, token, left = running
            try:
                self._run_job(partial(self._fire, session_id, token, left))
            except Exception as e:  # noqa: BLE001 -- no thread for it: after the next turn
                _log.info("context.idle_compaction_skipped", session_id=session_id, reason=repr(e))
                self._ended(session_id, token)

    def _fire(self, session_id: str, cancel: CancelToken, left: tuple[int, int] | None) -> None:
        with self._cond:
            if self._running.get(session_id) is not cancel:
                return  # cancelled while it was queued (see turn_started)
            self._started.add(cancel)
        try:
            cancel.raise_if_cancelled()
            if left is None:  # the send failed before it knew where the log is: not this time
                _log.info(
                    "context.idle_compaction_skipped",
                    session_id=session_id,
                    reason="where the last send left the log is unknown",
                )
                return
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
            self._compact(session_id, cancel, left)
        except LiteAgentError as e:  # busy again, closed meanwhile, ...: try after the next turn
            _log.info("context.idle_compaction_skipped", session_id=session_id, reason=repr(e))
        except Exception as e:  # noqa: BLE001 -- a pool's thread must not die loudly
            _log.warning("context.idle_compaction_failed", session_id=session_id, error=repr(e))
        finally:
            self._ended(session_id, cancel)

    def _ended(self, session_id: str, token: CancelToken) -> None:
        with self._cond:
            self._started.discard(token)
            if self._running.get(session_id) is token:
                del self._running[session_id]
            self._cond.notify_all()

    def close(self) -> None:
        """Clear every deadline, cancel the compactions in progress and stop the thread."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._left.clear()
            self._heap.clear()
            for token in self._running.values():
                token.cancel("the agent is closing")
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT)
