"""Live events fan-out: every subscriber gets its own bounded buffer; a slow subscriber never
blocks the session, it is told how many events it missed instead."""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import msgspec

from liteagent.eventlog import InvalidArgumentError

__all__ = ["EventHub", "LiveEvent", "Missed", "Subscription"]


class LiveEvent(msgspec.Struct, frozen=True):
    """Something that happened in a session just now (not persisted): a model stream delta, a
    tool call starting or ending, a turn ending."""

    session_id: str
    event: Any


class Missed(msgspec.Struct, frozen=True):
    """``count`` events were dropped because this subscriber's buffer was full."""

    count: int


class Subscription:
    """An iterator over live events; close it (or use it as a context manager) when done.

    Iteration blocks until an event arrives or the subscription is closed (then it ends).
    """

    def __init__(self, hub: EventHub, maxsize: int) -> None:
        self._hub = hub
        self._maxsize = maxsize
        self._buffer: collections.deque[LiveEvent | Missed] = collections.deque()
        self._missed = 0
        self._cond = threading.Condition()
        self._closed = False

    def _offer(self, event: LiveEvent) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._buffer) >= self._maxsize:
                self._missed += 1
                return
            if self._missed:
                self._buffer.append(Missed(self._missed))
                self._missed = 0
            self._buffer.append(event)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> LiveEvent | Missed | None:
        """The next event, or None when ``timeout`` passes or the subscription is closed.
        ``timeout`` is None (wait until either) or a number of seconds >= 0."""
        if timeout is not None:
            if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                    or math.isnan(timeout) or timeout < 0):
                raise InvalidArgumentError(
                    f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
            timeout = min(float(timeout), threading.TIMEOUT_MAX)
        with self._cond:
            if not self._buffer and not self._closed:
                self._cond.wait(timeout)
            if self._buffer:
                return self._buffer.popleft()
            if self._missed:
                count, self._missed = self._missed, 0
                return Missed(count)
            return None

    def __iter__(self) -> Iterator[LiveEvent | Missed]:
        while True:
            item = self.get()
            if item is None:
                if self._closed:
                    return
                continue
            yield item

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop receiving events; an iteration in progress ends after the buffered ones."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._hub._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EventHub:
    """Delivers live events to every current subscriber."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """A new subscription with a buffer of ``maxsize`` events (an int >= 1; anything else
        raises :class:`InvalidArgumentError`)."""
        if type(maxsize) is not int or maxsize < 1:
            raise InvalidArgumentError(f"maxsize must be an int >= 1, got {maxsize!r}")
        sub = Subscription(self, maxsize)
        with self._lock:
            self._subs.append(sub)
        return sub

    def publish(self, event: LiveEvent) -> None:
        """Offer ``event`` to every subscriber; never blocks on a slow one."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub._offer(event)

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def close(self) -> None:
        """Close every subscription."""
        with self._lock:
            subs, self._subs = self._subs, []
        for sub in subs:
            sub.close()
