"""The live tail of a session: :meth:`Checkpointer.follow` returns a :class:`Follower`.

A follower delivers every event committed after its cursor, by any writer of the store, exactly
once and in seq order: as a blocking iterator (``for event in follower``), an asynchronous one
(``async for event in follower``) or by :meth:`Follower.get` with a timeout.

How it works, on every backend: the follower reads the log from its cursor with the backend's
ordinary ``read`` (so it checks what a read checks), and between reads it waits in the backend's
``_follow_wait`` hook until the backend sees a possible change (a notification, a new
``PRAGMA data_version``, a changed file size, a write of this process) or a bounded interval
passes; hints are only hints: every wake re-reads the position, and no wait lasts longer than
``max_staleness`` seconds, so a lost hint delays an event by at most that.

**A replaced history ends the follower.** When the session's generation changes under it (a
truncate, or a delete and perhaps a recreate), the next call raises
:class:`CheckpointConflictError` with ``expected`` the ``Position(cursor, generation)``
followed and ``actual`` the session's new position: nothing of the new history is yielded.
The caller re-reads the session (e.g. folds it again) and follows the new history from its
head. A follower of a session that does not exist yet (generation 0) accepts the first
history created under the id.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import CheckpointConflictError
from ._events import StoredEvent
from ._timeout import check_timeout

if TYPE_CHECKING:
    from ._contract import Checkpointer, Position

__all__ = ["DEFAULT_MAX_STALENESS", "Follower", "poll_for_change"]

DEFAULT_MAX_STALENESS = 2.0
"""The longest a follower waits between two reads of the position, whatever the hints say."""


class Follower(Iterator[StoredEvent], AsyncIterator[StoredEvent]):
    """A live tail of one session (see :meth:`Checkpointer.follow`).

    One consumer at a time: the iterators and :meth:`get` share the cursor. :meth:`close`
    (from any thread) ends the iteration; closing the checkpointer makes the next call raise
    :class:`CheckpointerClosedError`.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        session_id: str,
        since: int,
        generation: int | None,
        max_staleness: float,
    ) -> None:
        self._cp = checkpointer
        self._sid = session_id
        self._cursor = since
        self._generation = generation  # None: whatever history exists first
        self._max_staleness = max_staleness
        self._buffer: collections.deque[StoredEvent] = collections.deque()
        self._wake = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    @property
    def session_id(self) -> str:
        """The followed session."""
        return self._sid

    @property
    def cursor(self) -> int:
        """The seq of the last event delivered (the ``since`` given, before the first)."""
        return self._cursor

    @property
    def generation(self) -> int | None:
        """The generation of the history followed (``None`` until a history exists)."""
        return self._generation

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def get(self, timeout: float | None = None) -> StoredEvent | None:
        """The next event, waiting at most ``timeout`` seconds (``None``: as long as it takes);
        ``None`` on a timeout or once the follower is closed. ``timeout`` is None or a number
        of seconds >= 0 (:class:`InvalidArgumentError` otherwise)."""
        seconds = check_timeout(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._lock:
            if not self._buffer and not self._fill(deadline, None):
                return None
            return self._pop()

    def _pop(self) -> StoredEvent:
        """The next buffered event, delivered; call with ``_lock`` held."""
        event = self._buffer.popleft()
        self._cursor = event.seq
        return event

    def _fill_for_task(self, abort: threading.Event) -> bool:
        """Buffer the next events for an async caller (which pops them itself, so a task
        cancelled meanwhile loses nothing)."""
        with self._lock:
            return bool(self._buffer) or self._fill(None, abort)

    def close(self) -> None:
        """End the follower: a blocked call returns (``get`` gives ``None``, iteration stops)."""
        self._closed = True
        self._wake.set()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    # -- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> Follower:
        return self

    def __next__(self) -> StoredEvent:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> StoredEvent:
        if self._closed:
            raise StopAsyncIteration
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="liteagent-follow")
        loop = asyncio.get_running_loop()
        abort = threading.Event()
        try:
            filled = await loop.run_in_executor(self._executor, self._fill_for_task, abort)
        except asyncio.CancelledError:
            abort.set()  # the worker thread stops waiting; what it read stays buffered
            self._wake.set()
            raise
        with self._lock:
            if not filled or not self._buffer:
                raise StopAsyncIteration
            return self._pop()

    async def aclose(self) -> None:
        """:meth:`close`, for ``async with``-style use."""
        self.close()

    def __enter__(self) -> Follower:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the loop -----------------------------------------------------------------------------

    def _fill(self, deadline: float | None, abort: threading.Event | None) -> bool:
        """Buffer the next events; False on a timeout, once closed or aborted."""
        cp, sid = self._cp, self._sid
        while True:
            self._wake.clear()  # set by close() or an abort from here on: the wait returns
            if self._closed or (abort is not None and abort.is_set()):
                return False
            pos = cp.position(sid)
            self._check_generation(pos)
            if self._generation is not None and pos.head > self._cursor:
                events = list(cp.read(sid, self._cursor))
                # Generations are never reused: the same one after the read proves the read
                # saw only this history.
                self._check_generation(cp.position(sid))
                if events:
                    self._buffer.extend(events)
                    return True
                continue
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wait = self._max_staleness
            if deadline is not None:
                wait = min(wait, deadline - now)
            cp._follow_wait(sid, pos, self._wake, wait)

    def _check_generation(self, pos: Position) -> None:
        if self._generation is None:
            if pos.generation != 0:
                self._generation = pos.generation
            return
        if pos.generation != self._generation:
            raise CheckpointConflictError(
                self._sid,
                type(pos)(self._cursor, self._generation),
                pos,
                "the history was truncated or deleted while it was followed",
            )


def poll_for_change(
    probe: Callable[[], object],
    moved: Callable[[], bool],
    wake: threading.Event,
    timeout: float,
    interval: float = 0.01,
) -> None:
    """A ``_follow_wait`` built on a cheap probe (a file's size, ``PRAGMA data_version``):
    return once ``probe()`` differs from its value at the start, ``wake`` is set or ``timeout``
    passes. ``moved()`` (the position differs from the follower's) is checked once after the
    first probe, so a change between the follower's read and this call is not missed."""
    deadline = time.monotonic() + timeout
    baseline = probe()
    if moved():
        return
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or wake.wait(min(interval, left)) or probe() != baseline:
            return
