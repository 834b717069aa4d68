"""Running a batch of SQLite writes in one transaction (see ``_sqlite_writer``).

A write that fails without having changed anything (a conflict, damage found by a check) fails
alone and the others go on. A write that fails after changing rows, or that meets a damaged page
(after which SQLite refuses every statement of the transaction), makes the transaction roll back:
it fails, and the others run again in a new one. An error that ends the transaction (I/O, a full
disk, a lock) fails every write of the batch. No savepoints: they would cost two statements per
write.
"""

from __future__ import annotations

import _thread
import threading
from typing import Any

import apsw

from ._errors import LiteAgentError
from ._shown import shown
from ._sqlite_batch import Batch, BatchConflict, WriteOp
from ._sqlite_db import map_error

__all__ = [
    "LOCAL",
    "Item",
    "Waiter",
    "WriteInterruptedError",
    "commit_batch",
    "interrupted",
    "outcome",
    "run_alone",
    "run_own",
    "unsettled",
    "waiter",
]


class Item:
    __slots__ = ("busy_ms", "done", "error", "lead", "op", "own", "result", "session_id", "sync")

    def __init__(
        self,
        op: WriteOp,
        session_id: str | None,
        sync: str,
        busy_ms: int,
        done: Waiter,
        *,
        own: bool = False,
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


LOCAL = threading.local()
Waiter = _thread.LockType


def waiter() -> Waiter:
    """This thread's wake-up lock, held while idle: a waiting caller blocks acquiring it, its
    leader releases it once (a thread waits for one write at a time)."""
    w: Waiter | None = getattr(LOCAL, "waiter", None)
    if w is None:
        w = LOCAL.waiter = threading.Lock()
        w.acquire()
    return w


def _fatal(e: BaseException, conn: apsw.Connection) -> bool:
    """Whether an error inside a write ends the whole transaction (not just that write):
    I/O, a full disk, a lock, or SQLite having rolled the transaction back itself."""
    if isinstance(e, LiteAgentError):
        return not conn.in_transaction
    if isinstance(e, apsw.Error):
        return (
            isinstance(
                e,
                (
                    apsw.IOError,
                    apsw.FullError,
                    apsw.BusyError,
                    apsw.LockedError,
                    apsw.InterruptError,
                    apsw.NoMemError,
                    apsw.ConnectionClosedError,
                ),
            )
            or not conn.in_transaction
        )
    return not isinstance(e, Exception) or not conn.in_transaction


def _poisons(e: BaseException) -> bool:
    """Whether an error means SQLite met a damaged page: after that, every later statement of
    the transaction fails too (even after rolling back to a savepoint), so the transaction is
    rolled back and the batch's other writes are run again in a new one."""
    damaged = (apsw.CorruptError, apsw.NotADBError)
    return isinstance(e, damaged) or isinstance(e.__cause__, damaged)


def commit_batch(conn: apsw.Connection, items: list[Item]) -> None:
    """Run ``items`` in one ``BEGIN IMMEDIATE`` transaction on ``conn`` and commit; set each
    item's result or error. A write's own error fails only that write (see the module); an error
    that ends the transaction (I/O, full disk, busy) fails every write of the batch; a write
    that meets a damaged page fails alone (the others are run again in a new transaction)."""
    if len(items) == 1:
        _attempt_one(conn, items[0])
        return
    pending: list[Item] | None = items
    while pending:
        pending = _attempt(conn, pending)


def _attempt_one(conn: apsw.Connection, it: Item) -> None:
    """The transaction of a lone write (what :func:`_attempt` does for one, without the
    bookkeeping of a batch)."""
    batch = Batch(conn.cursor())
    try:
        try:
            batch.cur.execute("BEGIN IMMEDIATE")
            it.error = it.result = None  # only once inside the transaction (see interrupted)
            it.result = it.op(conn, batch)
            batch.flush()
            batch.cur.execute("COMMIT")
        except BaseException:
            it.result = None
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except BaseException as e:  # noqa: BLE001 -- reported to the write's caller
        it.error = e
        return
    for hook in batch.hooks:
        hook()


def _one_by_one(conn: apsw.Connection, items: list[Item]) -> None:
    """Roll the batch back and run its writes one transaction each: only the one that meets
    the damage fails."""
    conn.execute("ROLLBACK")
    for it in items:
        _attempt_one(conn, it)


def _begin(conn: apsw.Connection, items: list[Item], batch: Batch) -> bool:
    """Start the batch's transaction and read its sessions rows ahead; False (every write
    failed) when that fails."""
    try:
        batch.cur.execute("BEGIN IMMEDIATE")
        for it in items:  # only once inside the transaction (see interrupted)
            it.error = it.result = None
        if len(items) > 1:
            keys = [k for k in (getattr(it.op, "batched_session", None) for it in items) if k]
            if len(keys) > 1:
                batch.prefetch(list(dict.fromkeys(keys)))
    except BaseException as e:  # noqa: BLE001 -- reported to every caller of the batch
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        for it in items:
            it.error = e
        return False
    return True


def _attempt(conn: apsw.Connection, items: list[Item]) -> list[Item] | None:
    """One transaction over ``items``; returns the writes to run again, if any.

    A write that fails without having changed anything (a conflict, damage found by a check)
    fails alone and the others go on. A write that fails after changing rows, or that met a
    damaged page, makes the transaction roll back: it fails, and the others run again in a new
    one (no savepoints: they would cost two statements per write)."""
    batch = Batch(conn.cursor(), defer=True)
    if not _begin(conn, items, batch):
        return None
    live: list[Item] = []
    fatal: BaseException | None = None
    for it in items:
        try:
            if not getattr(it.op, "batched_session", None):
                try:
                    batch.flush()  # the write reads the tables with SQL
                except BatchConflict:
                    _one_by_one(conn, items)
                    return None
            changes = conn.total_changes()
            try:
                it.result = it.op(conn, batch)
            except BaseException as e:  # noqa: BLE001 -- reported to the write's caller
                it.error = e
                if _fatal(e, conn):
                    fatal = e
                    break
                if _poisons(e) or conn.total_changes() != changes:
                    conn.execute("ROLLBACK")
                    return [other for other in items if other is not it]
                continue
        except BaseException as e:  # noqa: BLE001 -- the batch fails with it
            fatal = e
            break
        live.append(it)
    _finish(conn, items, live, fatal, batch)
    return None


def _finish(
    conn: apsw.Connection,
    items: list[Item],
    live: list[Item],
    fatal: BaseException | None,
    batch: Batch,
) -> None:
    """Commit the writes that succeeded, or fail the batch with ``fatal``."""
    if fatal is None and live:
        try:
            batch.flush()
            batch.cur.execute("COMMIT")
        except BatchConflict:
            _one_by_one(conn, items)
            return
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
        return
    for hook in batch.hooks:
        hook()


class WriteInterruptedError(LiteAgentError):
    """Raised to the callers of writes whose transaction an exception that is not an error
    (an interrupt: Ctrl-C in the thread committing them) cut short; none of them was
    committed."""


_NOT_RUN = WriteInterruptedError("the write was interrupted before it ran")  # a marker only


def unsettled(items: list[Item]) -> None:
    """Before committing ``items``: each is a failure until its transaction settles it (the
    marker is never raised itself: :func:`outcome` raises a new error for it)."""
    for it in items:
        it.error, it.result = _NOT_RUN, None


def interrupted(conn: apsw.Connection, items: list[Item], cause: BaseException) -> None:
    """An exception escaped the commit of ``items`` (an interrupt between two statements):
    roll back what is open, so that no transaction keeps the database locked, and fail every
    write of it (the ones no transaction settled yet still carry :func:`unsettled`'s
    error)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
        for it in items:
            if it.error is None:
                it.error = WriteInterruptedError(
                    f"the write was rolled back: its commit was interrupted ({shown(cause)})"
                )
                it.result = None


def outcome(item: Item) -> Any:
    """The item's result, or its error raised (apsw and OS errors translated)."""
    e = item.error
    if e is None:
        return item.result
    item.error = None
    if e is _NOT_RUN:
        raise WriteInterruptedError("the write was interrupted before it ran")
    if isinstance(e, (apsw.Error, OSError, UnicodeError)):
        raise map_error(e, item.session_id) from e
    raise e


def run_own(conn: apsw.Connection, item: Item) -> None:
    """Run a write that manages its own transactions (on a connection outside any)."""
    batch = Batch(conn.cursor())
    try:
        item.result = item.op(conn, batch)
    except BaseException as e:  # noqa: BLE001 -- reported to the write's caller
        item.error = e
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return
    for hook in batch.hooks:
        hook()


def run_alone(
    conn: apsw.Connection, op: WriteOp, session_id: str | None, *, own_transaction: bool = False
) -> Any:
    """Run one write in its own transaction on ``conn`` (which the caller owns)."""
    item = Item(op, session_id, "", 0, waiter(), own=own_transaction)
    if own_transaction:
        run_own(conn, item)
    else:
        commit_batch(conn, [item])
    return outcome(item)
