"""Live events fan-out: every subscriber gets its own bounded buffer; a slow subscriber never
blocks the session, it is told how many events it missed instead.

A subscription follows every session of the agent, or one (``session_id=``): the hub keeps the
subscribers of each session apart, so a publish reaches only those that follow its session (a
daemon with a subscriber per session does not offer every event to every subscriber). Two kinds
share the buffer and its overflow rule: :class:`Subscription` (blocking iteration, for threads)
and :class:`AsyncSubscription` (``async for``, for asyncio: a publisher appends to the buffer
and wakes the loop with one ``call_soon_threadsafe`` only when the consumer waits, so a busy
stream costs the loop one wake-up per batch, and no thread waits per subscriber).
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import msgspec

from liteagent.eventlog import validate_session_id
from liteagent.eventlog._shown import shown
from liteagent.eventlog._timeout import check_timeout
from liteagent.eventlog.errors import InvalidArgumentError

__all__ = ["AsyncSubscription", "EventHub", "LiveEvent", "Missed", "Subscription"]


class LiveEvent(msgspec.Struct, frozen=True):
    """Something that happened in a session just now (not persisted): a model stream delta, a
    tool call starting or ending, a turn ending."""

    session_id: str
    event: Any


class Missed(msgspec.Struct, frozen=True):
    """``count`` events were dropped because this subscriber's buffer was full."""

    count: int


class _Inbox(abc.ABC):
    """The bounded buffer both kinds of subscription share (guarded by ``_cond``)."""

    def __init__(self, hub: EventHub, maxsize: int, session_id: str | None) -> None:
        self._hub = hub
        self._maxsize = maxsize
        self.session_id = session_id
        self._buffer: collections.deque[LiveEvent | Missed] = collections.deque()
        self._missed = 0
        self._cond = threading.Condition(threading.Lock())
        self._closed = False

    def _store(self, event: LiveEvent) -> bool:
        """Buffer ``event`` (under ``_cond``); False when it was dropped or nobody listens. A
        full buffer drops the new event and counts it; the count is delivered as a
        :class:`Missed` before the next event that fits (or when the buffer runs dry)."""
        if self._closed:
            return False
        if len(self._buffer) >= self._maxsize:
            self._missed += 1
            return False
        if self._missed:
            self._buffer.append(Missed(self._missed))
            self._missed = 0
        self._buffer.append(event)
        return True

    def _take(self) -> LiveEvent | Missed | None:
        """The next buffered item (under ``_cond``), or None."""
        if self._buffer:
            return self._buffer.popleft()
        if self._missed:
            count, self._missed = self._missed, 0
            return Missed(count)
        return None

    @abc.abstractmethod
    def _offer(self, event: LiveEvent) -> None:
        """Buffer ``event`` and wake the consumer (called by the publishing thread)."""

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the agent closed)."""
        return self._closed

    def close(self) -> None:
        """Stop receiving events; an iteration in progress ends after the buffered ones."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._hub._remove(self)


class Subscription(_Inbox):
    """An iterator over live events; close it (or use it as a context manager) when done.

    Iteration blocks until an event arrives or the subscription is closed (then it ends).
    """

    def _offer(self, event: LiveEvent) -> None:
        with self._cond:
            if self._store(event):
                self._cond.notify()

    def get(self, timeout: float | None = None) -> LiveEvent | Missed | None:
        """The next event, or None when ``timeout`` passes or the subscription is closed.
        ``timeout`` is None (wait until either) or a number of seconds >= 0."""
        seconds = check_timeout(timeout)
        with self._cond:
            if not self._buffer and not self._missed and not self._closed:
                self._cond.wait(seconds)
            return self._take()

    def __iter__(self) -> Iterator[LiveEvent | Missed]:
        while True:
            item = self.get()
            if item is None:
                if self._closed:
                    return
                continue
            yield item

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSubscription(_Inbox):
    """An async iterator over live events (``async for event in sub``); close it, or use it as
    an async context manager, when done. Iteration waits without blocking the event loop until
    an event arrives or the subscription is closed (then it ends after the buffered events).

    Use it from one event loop at a time; :meth:`close` may be called from any thread.
    """

    def __init__(self, hub: EventHub, maxsize: int, session_id: str | None) -> None:
        super().__init__(hub, maxsize, session_id)
        self._loop: asyncio.AbstractEventLoop | None = None  # the waiting consumer's loop
        self._waiter: asyncio.Future[None] | None = None  # touched on that loop only

    def _offer(self, event: LiveEvent) -> None:
        with self._cond:
            if not self._store(event):
                return
            loop, self._loop = self._loop, None  # one wake-up per wait
        if loop is not None:
            self._wake_on(loop)

    def close(self) -> None:
        """Stop receiving events; an iteration in progress ends after the buffered ones."""
        with self._cond:
            self._closed = True
            loop, self._loop = self._loop, None
        self._hub._remove(self)
        if loop is not None:
            self._wake_on(loop)

    def _wake_on(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        """On the consumer's loop: let the waiting :meth:`get` look again."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> LiveEvent | Missed | None:
        """The next buffered event, or None when there is none yet (never waits)."""
        with self._cond:
            return self._take()

    async def get(self) -> LiveEvent | Missed | None:
        """The next event, waiting for one; None once the subscription is closed and its buffer
        is empty. Wrap it in ``asyncio.wait_for`` for a timeout."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                item = self._take()
                if item is not None or self._closed:
                    return item
                self._loop = loop
                waiter = self._waiter = loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> LiveEvent | Missed:
        item = await self.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EventHub:
    """Delivers live events to every current subscriber of their session.

    Subscribers are kept by weak reference: a subscription its owner dropped without closing
    it (a handler that failed before its ``close()``) is gone with its last reference, and no
    event is buffered for it any more. Subscribing and closing cost the same however many
    subscriptions there are; a publish goes over a snapshot of its session's subscribers, made
    again only after they changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held to change the groups, never to publish
        # the subscribers of every session (key None) and of each session, by id()
        self._groups: dict[str | None, dict[int, weakref.ref[_Inbox]]] = {}
        self._views: dict[str | None, tuple[weakref.ref[_Inbox], ...]] = {}  # snapshots
        self._dead: collections.deque[tuple[str | None, int]] = collections.deque()
        self._closed = False

    @staticmethod
    def _check(maxsize: object, session_id: object) -> None:
        if type(maxsize) is not int or maxsize < 1:
            raise InvalidArgumentError(f"maxsize must be an int >= 1, got {shown(maxsize)}")
        if session_id is not None:
            validate_session_id(session_id)

    def subscribe(self, maxsize: int = 1024, *, session_id: str | None = None) -> Subscription:
        """A new subscription with a buffer of ``maxsize`` events (an int >= 1; anything else
        raises :class:`InvalidArgumentError`), to the events of ``session_id`` only, or of
        every session (None)."""
        self._check(maxsize, session_id)
        sub = Subscription(self, maxsize, session_id)
        self._add(sub)
        return sub

    def subscribe_async(
        self, maxsize: int = 1024, *, session_id: str | None = None
    ) -> AsyncSubscription:
        """Like :meth:`subscribe`, as an :class:`AsyncSubscription` (never blocks)."""
        self._check(maxsize, session_id)
        sub = AsyncSubscription(self, maxsize, session_id)
        self._add(sub)
        return sub

    def _add(self, sub: _Inbox) -> None:
        key = sub.session_id
        dead = self._dead

        def gone(_: weakref.ref[_Inbox], entry: tuple[str | None, int] = (key, id(sub))) -> None:
            dead.append(entry)  # only that: it may run inside any allocation, lock held or not

        with self._lock:
            self._purge()
            if not self._closed:
                self._groups.setdefault(key, {})[id(sub)] = weakref.ref(sub, gone)
                self._views.pop(key, None)
                return
        sub.close()  # the agent is closed: the subscription ends at once

    def _purge(self) -> None:
        """Forget the subscriptions collected since (call with ``_lock`` held)."""
        while self._dead:
            key, ident = self._dead.popleft()
            group = self._groups.get(key)
            ref = None if group is None else group.get(ident)
            if ref is not None and ref() is None:
                self._drop(key, ident)

    def _drop(self, key: str | None, ident: int) -> None:
        group = self._groups.get(key)
        if group is not None and group.pop(ident, None) is not None:
            self._views.pop(key, None)
            if not group:
                del self._groups[key]

    def _view(self, key: str | None) -> tuple[weakref.ref[_Inbox], ...]:
        view = self._views.get(key)
        if view is None:
            with self._lock:
                self._purge()
                group = self._groups.get(key)
                view = () if group is None else tuple(group.values())
                if group is not None:
                    self._views[key] = view
        return view

    def publish(self, event: LiveEvent) -> None:
        """Offer ``event`` to every subscriber of its session; never blocks on a slow one."""
        for key in (None, event.session_id):
            if key in self._groups:
                for ref in self._view(key):
                    sub = ref()
                    if sub is not None:
                        sub._offer(event)

    def _remove(self, sub: _Inbox) -> None:
        with self._lock:
            group = self._groups.get(sub.session_id)
            ref = None if group is None else group.get(id(sub))
            if ref is not None and ref() is sub:
                self._drop(sub.session_id, id(sub))
            self._purge()

    def close(self) -> None:
        """Close every subscription (and each one made from now on)."""
        with self._lock:
            self._closed = True
            refs = [r for group in self._groups.values() for r in group.values()]
            self._groups, self._views = {}, {}
            self._dead.clear()
        for ref in refs:
            sub = ref()
            if sub is not None:
                sub.close()
