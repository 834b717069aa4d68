"""ThreadPool: threads for the loops of short-lived actors, reused while they are warm.

A host that serves more sessions than ``max_live_sessions`` passivates one to start another many
times a second; each new actor would start a thread, and each thread opens its own connections
to the store (SQLite keeps one per thread). A pool hands an actor's loop to a thread whose last
actor has stopped, or starts one when none is free, so no more threads exist than actors running
at once (plus those idling out). A thread left without work for ``idle_s`` seconds ends, so an
idle host returns to its baseline; :meth:`ThreadPool.shed` ends them at once (a host whose
last sessions were passivated for idleness has no churn to keep threads warm for).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable

from liteagent.eventlog._logger import get_logger

__all__ = ["ThreadPool"]

_log = get_logger("liteagent.actors")
_current = threading.local()  # .pool: the pool whose thread this is


class _Worker:
    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()


class ThreadPool:
    """Runs each job on a free thread of its own (module docstring); never queues a job."""

    def __init__(self, name: str, idle_s: float = 2.0) -> None:
        self.name = name
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # the most recently freed last
        self._ids = itertools.count(1)
        self._closed = False
        self._shedding = False  # set by shed(), cleared by the next run()

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a free thread, or a new one (``RuntimeError`` when none can start)."""
        with self._lock:
            self._shedding = False
            if self._idle:
                self._idle.pop().jobs.put(job)
                return
        thread = threading.Thread(
            target=self._work, args=(job,), daemon=True, name=f"{self.name}-{next(self._ids)}"
        )
        thread.start()

    def close(self) -> None:
        """End the idle threads now, and each busy one when its job returns (a job run after
        this gets a thread of its own)."""
        with self._lock:  # put under the lock, as a worker timing out expects
            self._closed = True
            for worker in self._idle:
                worker.jobs.put(None)
            self._idle.clear()

    def shed(self) -> None:
        """End the idle threads now, and each busy one when its job returns, until the next
        :meth:`run`."""
        with self._lock:
            self._shedding = True
            for worker in self._idle:
                worker.jobs.put(None)
            self._idle.clear()

    def runs_this_thread(self) -> bool:
        """Whether the calling thread is one of this pool's (an actor's loop runs on it)."""
        return getattr(_current, "pool", None) is self

    def idle(self) -> int:
        """How many threads wait for a job (for tests)."""
        with self._lock:
            return len(self._idle)

    def _work(self, first: Callable[[], None]) -> None:
        _current.pool = self
        me = _Worker()
        job: Callable[[], None] | None = first
        del first
        while job is not None:
            try:
                job()
            except BaseException as e:  # noqa: BLE001 -- the thread serves the next job
                _log.error("pool.job_failed", pool=self.name, error=repr(e))
            job = None  # the finished actor is not kept alive while the thread idles
            with self._lock:
                if self._closed or self._shedding:
                    return
                self._idle.append(me)
            try:
                job = me.jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if me in self._idle:  # nobody handed it a job: the thread ends
                        self._idle.remove(me)
                        return
                job = me.jobs.get_nowait()  # handed one as it timed out (put under the lock)
