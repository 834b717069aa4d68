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

import _thread
import contextlib
import functools
import json
import os
import threading
from collections.abc import Callable
from typing import Any, cast

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
_ROUNDS = 4  # batches a leader commits in a row before it hands the lead on
_enabled = os.environ.get("LITEAGENT_SQLITE_GROUP_COMMIT", "1") not in ("0", "false", "no", "off")


def set_group_commit(enabled: bool) -> None:
    """Turn batching of SQLite writes on or off for this process (on by default)."""
    global _enabled  # noqa: PLW0603 -- a process-wide switch, by design
    _enabled = bool(enabled)


def group_commit() -> bool:
    """Whether SQLite writes of this process are batched."""
    return _enabled


class BatchConflict(Exception):  # noqa: N818 -- a signal inside the writer
    """Raised by :meth:`Batch.flush` when a deferred row collides with a stored one (damage):
    the batch is rolled back and its writes are run one by one, so that only the write that
    meets the damage fails."""


class Batch:
    """The transaction a batch of writes runs in.

    ``after_commit`` hooks run once it is committed (and only then). Appends read the sessions
    rows of the batch ahead (:meth:`prefetch`, into ``rows``), keep the event rows they add in
    ``inserts`` (when ``defer``) and the sessions rows they change in ``pending``: ``session id
    -> (head, generation, mtime, crc, stored)``. :meth:`flush` writes them all with a few
    multi-row statements, before the commit or before a write that reads them with SQL. SQLite
    runs each statement without Python's GIL; a statement per append would hand the GIL to the
    waiting threads once per append, and the commit would queue behind them every time.
    """

    __slots__ = ("cur", "defer", "hooks", "inserts", "pending", "rows")

    def __init__(self, cur: apsw.Cursor, *, defer: bool = False) -> None:
        self.cur = cur  # one cursor for the batch's statements (a new one per call costs 1 us)
        self.defer = defer
        self.hooks: list[Callable[[], None]] = []
        self.rows: dict[str, tuple[Any, Any, Any] | None] = {}  # sessions rows read ahead
        self.inserts: list[tuple[Any, ...]] = []  # deferred event rows
        # session -> (head, generation, mtime, crc, whether its row is stored already)
        self.pending: dict[str, tuple[int, int, float, int, bool]] = {}

    def after_commit(self, hook: Callable[[], None]) -> None:
        self.hooks.append(hook)

    def prefetch(self, session_ids: list[str]) -> None:
        """Read the sessions rows of ``session_ids`` (one statement, one row of JSON, per 500);
        rows it cannot carry (a damaged type) are left to each append to read."""
        for i in range(0, len(session_ids), 500):
            chunk = session_ids[i : i + 500]
            marks = ", ".join("?" * len(chunk))
            try:
                (row,) = self.cur.execute(
                    "SELECT json_group_array(json_array(id, head, generation, crc)) "  # noqa: S608
                    f"FROM sessions WHERE id IN ({marks})", chunk,
                ).fetchall()
                found = {r[0]: (r[1], r[2], r[3]) for r in json.loads(cast(str, row[0]))}
            except (apsw.SQLError, UnicodeError, ValueError, TypeError, IndexError):
                return  # a damaged row: each append reads its own
            for sid in chunk:
                self.rows[sid] = found.get(sid)

    def flush(self) -> None:
        """Write the deferred event rows and the pending sessions rows."""
        inserts = self.inserts
        if inserts:
            try:
                for i in range(0, len(inserts), _CHUNK):
                    chunk = inserts[i : i + _CHUNK]
                    self.cur.execute(_insert_events(len(chunk)),
                                     [v for row in chunk for v in row])
            except apsw.ConstraintError as e:
                raise BatchConflict from e
            inserts.clear()
        pending = self.pending
        if not pending:
            return
        if len(pending) == 1:
            ((sid, (head, gen, mtime, crc, stored)),) = pending.items()
            if stored:
                self.cur.execute(_UPDATE_SESSION, (head, gen, mtime, crc, sid))
            else:
                self.cur.execute(_insert_sessions(1), (sid, head, gen, mtime, crc))
            self.rows.pop(sid, None)
            pending.clear()
            return
        updates: list[Any] = []
        created: list[Any] = []
        for sid, (head, gen, mtime, crc, stored) in pending.items():
            if stored:
                updates += (sid, head, gen, mtime, crc)
            else:
                created += (sid, head, gen, mtime, crc)
        for values, statement in ((updates, _update_sessions), (created, _insert_sessions)):
            for i in range(0, len(values), 5 * _CHUNK):
                chunk = values[i : i + 5 * _CHUNK]
                self.cur.execute(statement(len(chunk) // 5), chunk)
        for sid in pending:
            self.rows.pop(sid, None)
        pending.clear()


_UPDATE_SESSION = "UPDATE sessions SET head = ?, generation = ?, mtime = ?, crc = ? WHERE id = ?"
_CHUNK = 500  # rows per multi-row statement (6 parameters each, well under SQLite's limit)


@functools.lru_cache(maxsize=256)
def _insert_events(n: int) -> str:
    return ("INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES "  # noqa: S608
            + ", ".join(["(?, ?, ?, ?, ?, ?)"] * n))


@functools.lru_cache(maxsize=256)
def _update_sessions(n: int) -> str:
    return ("UPDATE sessions SET head = v.column2, generation = v.column3, "  # noqa: S608
            "mtime = v.column4, crc = v.column5 FROM (VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * n)
            + ") AS v WHERE sessions.id = v.column1")


@functools.lru_cache(maxsize=256)
def _insert_sessions(n: int) -> str:
    return ("INSERT INTO sessions(id, head, generation, mtime, crc) VALUES "  # noqa: S608
            + ", ".join(["(?, ?, ?, ?, ?)"] * n))


WriteOp = Callable[[apsw.Connection, Batch], Any]
"""One write: runs inside the batch's transaction (in its own savepoint) and returns its result
or raises; nothing of a write that raised is committed."""


class _Item:
    __slots__ = ("busy_ms", "done", "error", "lead", "op", "own", "result", "session_id", "sync")

    def __init__(
        self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int, done: _Waiter,
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
_Waiter = _thread.LockType


def _waiter() -> _Waiter:
    """This thread's wake-up lock, held while idle: a waiting caller blocks acquiring it, its
    leader releases it once (a thread waits for one write at a time)."""
    w: _Waiter | None = getattr(_local, "waiter", None)
    if w is None:
        w = _local.waiter = threading.Lock()
        w.acquire()
    return w


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
    if len(items) == 1:
        _attempt_one(conn, items[0])
        return
    pending: list[_Item] | None = items
    while pending:
        pending = _attempt(conn, pending)


def _attempt_one(conn: apsw.Connection, it: _Item) -> None:
    """The transaction of a lone write (what :func:`_attempt` does for one, without the
    bookkeeping of a batch)."""
    batch = Batch(conn.cursor())
    it.error = it.result = None
    try:
        batch.cur.execute("BEGIN IMMEDIATE")
        try:
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


def _one_by_one(conn: apsw.Connection, items: list[_Item]) -> None:
    """Roll the batch back and run its writes one transaction each: only the one that meets
    the damage fails."""
    conn.execute("ROLLBACK")
    for it in items:
        _attempt_one(conn, it)


def _begin(conn: apsw.Connection, items: list[_Item], batch: Batch) -> bool:
    """Start the batch's transaction and read its sessions rows ahead; False (every write
    failed) when that fails."""
    for it in items:
        it.error = it.result = None
    try:
        batch.cur.execute("BEGIN IMMEDIATE")
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


def _attempt(conn: apsw.Connection, items: list[_Item]) -> list[_Item] | None:
    """One transaction over ``items``; returns the writes to run again, if any.

    A write that fails without having changed anything (a conflict, damage found by a check)
    fails alone and the others go on. A write that fails after changing rows, or that met a
    damaged page, makes the transaction roll back: it fails, and the others run again in a new
    one (no savepoints: they would cost two statements per write)."""
    batch = Batch(conn.cursor(), defer=True)
    if not _begin(conn, items, batch):
        return None
    live: list[_Item] = []
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


def _finish(conn: apsw.Connection, items: list[_Item], live: list[_Item],
            fatal: BaseException | None, batch: Batch) -> None:
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


def run_alone(conn: apsw.Connection, op: WriteOp, session_id: str | None, *,
              own_transaction: bool = False) -> Any:
    """Run one write in its own transaction on ``conn`` (which the caller owns)."""
    item = _Item(op, session_id, "", 0, _waiter(), own=own_transaction)
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
        self._cur: apsw.Cursor | None = None
        self._sync = ""
        self._busy_ms = -1
        self.verified = Verified()
        self.batches = 0  # transactions of grouped writes (for tests and benchmarks)
        self.writes = 0

    def submit(self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int, *,
               own_transaction: bool = False) -> Any:
        """Run ``op`` in the next committed batch and return its result (or raise its error,
        translated); returns only after the commit that contains it. With
        ``own_transaction``, ``op`` runs alone, outside any transaction, and makes its own."""
        with self._lock:
            if self._closing:
                raise CheckpointerClosedError("the SQLite checkpointer is closed")
            if self._leading:
                item = _Item(op, session_id, sync, busy_ms, _waiter(), own=own_transaction)
                self._queue.append(item)
            else:  # nobody is committing: commit this write at once
                self._leading = True
                item = None
        if item is None:
            return self._lone(op, session_id, sync, busy_ms, own_transaction)
        try:
            item.done.acquire()
        except BaseException:
            _local.waiter = None  # a late wake-up must not reach this thread's next wait
            self._abandon(item)
            raise
        if item.lead:
            self._lead(item, self._take())
        return _outcome(item)

    def _lone(self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int,
              own_transaction: bool) -> Any:
        """Commit one write that found nobody committing: at once, on the shortest path."""
        conn = self._conn
        if (conn is None or self._cur is None or own_transaction or sync != self._sync
                or busy_ms != self._busy_ms):
            item = _Item(op, session_id, sync, busy_ms, _waiter(), own=own_transaction)
            self._lead(item, [item])
            return _outcome(item)
        tx = Batch(self._cur)
        cur = tx.cur
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                result = op(conn, tx)
                if tx.pending:
                    tx.flush()
                cur.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            for hook in tx.hooks:
                hook()
        except (apsw.Error, OSError, UnicodeError) as e:
            raise map_error(e, session_id) from e
        finally:
            self.batches += 1
            self.writes += 1
            more = self._hand_on([], None, keep=True)
            if more:
                self._lead(None, more)
        return result

    def _take(self) -> list[_Item]:
        """The writes a new leader commits: every queued one (or the first, batching off)."""
        with self._lock:
            return self._take_locked()

    def _take_locked(self) -> list[_Item]:
        if _enabled:
            batch, self._queue = self._queue, []
        else:
            batch = [self._queue.pop(0)]
        return batch

    def _abandon(self, item: _Item) -> None:
        """A waiting caller was interrupted (KeyboardInterrupt): take its write out of the
        queue if no leader has taken it yet, and pass the lead on if it was handed to it."""
        nxt = None
        with self._lock:
            if item not in self._queue:
                return  # taken by a leader: it may still be committed
            self._queue.remove(item)
            if not item.lead:
                return
            nxt = self._queue[0] if self._queue else None
            if nxt is not None:
                nxt.lead = True
            else:
                self._leading = False
                if self._closing:
                    self._close_conn()
        if nxt is not None:
            nxt.done.release()

    def leading(self) -> bool:
        """Whether a caller is committing right now."""
        with self._lock:
            return self._leading

    def queued(self) -> int:
        """How many writes wait for the next batch."""
        with self._lock:
            return len(self._queue)

    def _lead(self, own: _Item | None, batch: list[_Item]) -> None:
        """Commit ``batch`` (the leader's own write ``own`` among it), wake its callers, and
        go on with the writes queued meanwhile for up to ``_ROUNDS`` batches (handing the lead
        to a waiting thread would put a wake-up on the path of every batch) before handing
        the lead to the first of them."""
        rounds = 0
        while batch:
            try:
                self._commit(batch)
            finally:
                rounds += 1
                nxt = self._hand_on(batch, own, keep=rounds < _ROUNDS)
            batch, own = nxt, None

    def _commit(self, batch: list[_Item]) -> None:
        try:
            conn = self._connection(batch)
        except BaseException as e:  # noqa: BLE001 -- reported to every caller of the batch
            for it in batch:
                it.error = e
            return
        grouped = batch if len(batch) == 1 and not batch[0].own else [
            it for it in batch if not it.own]
        if grouped:
            self.batches += 1
            self.writes += len(grouped)
            commit_batch(conn, grouped)
        for it in batch:
            if it.own:
                _run_own(conn, it)

    def _hand_on(self, batch: list[_Item], own: _Item | None, *, keep: bool) -> list[_Item]:
        """After a commit: wake the callers of ``batch`` (all but the leader's ``own``); return
        the writes queued meanwhile when the leader goes on with them (``keep``), else hand
        the lead to the first of them (or leave it free) and return nothing."""
        nxt: _Item | None = None
        more: list[_Item] = []
        with self._lock:
            if self._queue and keep and not self._closing:
                more = self._take_locked()
            elif self._queue:
                nxt = self._queue[0]
                nxt.lead = True
            else:
                self._leading = False
                if self._closing:
                    self._close_conn()
        for it in batch:
            if it is not own:
                it.done.release()
        if nxt is not None:
            nxt.done.release()
        return more

    def _connection(self, batch: list[_Item]) -> apsw.Connection:
        """The write connection, opened on first use, set to the strictest ``synchronous``
        and the longest busy timeout the batch's writers asked for."""
        if len(batch) == 1:
            sync, busy = batch[0].sync, batch[0].busy_ms
        else:
            sync = max((it.sync for it in batch), key=_SYNC_LEVEL.__getitem__)
            busy = max(it.busy_ms for it in batch)
        conn = self._conn
        if conn is None:
            conn = self._conn = open_connection(self.file, busy, sync)
            self._cur = conn.cursor()
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
        self._cur = None
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
