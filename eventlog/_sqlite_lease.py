"""Session leases of the SQLite backend: one row per session in the ``leases`` table.

A lease is taken in one ``BEGIN IMMEDIATE`` (through the process's writer): the row is free when
it was released, when it expired, or when its holder ran on this host (same boot, same pid
namespace) and that process is gone (its pid is dead, a zombie, or now a different process: the
start time differs). Otherwise the acquire raises :class:`SessionLeasedError` naming the holder.
The fencing token keeps increasing across releases. A session that is not there keeps no row:
a release deletes the row of a session never written (or deleted under the lease), and a delete
removes a free row (:meth:`SqliteLeases.drop`); a new row's first token is the time in
microseconds (``first_token``), above every token of the rows before.

One renewer thread per checkpointer (not per lease) pushes every held lease's expiry forward
each third of its ttl while any is held; a renewal that finds the row taken by another holder
(it expired first, e.g. the process was stopped) marks the lease ``lost``. It also frees the
rows of leases whose release could not be written (a full disk), which this checkpointer may
take again meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import apsw

from ._errors import LeaseLostError, LiteAgentError, SessionLeasedError
from ._lease import (
    Lease,
    LeaseInfo,
    lease_clock,
    live_expiry,
    next_token,
    note_lease_renewed,
    run_renewer,
)
from ._liveness import holder_gone as _holder_gone
from ._liveness import started_self as _started_self
from ._logger import get_logger
from ._sqlite_batch import Batch
from ._sqlite_ops import Fence
from ._sqlite_rows import decode_raw, raw_select

if TYPE_CHECKING:
    from ._sqlite import SqliteCheckpointer

__all__ = ["SqliteLeases"]

_log = get_logger("liteagent.eventlog")

_ROW = (
    f"SELECT {raw_select(('owner', 'pid', 'host', 'started', 'token', 'expires_at'))} "  # noqa: S608
    "FROM leases WHERE session_id = ?"
)
_TAKE = (
    "INSERT INTO leases(session_id, owner, pid, host, started, token, expires_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET owner = excluded.owner, "
    "pid = excluded.pid, host = excluded.host, started = excluded.started, "
    "token = excluded.token, expires_at = excluded.expires_at"
)
_MINE = "session_id = ? AND owner = ? AND token = ? AND pid = ?"
_IS_MINE = f"SELECT 1 FROM leases WHERE {_MINE}"  # noqa: S608


def _info(row: tuple[Any, ...]) -> LeaseInfo | None:
    """The live holder of a leases row, or None when the row is free (or unreadable)."""
    owner, pid, host, started, token, expires_at = row
    if (
        type(owner) is not str
        or type(pid) is not int
        or type(host) is not str
        or type(token) is not int
        or type(expires_at) is not float
    ):
        return None
    if not live_expiry(expires_at, time.time()) or _holder_gone(pid, host, started):
        return None
    return LeaseInfo(owner, pid, host, token, expires_at)


def _same(a: LeaseInfo, b: LeaseInfo) -> bool:
    """Whether two holders are the same acquisition."""
    return (a.owner, a.token, a.pid) == (b.owner, b.token, b.pid)


def _free(conn: apsw.Connection, session_id: str, info: LeaseInfo) -> None:
    """Free ``session_id``'s lease if the row is still ``info``'s acquisition: delete the row
    when the session is not there (never written, or deleted), else mark it free."""
    mine = (session_id, info.owner, info.token, info.pid)
    conn.execute(
        f"DELETE FROM leases WHERE {_MINE} "  # noqa: S608
        "AND NOT EXISTS (SELECT 1 FROM sessions WHERE id = leases.session_id)",
        mine,
    )
    conn.execute(f"UPDATE leases SET expires_at = 0.0 WHERE {_MINE}", mine)  # noqa: S608


def _row(conn: apsw.Connection | apsw.Cursor, session_id: str) -> tuple[Any, ...] | None:
    raw = conn.execute(_ROW, (session_id,)).fetchone()
    return None if raw is None else decode_raw(raw)


# -- the leases of one checkpointer ---------------------------------------------------------------


class SqliteLeases:
    """The leases one :class:`SqliteCheckpointer` holds, and their renewer thread."""

    def __init__(self, owner: SqliteCheckpointer) -> None:
        self._cp = owner
        self._held: dict[Lease, float] = {}  # lease -> its ttl
        # session -> (holder, ttl) of a lease whose release could not be written (a full disk):
        # its row still names this process, so this checkpointer may take it over, and the
        # renewer frees it as soon as the store takes writes again
        self._left: dict[str, tuple[LeaseInfo, float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._renewer: threading.Thread | None = None
        self._stopped = False

    def forked(self) -> None:
        """In a forked child: the leases held here are the parent's (the child renews and
        releases none of them), and no renewer runs."""
        self._held = {}
        self._left = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._renewer = None

    def acquire(self, session_id: str, owner: str, ttl: float) -> Lease:
        """Take the lease of ``session_id`` or raise :class:`SessionLeasedError`.

        A lease visibly held is refused after a read, without the database's write lock: hosts
        racing for the same sessions would otherwise queue a write transaction per refusal,
        and under SQLite's polling busy handler the writes that matter (appends, releases)
        could wait past ``busy_timeout_ms`` behind them."""
        held = self.holder(session_id)
        if held is not None:
            raise SessionLeasedError(session_id, held)
        pid, host, started = os.getpid(), socket.gethostname(), _started_self()

        def take(conn: apsw.Connection, _tx: Batch) -> LeaseInfo:
            row = _row(conn, session_id)
            if row is not None:
                holder = _info(row)
                if holder is not None and not self._left_here(session_id, holder):
                    raise SessionLeasedError(session_id, holder)
            token = next_token(None if row is None else row[4])
            expires = time.time() + ttl
            conn.execute(_TAKE, (session_id, owner, pid, host, started, token, expires))
            return LeaseInfo(owner, pid, host, token, expires)

        info: LeaseInfo = self._cp._submit(take, session_id)
        lease = Lease(self._cp, session_id, info)
        with self._lock:
            self._left.pop(session_id, None)
            self._held[lease] = ttl
            self._start_renewer()
        self._wake.set()  # a shorter ttl may need an earlier renewal
        return lease

    def _left_here(self, session_id: str, holder: LeaseInfo) -> bool:
        """Whether ``holder`` is a lease this checkpointer released but could not write so."""
        with self._lock:
            left = self._left.get(session_id)
        return left is not None and _same(left[0], holder)

    def release(self, lease: Lease) -> None:
        """Give the lease up (if it is still ours). A release that cannot be written (a full
        disk) is logged and remembered: this checkpointer may take the lease again at once, and
        the renewer (or :meth:`close`) frees the row once the store takes writes again; for
        another process it ends then, or at its expiry, or with this process."""
        with self._lock:
            ttl = self._held.pop(lease, None)
        info = lease.info

        def free(conn: apsw.Connection, _tx: Batch) -> None:
            _free(conn, lease.session_id, info)

        try:
            self._cp._submit(free, lease.session_id)
        except BaseException as e:  # an interrupt (Ctrl-C) too: the renewer frees it then
            _log.warning("lease_release_failed", session_id=lease.session_id, error=repr(e))
            with self._lock:
                self._left[lease.session_id] = (info, 30.0 if ttl is None else ttl)
                self._start_renewer()
            self._wake.set()
            if not isinstance(e, LiteAgentError):
                raise

    def drop(self, session_id: str) -> None:
        """Delete the leases row of a deleted session unless a live holder has it (a read
        first, so that a session that never had a lease costs no write)."""
        with self._cp._snapshot(session_id) as conn:
            row = _row(conn, session_id)
        if row is None or _info(row) is not None:
            return

        def drop(conn: apsw.Connection, _tx: Batch) -> None:
            again = _row(conn, session_id)
            if again is not None and _info(again) is None:
                conn.execute("DELETE FROM leases WHERE session_id = ?", (session_id,))

        self._cp._submit(drop, session_id)

    def records(self) -> list[str]:
        """The session ids with a leases row, held or not."""
        with self._cp._snapshot(None) as conn:
            return [sid for (sid,) in conn.execute("SELECT session_id FROM leases")]

    def fence(self, lease: Lease) -> Fence:
        """The check a write under ``lease`` runs first in its transaction: the leases row
        must still be this lease's (nobody took it since), else :class:`LeaseLostError`."""
        info = lease.info
        mine = (lease.session_id, info.owner, info.token, info.pid)

        def check(cur: apsw.Cursor) -> None:
            if lease.released:
                raise LeaseLostError(lease.session_id, None, "was released")
            if cur.execute(_IS_MINE, mine).fetchone() is None:
                lease._mark_lost()  # the hook Lease offers backends
                row = _row(cur, lease.session_id)
                holder = None if row is None else _info(row)
                raise LeaseLostError(lease.session_id, holder, "was taken by another holder")

        return check

    def holder(self, session_id: str) -> LeaseInfo | None:
        """The live holder of ``session_id``'s lease, or None (also when the row still names a
        lease this checkpointer released but could not write so)."""
        with self._cp._snapshot(session_id) as conn:
            row = _row(conn, session_id)
        holder = None if row is None else _info(row)
        return None if holder is None or self._left_here(session_id, holder) else holder

    def close(self) -> None:
        """Stop the renewer (the base class released every lease before), after a last try
        at freeing the leases whose release could not be written."""
        with contextlib.suppress(LiteAgentError):
            self._free_left()
        with self._lock:
            self._stopped = True
            renewer, self._renewer = self._renewer, None
        self._wake.set()
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(10)

    # -- renewal ----------------------------------------------------------------------------------

    def _start_renewer(self) -> None:
        """Start the renewer thread if it is not running; call with ``_lock`` held."""
        if self._renewer is None and not self._stopped:
            self._renewer = threading.Thread(
                target=self._renew_loop, name="liteagent-sqlite-lease-renewer", daemon=True
            )
            self._renewer.start()

    def _renew_loop(self) -> None:
        run_renewer(self._wake, self._period, self._renew)

    def _period(self) -> float | None:
        """A third of the shortest ttl held; None (the renewer ends) when nothing is held."""
        with self._lock:
            if self._stopped or not (self._held or self._left):
                self._renewer = None
                return None
            return min([*self._held.values(), *(ttl for _, ttl in self._left.values())]) / 3

    def _free_left(self) -> None:
        """Free the leases whose release could not be written (see :meth:`release`)."""
        with self._lock:
            left = list(self._left.items())
        if not left:
            return

        def free(conn: apsw.Connection, _tx: Batch) -> None:
            for session_id, (info, _) in left:
                _free(conn, session_id, info)

        self._cp._submit(free, None)
        with self._lock:
            for session_id, (info, _) in left:
                now = self._left.get(session_id)
                if now is not None and _same(now[0], info):
                    del self._left[session_id]

    def _renew(self) -> None:
        """Push every held lease's expiry forward; mark the ones found taken as lost; free the
        leases whose release could not be written."""
        with contextlib.suppress(LiteAgentError):  # a store that cannot be written: next time
            self._free_left()
        with self._lock:
            held = [(lease, ttl) for lease, ttl in self._held.items() if not lease.released]

        def renew(conn: apsw.Connection, _tx: Batch) -> list[Lease]:
            now = time.time()
            lost = []
            for lease, ttl in held:
                info = lease.info
                # Still ours if nobody took it meanwhile (taking it changes the token), even
                # if it expired while this process was stopped.
                conn.execute(
                    f"UPDATE leases SET expires_at = ? WHERE {_MINE}",  # noqa: S608
                    (now + ttl, lease.session_id, info.owner, info.token, info.pid),
                )
                if conn.changes() == 0:
                    lost.append(lease)
            return lost

        since = lease_clock()
        with contextlib.suppress(LiteAgentError):  # a store that cannot be written: next time
            lost = set(self._cp._submit(renew, None))
            for lease, _ in held:
                if lease not in lost:
                    note_lease_renewed(lease, since)
            for lease in lost:
                lease._mark_lost()  # the hook Lease offers backends
                with self._lock:
                    self._held.pop(lease, None)
