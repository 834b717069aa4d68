"""Reply: the outcome of one request to the session host, delivered once.

The subset of ``concurrent.futures.Future`` the host and its callers use (``done``,
``cancel``, ``set_result``, ``set_exception``, ``add_done_callback``, ``result``,
``exception``), with a lighter body: a ``Future`` builds a condition (with its lock, deque and
bound methods) the moment it is made, which a send awaited on an event loop never uses. A reply
makes one only when a thread blocks on it, so a send waiting in the host's queue costs the
event loop, and the cyclic collector, a few objects instead of a dozen. Callbacks run in the
thread that completes the reply (or at once, when it is already done), exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, InvalidStateError, TimeoutError
from typing import Any

__all__ = ["Reply"]

_PENDING, _DONE, _CANCELLED = 0, 1, 2


class Reply:
    """A write-once outcome: a result, an exception, or cancelled (module docstring)."""

    __slots__ = ("_callbacks", "_error", "_event", "_interrupt", "_lock", "_result", "_state")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = _PENDING
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Reply], Any]] | None = None
        self._event: threading.Event | None = None
        self._interrupt: Callable[[str], Any] | None = None

    def on_interrupt(self, fn: Callable[[str], Any]) -> None:
        """Set what :meth:`interrupt` calls (by the side doing the work)."""
        self._interrupt = fn

    def interrupt(self, reason: str) -> None:
        """Ask the work behind it to stop, saying why; unlike :meth:`cancel`, its outcome still
        arrives (e.g. a turn's, once it has recorded how it ended)."""
        fn = self._interrupt
        if fn is not None and self._state == _PENDING:
            fn(reason)

    def done(self) -> bool:
        """Whether it has an outcome (a result, an exception, or cancelled)."""
        return self._state != _PENDING

    def cancelled(self) -> bool:
        """Whether it was cancelled."""
        return self._state == _CANCELLED

    def set_result(self, result: Any) -> None:
        """Complete it with ``result`` (``InvalidStateError`` when it is done)."""
        self._finish(_DONE, result, None)

    def set_exception(self, error: BaseException) -> None:
        """Complete it with ``error`` (``InvalidStateError`` when it is done)."""
        self._finish(_DONE, None, error)

    def cancel(self) -> bool:
        """Cancel it unless it is done; return whether it is cancelled now."""
        try:
            self._finish(_CANCELLED, None, None)
        except InvalidStateError:
            return self._state == _CANCELLED
        return True

    def _finish(self, state: int, result: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._state != _PENDING:
                raise InvalidStateError("the reply is done already")
            self._state, self._result, self._error = state, result, error
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        for fn in callbacks or ():
            fn(self)

    def add_done_callback(self, fn: Callable[[Reply], Any]) -> None:
        """Call ``fn(reply)`` once it is done (at once, in this thread, if it is)."""
        with self._lock:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def _wait(self, timeout: float | None) -> None:
        if self._state != _PENDING:
            return
        with self._lock:
            if self._state != _PENDING:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise TimeoutError

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception it completed with (``None`` for a result), waiting up to ``timeout``
        seconds (``TimeoutError``); ``CancelledError`` when it was cancelled."""
        self._wait(timeout)
        if self._state == _CANCELLED:
            raise CancelledError
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """Its result, or its exception raised, waiting up to ``timeout`` seconds
        (``TimeoutError``); ``CancelledError`` when it was cancelled."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._result
