"""The CPU gate: at most a few session threads run their Python work at any moment.

Python runs one thread at a time (the GIL). A process hosting hundreds of busy sessions has
hundreds of actor threads; when their CPU work outgrows one core, all of them wait for the GIL
at once, and the event loop of an asyncio host waits behind them (a thread asking for the GIL
may wait several switch intervals of 5 ms while it goes to others). The gate makes them queue
here instead, in FIFO order, so only ``PERMITS`` of them compete with the loop for the GIL. The
GIL serializes that work anyway, so the gate costs no throughput; it only decides who waits.

A turn holds the gate (:func:`held`) for its CPU-bound stretches — folding the log, projecting
the view, building what it records — and gives it back (:func:`released`) around every wait: the
model call, a tool run (which may ask the file-snapshot actor), an append (the store's writer
commits groups of appends together, and must see them all), anything that calls out to code of
the user's. A thread never waits on another thread while holding the gate, and nothing is held
while waiting for it, so it cannot deadlock; both context managers restore the thread's state on
every path (an exception, a cancellation).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ._errors import AgentBusyError

__all__ = ["GATE", "PERMITS", "CpuGate", "held", "released"]

PERMITS = 2
"""How many threads run gated work at once: two, so one can run while the other is in a short
system call (a read of the log) that releases the GIL."""


class CpuGate:
    """A FIFO semaphore whose permit is handed straight to the next waiter: a thread that
    releases and asks again goes to the back of the queue, and a release never lets a late
    arrival overtake the waiters. Which threads hold it is kept per thread, so :meth:`held`
    nests and :meth:`released` is a no-op in a thread that does not hold it."""

    def __init__(self, permits: int) -> None:
        self._lock = threading.Lock()
        self._free = permits
        self._waiters: collections.deque[threading.Lock] = collections.deque()
        self._local = threading.local()
        self.permits = permits

    def acquire(self) -> None:
        """Wait for a permit (the waiters are served in arrival order)."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return
            handoff = threading.Lock()
            handoff.acquire()
            self._waiters.append(handoff)
        handoff.acquire()  # released by the thread that hands its permit on

    def release(self) -> None:
        """Give the permit to the first waiter, or back to the gate."""
        with self._lock:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._free += 1

    def set_permits(self, permits: int) -> None:
        """Change the number of permits (while nobody holds or waits: benchmarks compare
        settings in one process)."""
        with self._lock:
            if self._waiters or self._free != self.permits:
                raise AgentBusyError("the CPU gate is in use: its permits cannot change now")
            self._free = self.permits = permits

    def holding(self) -> bool:
        """Whether this thread holds a permit (through :meth:`held`)."""
        return getattr(self._local, "holding", False)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold a permit while the block runs (nested use is a no-op)."""
        if self.holding():
            yield
            return
        self.acquire()
        self._local.holding = True
        try:
            yield
        finally:
            if self._local.holding:
                self._local.holding = False
                self.release()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give the permit back while the block waits (a no-op when this thread holds none),
        and wait for one again afterwards, also when the block raised."""
        if not self.holding():
            yield
            return
        self._local.holding = False
        self.release()
        try:
            yield
        finally:
            self.acquire()
            self._local.holding = True

    def stats(self) -> tuple[int, int]:
        """``(permits in use, threads waiting)``, for tests and benchmarks."""
        with self._lock:
            return self.permits - self._free, len(self._waiters)


GATE = CpuGate(PERMITS)
"""The gate of this process (the GIL is the process's: every agent shares it)."""

held = GATE.held
released = GATE.released
