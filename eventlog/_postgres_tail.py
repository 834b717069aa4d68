"""The live tail of the PostgreSQL backend: one LISTEN connection per checkpointer.

Every write of a session (append, truncate, delete, repair) calls ``pg_notify(channel,
session_id)`` in its own statement or transaction, so the notification is delivered when, and
only if, it commits. A watcher thread holds its own autocommit connection (``listen_dsn``, or
the store's DSN), issues ``LISTEN`` and then wakes every waiting follower, which re-reads its
position: a commit before the ``LISTEN`` is caught by that read, a commit after it notifies.
Notifications are hints only: a follower always reads the log from its cursor, and never waits
longer than its ``max_staleness`` for a hint (the safety poll). When the connection fails, the
watcher wakes every follower (they read again), backs off (50 ms doubling to 5 s, with
jitter), reconnects, listens and wakes them again.

With ``notify=False`` (no ``pg_notify`` in the writes: every notifying commit takes a
database-wide lock, which matters at thousands of writers) followers poll their position every
``poll_interval`` seconds instead.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from ._contract import Position
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["Watcher"]

_LISTEN_WAIT = 0.25  # seconds per notifies() call: how soon a closing checkpointer stops it
_FIRST_DELAY = 0.05
_MAX_DELAY = 5.0


class Watcher:
    """The LISTEN connection of one checkpointer and the followers waiting on it."""

    def __init__(self, cp: PostgresCheckpointer) -> None:
        self._cp = cp
        self._waiters: dict[str, set[threading.Event]] = {}
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.reconnects = 0  # how many times the watcher listened again after a failure

    def wait(
        self, session_id: str, position: Position, wake: threading.Event, timeout: float
    ) -> None:
        """The follower hook: return on a notification for ``session_id``, when ``wake`` is
        set, or after ``timeout``."""
        deadline = time.monotonic() + timeout
        self._start()
        if not self._listening.is_set() and not self._wait_listening(wake, deadline):
            return  # not listening (the server is away): the follower reads again
        with self._lock:
            self._waiters.setdefault(session_id, set()).add(wake)
        try:
            if self._cp._position(session_id) != position:
                return  # committed before this follower was registered
            wake.wait(max(0.0, deadline - time.monotonic()))
        finally:
            with self._lock:
                waiting = self._waiters.get(session_id)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._waiters[session_id]

    def _wait_listening(self, wake: threading.Event, deadline: float) -> bool:
        while not self._listening.wait(0.01):
            if wake.is_set() or self._stopped or time.monotonic() >= deadline:
                return False
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._loop, name="liteagent-postgres-listen", daemon=True
                )
                self._thread.start()

    def _wake(self, session_id: str | None) -> None:
        with self._lock:
            groups = (
                list(self._waiters.values())
                if session_id is None
                else ([self._waiters[session_id]] if session_id in self._waiters else [])
            )
            for waiting in groups:
                for wake in waiting:
                    wake.set()

    def _loop(self) -> None:
        delay = _FIRST_DELAY
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._cp.channel))
        while not self._stopped:
            conn: Conn | None = None
            try:
                conn = self._cp._connect(listen=True)
                conn.execute(listen)
                self._listening.set()
                self._wake(None)  # catch up: every follower reads its position again
                delay = _FIRST_DELAY
                while not self._stopped:
                    for note in conn.notifies(timeout=_LISTEN_WAIT):
                        self._wake(note.payload)
            except psycopg.Error:
                self._listening.clear()
                self._wake(None)
                if self.stopped:
                    break
                self.reconnects += 1
                time.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 -- jitter
                delay = min(delay * 2, _MAX_DELAY)
            finally:
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
        self._listening.clear()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._stopped

    def close(self) -> None:
        """Stop the watcher (its followers then find the checkpointer closed)."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
