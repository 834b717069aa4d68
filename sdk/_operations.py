"""OperationPool: the threads that run an agent's blocking operations, a bounded number at once.

The asyncio shell runs every compaction, restore and collection off the loop, and
``iter_compact`` runs its compaction beside the caller. A fixed handful of threads for all of
them would make a read wait behind a few slow compactions (a summarizer's model calls take
seconds) and run the compactions of a daemon's many sessions one after another. The pool runs up
to ``limit`` operations at once, each on a thread of its own, and queues the rest in order; a
thread idle for ``idle_s`` seconds ends, so an idle agent returns to its baseline. Starting a
thread is the caller's cost: the asyncio shell hands jobs over from its small executor, never
from the loop.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from liteagent.eventlog._logger import get_logger

__all__ = ["MAX_OPERATIONS", "OperationPool"]

_log = get_logger("liteagent.sdk")

MAX_OPERATIONS = 8
"""How many operations of one agent run at once by default (``max_operations``: compactions,
restores, collections and deletions of the asyncio shell, ``iter_compact``'s compactions, idle
compactions); the others wait in order. A compaction runs its compactor on a thread of its own
beside it, so an agent with every slot compacting uses twice as many threads."""


class OperationPool:
    """Runs each job on a thread of its own, at most ``limit`` at once, the rest in FIFO order
    (module docstring)."""

    def __init__(self, name: str, limit: int = MAX_OPERATIONS, idle_s: float = 2.0) -> None:
        self.name = name
        self.limit = limit
        self.idle_s = idle_s
        self._cond = threading.Condition()
        self._jobs: deque[Callable[[], object]] = deque()
        self._threads: set[threading.Thread] = set()
        self._waiting = 0  # threads waiting for a job
        self._active = 0  # jobs running
        self._closed = False
        self._ids = itertools.count(1)

    def run(self, job: Callable[[], object]) -> None:
        """Queue ``job``, which a free thread, a new one (within the limit) or the next thread
        to finish its job runs. ``RuntimeError`` when a thread was needed and none could start
        (the job is then not queued). A job that raises is logged; its thread goes on. A job
        may return a callable, which the thread calls once the job no longer counts as running
        (:meth:`load`): a job that answers its caller there is not counted after the answer."""
        with self._cond:
            self._jobs.append(job)
            if self._waiting >= len(self._jobs):  # a waiting thread for it and each before it
                self._cond.notify()
                return
            if len(self._threads) >= self.limit:
                return
            thread = threading.Thread(
                target=self._work, daemon=True, name=f"{self.name}-{next(self._ids)}"
            )
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:
            with self._cond:
                self._threads.discard(thread)
                try:
                    self._jobs.remove(job)
                except ValueError:  # another thread has taken it: it runs
                    return
            raise

    def load(self) -> tuple[int, int]:
        """``(jobs running, jobs queued)`` now (for an operator's metrics)."""
        with self._cond:
            return self._active, len(self._jobs)

    def stats(self) -> tuple[int, int]:
        """``(threads, queued jobs)`` now (for tests and metrics)."""
        with self._cond:
            return len(self._threads), len(self._jobs)

    def close(self, timeout: float) -> None:
        """Let the threads end once the queue is empty, and wait (at most ``timeout``) until
        they have; the queued jobs still run."""
        deadline = time.monotonic() + timeout
        me = threading.current_thread()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads - {me})
            if not self._cond.wait_for(
                lambda: not self._threads - {me}, timeout=max(0.0, deadline - time.monotonic())
            ):
                _log.warning("agent.operations_running", pool=self.name, threads=len(self._threads))
                return
        for thread in threads:  # each has left the pool: it returns at once
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                idle_until = time.monotonic() + self.idle_s
                while not self._jobs:
                    left = idle_until - time.monotonic()
                    if self._closed or left <= 0:  # idle for idle_s (counted from its last job,
                        self._leave(me)  # however often it is woken meanwhile): it ends
                        return
                    self._waiting += 1
                    self._cond.wait(left)
                    self._waiting -= 1
                job = self._jobs.popleft()
                self._active += 1
            then: object = None
            try:
                then = job()
            except BaseException as e:  # noqa: BLE001 -- the thread serves the next job
                _log.error("agent.operation_failed", pool=self.name, error=repr(e))
            finally:
                with self._cond:
                    self._active -= 1
            if callable(then):
                try:
                    then()
                except BaseException as e:  # noqa: BLE001 -- as a job's
                    _log.error("agent.operation_failed", pool=self.name, error=repr(e))
            del job, then  # what the job holds is not kept alive while the thread waits

    def _leave(self, me: threading.Thread) -> None:
        """Under the lock: ``me`` ends (``close`` waits for it)."""
        self._threads.discard(me)
        self._cond.notify_all()
