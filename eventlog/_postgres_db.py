"""Connections of the PostgreSQL backend: the pool, error classes by SQLSTATE, and retries.

Every statement runs on an autocommit connection from a ``psycopg_pool.ConnectionPool`` (no
transaction is ever left open while a caller iterates). :meth:`Database.run` retries what is
safe to retry, with capped exponential backoff and jitter until ``retry_timeout``:

====================================================  ===========  =============================
error                                                 applied?     what ``run`` does
====================================================  ===========  =============================
40001, 40P01 (serialization, deadlock), 55P03 (lock   no           retry
timeout), 57014 (statement timeout), 53300 (too many
connections), 57P03 (cannot connect now), no free
pooled connection
the connection lost (08xxx, 57P01/57P02, a closed     unknown      retry: the operation passed
socket)                                                            to ``run`` must be idempotent
                                                                   or find out (``attempt > 0``)
anything else (22xxx data, 23xxx integrity, 42xxx     no           never retried: translated
programming, ...)
====================================================  ===========  =============================

Errors reach the caller as the library's own: a server that cannot be reached (or keeps
failing) is :class:`StorageIOError`, a refusal of the server :class:`CheckpointerError` with the
SQLSTATE in the message.
"""

from __future__ import annotations

import errno
import random
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ._errors import CheckpointerClosedError, CheckpointerError, LiteAgentError, StorageIOError

__all__ = ["Conn", "Database", "classify", "is_lost", "translate"]

Conn = psycopg.Connection[Any]
T = TypeVar("T")

_TRANSIENT = frozenset({"40001", "40P01", "55P03", "57014", "53300", "57P03"})
_LOST = frozenset({"57P01", "57P02"})
_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0


def is_lost(e: BaseException) -> bool:
    """Whether ``e`` means the connection is gone (the statement may or may not have run)."""
    if not isinstance(e, psycopg.OperationalError):
        return False
    state = e.sqlstate
    return state is None or state.startswith("08") or state in _LOST


def classify(e: BaseException) -> str:
    """``"lost"`` (the connection; outcome unknown), ``"transient"`` (not applied; retry) or
    ``"fatal"`` (never retried)."""
    if isinstance(e, PoolTimeout):
        return "transient"
    if is_lost(e):
        return "lost"
    if isinstance(e, psycopg.Error) and e.sqlstate in _TRANSIENT:
        return "transient"
    return "fatal"


def translate(e: BaseException, what: str) -> CheckpointerError:
    """The library's error for a psycopg error ``e`` raised while doing ``what``."""
    if isinstance(e, PoolTimeout) or is_lost(e):
        return StorageIOError(errno.ECONNRESET, f"PostgreSQL unreachable during {what}: {e}")
    state = e.sqlstate if isinstance(e, psycopg.Error) else None
    if state is not None and state.startswith("53"):  # insufficient resources (disk full, ...)
        return StorageIOError(errno.ENOSPC, f"PostgreSQL cannot {what} ({state}): {e}")
    if state in _TRANSIENT:  # a lock or statement timeout, a conflict: retried until now
        return StorageIOError(
            errno.EBUSY, f"PostgreSQL could not {what} within the retry time ({state}): {e}"
        )
    return CheckpointerError(f"PostgreSQL refused {what} (SQLSTATE {state}): {e}")


class Database:
    """The pool of one checkpointer, and the retry loop every operation runs in."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        owns_pool: bool,
        retry_timeout: float,
        is_closed: Callable[[], bool],
        configure: Callable[[Conn], None] | None = None,
    ) -> None:
        self.pool = pool
        self._owns_pool = owns_pool
        # A pool of the caller's: its connections get the checkpointer's settings (timeouts,
        # durability) on first use here, as the pool of its own gets them when it connects.
        self._configure = configure
        self._configured: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._retry_timeout = retry_timeout
        self._is_closed = is_closed
        self._active = 0  # connections checked out of the pool right now
        self._idle = threading.Condition()

    @contextmanager
    def connection(self, *, closing: bool = False) -> Iterator[Conn]:
        """A pooled autocommit connection (no retry: see :meth:`run`); ``closing``: also
        while the checkpointer closes (its leases are released then)."""
        with self._idle:
            if not closing and self._is_closed():
                raise CheckpointerClosedError("PostgresCheckpointer is closed")
            self._active += 1
        try:
            with self.pool.connection(timeout=self._retry_timeout) as conn:
                if not conn.autocommit:  # a pool given by the caller
                    conn.autocommit = True
                if self._configure is not None and conn not in self._configured:
                    self._configure(conn)
                    self._configured.add(conn)
                yield conn
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def run(self, fn: Callable[[Conn, int], T], what: str) -> T:
        """``fn(connection, attempt)`` until it returns, retrying transient failures and lost
        connections (``attempt`` counts the tries before: an operation that may have been
        applied by an earlier try checks that when ``attempt > 0``)."""
        deadline = time.monotonic() + self._retry_timeout
        delay = _FIRST_DELAY
        attempt = 0
        while True:
            try:
                with self.connection() as conn:
                    return fn(conn, attempt)
            except LiteAgentError:
                raise
            except (TypeError, ValueError, OverflowError, struct.error) as e:
                # a stored value that does not have its column's type: a schema changed by hand
                raise CheckpointerError(
                    f"PostgreSQL: {what} found a stored value that does not have its column's "
                    f"type (was the schema changed by hand?): {type(e).__name__}: {e}"
                ) from e
            except (psycopg.Error, PoolTimeout) as e:
                kind = classify(e)
                pause = delay * random.uniform(0.5, 1.0)  # noqa: S311 -- jitter, not security
                if kind == "fatal" or time.monotonic() + pause > deadline:
                    raise translate(e, what) from e
                if self._is_closed():
                    raise CheckpointerClosedError("PostgresCheckpointer is closed") from e
            time.sleep(pause)
            delay = min(delay * 2, _MAX_DELAY)
            attempt += 1

    def close(self) -> None:
        """Close the pool if this checkpointer opened it, once the operations already running
        (in other threads) have given their connections back: a connection handed to a
        thread while the pool closes could otherwise be left to the garbage collector."""
        if self._owns_pool:
            with self._idle:
                self._idle.wait_for(lambda: self._active == 0, timeout=5.0)
            self.pool.close(timeout=5)
