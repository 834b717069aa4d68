"""Group commit: one write connection per SQLite database per process, shared by every
checkpointer on that file, committing the writes that arrive together in one transaction.

There is no writer thread. A caller that finds nobody committing becomes the *leader* and
commits its write at once (nothing waits for a batch to fill). Writes that arrive meanwhile
queue up; when its commit is done, the leader takes every queued write and runs them in one
``BEGIN IMMEDIATE`` transaction on the shared connection (``_sqlite_commit``: one write's
conflict or damage fails only that write), commits, wakes their callers, and goes on like that
for a few batches before it hands the lead to the first write still queued. Under load the
batches grow by themselves while a commit (an fsync under ``synchronous="full"``) is running.
Every write is acknowledged only after the commit that contains it.

One connection per database per process (not per checkpointer object) because SQLite has one
writer per database anyway: a second connection of the same process would only queue on the
file lock, with SQLite's sleep-and-retry busy handler instead of this queue, and a thousand of
them are what made ``database is locked`` errors. Other processes keep their own writer; SQLite's
lock and ``busy_timeout_ms`` arbitrate between processes.

Before and after every transaction the writer checks that the database's path still names the
file it has open (a ``stat`` each): SQLite keeps writing to a file deleted, moved or replaced
while open, where nothing at the path finds the write again. From then on every write fails
with :class:`StorageIOError` (``ESTALE``): refused before anything is written, or (when the
file went away during the transaction) not acknowledged. The checkpointers on the file look
too (:meth:`Writer.moved`) before each read, which would otherwise go on reading the old file.

:func:`set_group_commit` (or ``LITEAGENT_SQLITE_GROUP_COMMIT=0`` in the environment) turns
batching off: the leader then commits one write per transaction (the benchmark's baseline).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from typing import Any

import apsw

from ._errors import CheckpointerClosedError, StorageIOError
from ._sqlite_batch import Batch, WriteOp
from ._sqlite_commit import (
    LOCAL,
    Item,
    commit_batch,
    interrupted,
    outcome,
    run_own,
    unsettled,
    waiter,
)
from ._sqlite_db import map_error, open_connection, set_busy_wait
from ._sqlite_rows import Verified

__all__ = ["REGISTRY", "Writer", "group_commit", "set_group_commit"]

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


class Writer:
    """The write connection of one database file in this process and its queue of writes."""

    def __init__(self, file: str, key: object, path: str) -> None:
        self.file = file
        self.key = key
        self.users = 0
        self._conn: apsw.Connection | None = None
        self._lock = threading.Lock()
        self._queue: list[Item] = []
        self._leading = False
        self._closing = False
        self._cur: apsw.Cursor | None = None
        self.path = path  # the database's file name (``file`` may be a URI)
        self._gone: StorageIOError | None = None  # why writes are refused (see _moved)
        self._sync = ""
        self._busy_ms = -1
        self.verified = Verified()
        self.batches = 0  # transactions of grouped writes (for tests and benchmarks)
        self.writes = 0

    def submit(
        self,
        op: WriteOp,
        session_id: str | None,
        sync: str,
        busy_ms: int,
        *,
        own_transaction: bool = False,
    ) -> Any:
        """Run ``op`` in the next committed batch and return its result (or raise its error,
        translated); returns only after the commit that contains it. With
        ``own_transaction``, ``op`` runs alone, outside any transaction, and makes its own."""
        with self._lock:
            if self._closing:
                raise CheckpointerClosedError("the SQLite checkpointer is closed")
            if self._leading:
                item = Item(op, session_id, sync, busy_ms, waiter(), own=own_transaction)
                self._queue.append(item)
            else:  # nobody is committing: commit this write at once
                self._leading = True
                item = None
        if item is None:
            return self._lone(op, session_id, sync, busy_ms, own_transaction)
        try:
            item.done.acquire()
        except BaseException:
            LOCAL.waiter = None  # a late wake-up must not reach this thread's next wait
            self._abandon(item)
            raise
        if item.lead:
            self._lead(item, self._take())
        return outcome(item)

    def _lone(
        self, op: WriteOp, session_id: str | None, sync: str, busy_ms: int, own_transaction: bool
    ) -> Any:
        """Commit one write that found nobody committing: at once, on the shortest path."""
        conn = self._conn
        if (
            conn is None
            or self._cur is None
            or own_transaction
            or sync != self._sync
            or busy_ms != self._busy_ms
        ):
            item = Item(op, session_id, sync, busy_ms, waiter(), own=own_transaction)
            self._lead(item, [item])
            return outcome(item)
        tx = Batch(self._cur)
        cur = tx.cur
        try:
            gone = self.moved(leading=True)  # nothing is written through a moved file
            if gone is not None:
                raise gone
            try:
                cur.execute("BEGIN IMMEDIATE")
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
            moved = self.moved(leading=True)
            if moved is not None:
                raise moved
        except (apsw.Error, OSError, UnicodeError) as e:
            raise map_error(e, session_id) from e
        finally:
            self.batches += 1
            self.writes += 1
            more = self._hand_on([], None, keep=True)
            if more:
                self._lead(None, more)
        return result

    def _take(self) -> list[Item]:
        """The writes a new leader commits: every queued one (or the first, batching off)."""
        with self._lock:
            return self._take_locked()

    def _take_locked(self) -> list[Item]:
        if _enabled:
            batch, self._queue = self._queue, []
        else:
            batch = [self._queue.pop(0)]
        return batch

    def _abandon(self, item: Item) -> None:
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

    def _lead(self, own: Item | None, batch: list[Item]) -> None:
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

    def _commit(self, batch: list[Item]) -> None:
        try:
            conn = self._connection(batch)
        except BaseException as e:  # noqa: BLE001 -- reported to every caller of the batch
            for it in batch:
                it.error = e
            return
        gone = self.moved(leading=True)  # nothing is written through a moved file
        if gone is not None:
            for it in batch:
                it.error = gone
            return
        grouped = (
            batch if len(batch) == 1 and not batch[0].own else [it for it in batch if not it.own]
        )
        if grouped:
            self.batches += 1
            self.writes += len(grouped)
            unsettled(grouped)
            try:
                commit_batch(conn, grouped)
            except BaseException as e:  # an interrupt (Ctrl-C) between two statements
                interrupted(conn, grouped, e)
                raise
        for it in batch:
            if it.own:
                run_own(conn, it)
        moved = self.moved(leading=True)
        if moved is not None:
            for it in batch:
                if it.error is None:
                    it.error, it.result = moved, None

    def moved(self, *, leading: bool = False) -> StorageIOError | None:
        """Why writes are refused, if the database's path no longer names the file this writer
        has open (deleted, moved, or replaced by another file), or (looked at by the leader
        only, ``leading``: it checkpoints through the write connection) its write-ahead log was
        deleted; else ``None``. Once found, it stays found: every later write is refused
        without looking again."""
        if self._gone is not None:
            return self._gone
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):  # its folder too may be gone
            st = None
        except OSError:
            return None  # cannot tell (a permission change): the commit itself succeeded
        if st is None or (st.st_dev, st.st_ino) != self.key:
            self._gone = StorageIOError(
                errno.ESTALE,
                f"the database file {self.path!r} was deleted, moved or replaced while open: "
                "reads and writes through it are refused (a write it commits meanwhile is not "
                "acknowledged); open the store again",
            )
        elif leading and self._conn is not None and not os.path.lexists(self.path + "-wal"):
            # SQLite goes on writing to a write-ahead log unlinked while open, where a crash
            # loses every commit not yet copied into the database: copy them now (a
            # checkpoint, through the connection that still has the deleted log open), and
            # acknowledge nothing more
            with contextlib.suppress(apsw.Error):
                self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_FULL)
            self._gone = StorageIOError(
                errno.ESTALE,
                f"the write-ahead log {self.path + '-wal'!r} was deleted while the database was "
                "open: what was committed was copied into the database, and writes are refused "
                "(one committed to the deleted log meanwhile is not acknowledged); open the "
                "store again",
            )
        return self._gone

    def _hand_on(self, batch: list[Item], own: Item | None, *, keep: bool) -> list[Item]:
        """After a commit: wake the callers of ``batch`` (all but the leader's ``own``); return
        the writes queued meanwhile when the leader goes on with them (``keep``), else hand
        the lead to the first of them (or leave it free) and return nothing."""
        nxt: Item | None = None
        more: list[Item] = []
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

    def _connection(self, batch: list[Item]) -> apsw.Connection:
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
            set_busy_wait(conn, busy)
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

    def acquire(self, file: str, key: object, path: str) -> Writer:
        """The writer of the database ``key`` (device, inode), opened as ``file`` (a path or a
        URI) and found at ``path`` (its file name)."""
        with self._lock:
            w = self._writers.get(key)
            if w is None:
                w = self._writers[key] = Writer(file, key, path)
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
