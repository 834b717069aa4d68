"""Idle compaction for daemons: a session left idle for ``idle_compact_after`` seconds while its
last request was above its budget is compacted between turns, without waiting for input."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from liteagent.eventlog import LiteAgentError

__all__ = ["IdleCompaction"]

_log = structlog.get_logger("liteagent.sdk")


class IdleCompaction:
    """One timer per session, restarted when a turn ends and stopped when one starts.

    When it fires and the session is still idle (no turn, no background task) and its latest
    context status says the conversation was over budget (``tokens > budget``), ``compact``
    runs (the agent's compactor, under the maintenance lock, like ``agent.compact()``).
    """

    def __init__(self, delay: float, *, compact: Callable[[str], Any],
                 is_busy: Callable[[str], bool], state: Callable[[str], Any]) -> None:
        self.delay = delay
        self._compact = compact
        self._is_busy = is_busy
        self._state = state
        self._lock = threading.Lock()
        self._timers: dict[str, threading.Timer] = {}
        self._closed = False

    def turn_started(self, session_id: str) -> None:
        """Stop the session's timer (a turn is starting)."""
        with self._lock:
            timer = self._timers.pop(session_id, None)
        if timer is not None:
            timer.cancel()

    def turn_finished(self, session_id: str) -> None:
        """Start (or restart) the session's timer."""
        timer = threading.Timer(self.delay, self._fire, (session_id,))
        timer.daemon = True
        with self._lock:
            if self._closed:
                return
            old = self._timers.pop(session_id, None)
            self._timers[session_id] = timer
        if old is not None:
            old.cancel()
        timer.start()

    def _fire(self, session_id: str) -> None:
        with self._lock:
            if self._closed or self._timers.get(session_id) is None:
                return
            self._timers.pop(session_id, None)
        try:
            if self._is_busy(session_id):
                return
            status = self._state(session_id).context_status
            if status is None or status.tokens <= status.budget:
                return
            _log.info("context.idle_compaction", session_id=session_id, tokens=status.tokens,
                      budget=status.budget)
            self._compact(session_id)
        except LiteAgentError as e:  # busy again, closed meanwhile, ...: try after the next turn
            _log.info("context.idle_compaction_skipped", session_id=session_id, reason=repr(e))
        except Exception as e:  # noqa: BLE001 -- a timer thread must not die loudly
            _log.warning("context.idle_compaction_failed", session_id=session_id, error=repr(e))

    def close(self) -> None:
        """Stop every timer."""
        with self._lock:
            self._closed = True
            timers = list(self._timers.values())
            self._timers.clear()
        for t in timers:
            t.cancel()
