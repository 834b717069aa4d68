"""Cancellation shared by a caller and the work it started (a model call, a compaction, a turn).

A :class:`CancelToken` is one-way and thread-safe: any thread may cancel it; the worker checks it
between steps, or registers a callback that interrupts a blocking wait (e.g. closes a stream).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ._errors import OperationCancelledError
from ._logger import get_logger
from ._timeout import check_timeout

__all__ = ["CancelToken"]

_log = get_logger("liteagent.eventlog")


class CancelToken:
    """A one-way, thread-safe cancellation signal."""

    __slots__ = ("_callbacks", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._reason = ""

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """The reason given to :meth:`cancel` ("" while not cancelled)."""
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel (idempotent) and run the registered callbacks once, in this thread."""
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001 -- one failing callback must not stop the others
                _log.exception("cancel_token.callback_failed")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; return whether it was cancelled.
        ``timeout`` is None (until cancelled) or a number of seconds >= 0
        (:class:`InvalidArgumentError` otherwise)."""
        return self._event.wait(check_timeout(timeout))

    def on_cancel(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` when cancelled (at once if already cancelled); return an unregister
        function."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return lambda: self._remove(fn)
        fn()
        return lambda: None

    def _remove(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._callbacks:
                self._callbacks.remove(fn)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`OperationCancelledError` if cancelled."""
        if self._event.is_set():
            raise OperationCancelledError(self._reason or "cancelled")

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"
