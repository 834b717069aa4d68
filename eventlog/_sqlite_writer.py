"""Group commit: one write connection per SQLite database per process, shared by every
checkpointer on that file, committing the writes that arrive together in one transaction.

There is no writer thread. A caller that finds nobody committing becomes the *leader*: it takes
every write queued so far (its own included), runs them in one ``BEGIN IMMEDIATE`` transaction
on the shared connection, each inside its own savepoint (so one write's conflict or error undoes
only that write), commits, and wakes their callers. Writes that arrive meanwhile queue up; when
the leader is done it hands the lead to the first of them, which commits the whole queue at
once. A lone write is committed at once (nothing waits for a batch to fill); under load the
batches grow by themselves while a commit (an fsync under ``synchronous="full"``) is running.
Every write is acknowledged only after the commit that contains it.

One connection per database per process (not per checkpointer object) because SQLite has one
writer per database anyway: a second connection of the same process would only queue on the
file lock, with SQLite's sleep-and-retry busy handler instead of this queue, and a thousand of
them are what made ``database is locked`` errors. Other processes keep their own writer; SQLite's
lock and ``busy_timeout_ms`` arbitrate between processes.

:func:`set_group_commit` (or ``LITEAGENT_SQLITE_GROUP_COMMIT=0`` in the environment) turns
batching off: the leader then commits one write per transaction (the benchmark's baseline).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import apsw

from ._errors import CheckpointerClosedError, LiteAgentError
from ._sqlite_db import map_error, open_connection
from ._sqlite_rows import Verified

__all__ = [
    "REGISTRY",
    "Batch",
    "WriteOp",
    "Writer",
    "commit_batch",
    "group_commit",
    "run_alone",
    "set_group_commit",
]

_SYNC_LEVEL = {"NORMAL": 1, "FULL": 2}
_enabled = os.environ.get("LITEAGENT_SQLITE_GROUP_COMMIT", "1") not in ("0", "false", "no", "off")


def set_group_commit(enabled: bool) -> None:
    """Turn batching of SQLite writes on or off for this process (on by default)."""
    global _enabled  # noqa: PLW0603 -- a process-wide switch, by design
    _enabled = bool(enabled)


def group_commit() -> bool:
    """Whether SQLite writes of this process are batched."""
    return _enabled


class Batch:
    """The transaction a batch of writes runs in: ``after_commit`` hooks run once it is
    committed (and only then)."""

    __slots__ = ("hooks",)

    def __init__(self) -> None:
        self.hooks: list[Callable[[], None]] = []

    def after_commit(self, hook: Callable[[], None]) -> None:
        self.hooks.append(hook)


WriteOp = Callable[[apsw.Connection, Batch], Any]
"""One write: runs inside the batch's transaction (in its own savepoint) and returns its result
or raises; nothing of a write that raised is committed."""


class _Item:
    __slots__ = ("busy_ms", "done", "error", "lead", "op", "own", "result", "session_id", "sync")

    def __init__(
        self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int, done: threading.Event,
        *, own: bool = False,
    ) -> None:
        self.op = op
        self.own = own
        self.session_id = session_id
        self.sync = sync
        self.busy_ms = busy_ms
        self.done = done
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None


_local = threading.local()


def _event() -> threading.Event:
    """This thread's wake-up event (a thread waits for one write at a time)."""
    ev: threading.Event | None = getattr(_local, "event", None)
    if ev is None:
        ev = _local.event = threading.Event()
    ev.clear()
    return ev


def _fatal(e: BaseException, conn: apsw.Connection) -> bool:
    """Whether an error inside a write ends the whole transaction (not just that write):
    I/O, a full disk, a lock, or SQLite having rolled the transaction back itself."""
    if isinstance(e, LiteAgentError):
        return not conn.in_transaction
    if isinstance(e, apsw.Error):
        return isinstance(
            e, (apsw.IOError, apsw.FullError, apsw.BusyError, apsw.LockedError,
                apsw.InterruptError, apsw.NoMemError, apsw.ConnectionClosedError),
        ) or not conn.in_transaction
    return not isinstance(e, Exception) or not conn.in_transaction


def _poisons(e: BaseException) -> bool:
    """Whether an error means SQLite met a damaged page: after that, every later statement of
    the transaction fails too (even after rolling back to a savepoint), so the transaction is
    rolled back and the batch's other writes are run again in a new one."""
    damaged = (apsw.CorruptError, apsw.NotADBError)
    return isinstance(e, damaged) or isinstance(e.__cause__, damaged)


def commit_batch(conn: apsw.Connection, items: list[_Item]) -> None:
    """Run ``items`` in one ``BEGIN IMMEDIATE`` transaction on ``conn`` and commit; set each
    item's result or error. A write's own error undoes only that write (savepoints); an error
    that ends the transaction (I/O, full disk, busy) fails every write of the batch; a write
    that meets a damaged page fails alone (the others are run again in a new transaction)."""
    pending: list[_Item] | None = items
    while pending:
        pending = _attempt(conn, pending)


def _attempt(conn: apsw.Connection, items: list[_Item]) -> list[_Item] | None:
    """One transaction over ``items``; returns the writes to run again, if any."""
    batch = Batch()
    alone = len(items) == 1
    for it in items:
        it.error = it.result = None
    try:
        conn.execute("BEGIN IMMEDIATE")
    except BaseException as e:  # noqa: BLE001 -- reported to every caller of the batch
        for it in items:
            it.error = e
        return None
    live: list[_Item] = []
    fatal: BaseException | None = None
    for it in items:
        try:
            if not alone:
                conn.execute("SAVEPOINT w")
            try:
                it.result = it.op(conn, batch)
            except BaseException as e:  # noqa: BLE001 -- reported to the write's caller
                it.error = e
                if _poisons(e):
                    conn.execute("ROLLBACK")
                    return [other for other in items if other is not it]
                if _fatal(e, conn):
                    fatal = e
                    break
                if not alone:
                    conn.execute("ROLLBACK TO w")
                    conn.execute("RELEASE w")
                continue
            if not alone:
                conn.execute("RELEASE w")
        except BaseException as e:  # noqa: BLE001 -- a savepoint failed: the batch fails with it
            fatal = e
            break
        live.append(it)
    if fatal is None and live:
        try:
            conn.execute("COMMIT")
        except BaseException as e:  # noqa: BLE001 -- every write of the batch failed with it
            fatal = e
    if fatal is not None or not live:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if fatal is not None:
            for it in items:
                if it.error is None or it in live:
                    it.error = fatal
                    it.result = None
        return None
    for hook in batch.hooks:
        hook()
    return None


def _outcome(item: _Item) -> Any:
    """The item's result, or its error raised (apsw and OS errors translated)."""
    e = item.error
    if e is None:
        return item.result
    item.error = None
    if isinstance(e, (apsw.Error, OSError, UnicodeError)):
        raise map_error(e, item.session_id) from e
    raise e


def _run_own(conn: apsw.Connection, item: _Item) -> None:
    """Run a write that manages its own transactions (on a connection outside any)."""
    batch = Batch()
    try:
        item.result = item.op(conn, batch)
    except BaseException as e:  # noqa: BLE001 -- reported to the write's caller
        item.error = e
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return
    for hook in batch.hooks:
        hook()


def run_alone(conn: apsw.Connection, op: WriteOp, session_id: str | None, *,
              own_transaction: bool = False) -> Any:
    """Run one write in its own transaction on ``conn`` (which the caller owns)."""
    item = _Item(op, session_id, "", 0, _event(), own=own_transaction)
    if own_transaction:
        _run_own(conn, item)
    else:
        commit_batch(conn, [item])
    return _outcome(item)


class Writer:
    """The write connection of one database file in this process and its queue of writes."""

    def __init__(self, file: str, key: object) -> None:
        self.file = file
        self.key = key
        self.users = 0
        self._conn: apsw.Connection | None = None
        self._lock = threading.Lock()
        self._queue: list[_Item] = []
        self._leading = False
        self._closing = False
        self._sync = ""
        self._busy_ms = -1
        self.verified = Verified()

    def submit(self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int, *,
               own_transaction: bool = False) -> Any:
        """Run ``op`` in the next committed batch and return its result (or raise its error,
        translated); returns only after the commit that contains it. With
        ``own_transaction``, ``op`` runs alone, outside any transaction, and makes its own."""
        item = _Item(op, session_id, sync, busy_ms, _event(), own=own_transaction)
        with self._lock:
            if self._closing:
                raise CheckpointerClosedError("the SQLite checkpointer is closed")
            self._queue.append(item)
            lead = not self._leading
            if lead:
                self._leading = True
        if not lead:
            item.done.wait()
            lead = item.lead
        if lead:
            self._lead()
        return _outcome(item)

    def _lead(self) -> None:
        """Commit what is queued (the leader's own write among it), wake its callers, and hand
        the lead to the first write queued meanwhile."""
        with self._lock:
            if _enabled:
                batch, self._queue = self._queue, []
            else:
                batch = [self._queue.pop(0)]
        try:
            try:
                conn = self._connection(batch)
            except BaseException as e:  # noqa: BLE001 -- reported to every caller of the batch
                for it in batch:
                    it.error = e
            else:
                grouped = [it for it in batch if not it.own]
                if grouped:
                    commit_batch(conn, grouped)
                for it in batch:
                    if it.own:
                        _run_own(conn, it)
        finally:
            with self._lock:
                nxt = self._queue[0] if self._queue else None
                if nxt is not None:
                    nxt.lead = True
                else:
                    self._leading = False
                    if self._closing:
                        self._close_conn()
            for it in batch:
                it.done.set()
            if nxt is not None:
                nxt.done.set()

    def _connection(self, batch: list[_Item]) -> apsw.Connection:
        """The write connection, opened on first use, set to the strictest ``synchronous``
        and the longest busy timeout the batch's writers asked for."""
        sync = max((it.sync for it in batch), key=_SYNC_LEVEL.__getitem__)
        busy = max(it.busy_ms for it in batch)
        conn = self._conn
        if conn is None:
            conn = self._conn = open_connection(self.file, busy, sync)
            self._sync, self._busy_ms = sync, busy
        if sync != self._sync:
            conn.pragma("synchronous", sync)
            self._sync = sync
        if busy != self._busy_ms:
            conn.set_busy_timeout(busy)
            self._busy_ms = busy
        return conn

    def close(self) -> None:
        """Close the connection now, or when the current leader is done."""
        with self._lock:
            self._closing = True
            if not self._leading:
                self._close_conn()

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(apsw.Error):
                conn.close()


class _Registry:
    """The writers of this process, one per database file (by device and inode)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: dict[object, Writer] = {}

    def acquire(self, file: str, key: object) -> Writer:
        with self._lock:
            w = self._writers.get(key)
            if w is None:
                w = self._writers[key] = Writer(file, key)
            w.users += 1
            return w

    def release(self, w: Writer) -> None:
        with self._lock:
            w.users -= 1
            if w.users > 0:
                return
            if self._writers.get(w.key) is w:
                del self._writers[w.key]
        w.close()

    def forget_all(self) -> None:
        """In a forked child: the parent's connections are not ours to use (nor to close)."""
        self._writers = {}
        self._lock = threading.Lock()


REGISTRY = _Registry()
os.register_at_fork(after_in_child=REGISTRY.forget_all)
