"""Session leases of the PostgreSQL backend: one row per session in the ``leases`` table.

A lease row is free when it was released, when it expired (``expires_at``, server clock), when
its holder ran on this host and that process is gone (as for SQLite), or when the database
connection its holder keeps open for its leases is gone: the row records that connection's
backend (``pg_backend_pid()`` and its start time), and a backend no longer in
``pg_stat_activity`` means the holder died or lost the server, on whatever host it ran. A
SIGKILLed holder's lease is therefore free as soon as the server has noticed the closed
socket, not only after the ttl; a holder cut off from the server (a partition) keeps its lease
until the ttl, and a holder that comes back after a takeover finds its writes refused
(fencing: the token in the row changed).

Taking a lease is one transaction on that connection: the row is locked (``FOR UPDATE``), its
holder checked, and the row rewritten with the next token (a new session's row is inserted
with ``ON CONFLICT DO NOTHING``; losing that race means trying again). Tokens keep increasing
across releases. A session that is not there keeps no row: a release deletes the row of a
session never written (or deleted under the lease), a delete removes a free row, and a new
row's first token is the server's time in microseconds, above every token of the rows before. One
renewer thread per checkpointer pushes every held lease's expiry forward each third of its
ttl; a renewal that finds the row taken marks the lease ``lost``.

Behind PgBouncer in transaction mode the backend of a connection means nothing: there leases
use pooled connections and end by expiry or by the same-host check only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from ._errors import (
    CheckpointerClosedError,
    LeaseLostError,
    LiteAgentError,
    SessionLeasedError,
)
from ._lease import (
    MAX_TOKEN,
    Lease,
    LeaseInfo,
    lease_clock,
    live_expiry,
    mark_lease_lost,
    note_lease_renewed,
    run_renewer,
)
from ._liveness import holder_gone, started_self
from ._logger import get_logger
from ._postgres_db import classify, translate
from ._postgres_schema import q

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["PostgresLeases"]

T = TypeVar("T")
_log = get_logger("liteagent.eventlog")

_ALIVE = (
    "(l.backend_pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_activity a"
    " WHERE a.pid = l.backend_pid"
    " AND (a.backend_start IS NULL OR a.backend_start = l.backend_start)))"
)
_ROW = (
    "SELECT l.owner, l.pid, l.host, l.started, l.token, l.expires_at, "  # noqa: S608
    + _ALIVE
    + ", extract(epoch from clock_timestamp())::float8 FROM {s}.leases l WHERE session_id = %s"
)
_MINE = "session_id = %(sid)s AND owner = %(owner)s AND token = %(token)s"
_INSERT = (
    "INSERT INTO {s}.leases (session_id, owner, pid, host, started, token, expires_at,"
    " backend_pid, backend_start) VALUES (%(sid)s, %(owner)s, %(pid)s, %(host)s, %(started)s,"
    " (extract(epoch from clock_timestamp()) * 1000000)::bigint,"
    " extract(epoch from clock_timestamp()) + %(ttl)s, %(bpid)s, %(bstart)s)"
    " ON CONFLICT (session_id) DO NOTHING RETURNING token, expires_at"
)
_TAKE = (  # a token out of range (a damaged row) starts again from the clock, as a new row
    "UPDATE {s}.leases SET owner = %(owner)s, pid = %(pid)s, host = %(host)s,"
    " started = %(started)s, token = CASE WHEN token >= 0 AND token < %(max_token)s"
    " THEN token + 1 ELSE (extract(epoch from clock_timestamp()) * 1000000)::bigint END,"
    " expires_at = extract(epoch from clock_timestamp()) + %(ttl)s,"
    " backend_pid = %(bpid)s, backend_start = %(bstart)s"
    " WHERE session_id = %(sid)s RETURNING token, expires_at"
)
_RENEW = (
    "UPDATE {s}.leases SET expires_at = extract(epoch from clock_timestamp()) + %(ttl)s,"  # noqa: S608
    " backend_pid = %(bpid)s, backend_start = %(bstart)s WHERE " + _MINE
)
_THERE = "EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(sid)s)"
_RELEASE = (  # one snapshot: the row goes if the session is not there, else it is freed
    "WITH gone AS (DELETE FROM {s}.leases WHERE "  # noqa: S608
    + _MINE
    + " AND NOT "
    + _THERE
    + " RETURNING 1) UPDATE {s}.leases SET expires_at = 0 WHERE "
    + _MINE
    + " AND "
    + _THERE
)
_IS_MINE = "SELECT 1 FROM {s}.leases WHERE " + _MINE  # noqa: S608
_FIRST_DELAY = 0.05


def _holder(row: tuple[Any, ...] | None) -> LeaseInfo | None:
    """The live holder of a leases row (as :data:`_ROW` selects it), or None when free."""
    if row is None:
        return None
    owner, pid, host, started, token, expires_at, backend_alive, now = row
    if (
        not live_expiry(float(expires_at), float(now))
        or not backend_alive
        or holder_gone(pid, host, started)
    ):
        return None
    return LeaseInfo(owner, pid, host, int(token), float(expires_at))


class PostgresLeases:
    """The leases one :class:`PostgresCheckpointer` holds, their connection and renewer."""

    def __init__(self, cp: PostgresCheckpointer) -> None:
        self._cp = cp
        s = cp.schema
        self._row, self._insert, self._take = q(_ROW, s), q(_INSERT, s), q(_TAKE, s)
        self._renew_q, self._release_q = q(_RENEW, s), q(_RELEASE, s)
        self._drop_q = q("DELETE FROM {s}.leases WHERE session_id = %s", s)
        self._is_mine, self._row_for_update = q(_IS_MINE, s), q(_ROW + " FOR UPDATE OF l NOWAIT", s)
        self._row_unless_locked = q(_ROW + " FOR UPDATE OF l SKIP LOCKED", s)
        self._held: dict[Lease, float] = {}
        self._lock = threading.Lock()
        self._conn: Conn | None = None
        self._backend: tuple[int | None, Any] = (None, None)
        self._conn_lock = threading.Lock()
        self._wake = threading.Event()
        self._renewer: threading.Thread | None = None
        self._stopped = False
        # When a release last failed for good (the server unreachable, say): the releases
        # right after it are tried once, so closing with many leases held takes one retry
        # time, not one per lease.
        self._release_failed_at: float | None = None

    # -- the connection ---------------------------------------------------------------------------

    def _run(self, fn: Callable[[Conn], T], what: str, *, retry: bool = True) -> T:
        """``fn`` on the lease connection, retried (unless ``retry`` is false) on a lost
        connection or a transient error (every lease statement is safe to repeat: each checks
        the row first)."""
        deadline = time.monotonic() + (self._cp.retry_timeout if retry else 0.0)
        delay = _FIRST_DELAY
        while True:
            try:
                with self._conn_lock:
                    if self._stopped:
                        raise CheckpointerClosedError("PostgresCheckpointer is closed")
                    if self._cp.pgbouncer:
                        with self._cp._db.connection(closing=True) as conn:
                            return fn(conn)
                    return fn(self._connection())
            except psycopg.Error as e:
                kind = classify(e)
                if kind == "fatal" or time.monotonic() + delay > deadline:
                    raise translate(e, what) from e
                if kind == "lost":  # only then: dropping the connection that vouches for the
                    with self._conn_lock:  # leases held here frees every one of them
                        self._drop_connection()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _connection(self) -> Conn:
        """The connection whose backend vouches for this checkpointer's leases (call with
        ``_conn_lock`` held)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._cp._connect()
            try:
                row = conn.execute(
                    "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                ).fetchone()
            except BaseException:
                conn.close()
                raise
            self._backend = (None, None) if row is None else (int(row[0]), row[1])
            self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _params(self, lease_or_sid: Lease | str, **extra: Any) -> dict[str, Any]:
        bpid, bstart = (None, None) if self._cp.pgbouncer else self._backend
        params: dict[str, Any] = {"bpid": bpid, "bstart": bstart, **extra}
        if isinstance(lease_or_sid, Lease):
            info = lease_or_sid.info
            params.update(sid=lease_or_sid.session_id, owner=info.owner, token=info.token)
        else:
            params["sid"] = lease_or_sid
        return params

    # -- the contract -----------------------------------------------------------------------------

    def forked(self) -> None:
        """In a forked child: the leases held here are the parent's (the child renews and
        releases none of them), and no renewer runs."""
        self._held = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._renewer = None

    def acquire(self, session_id: str, owner: str, ttl: float) -> Lease:
        """Take the lease of ``session_id`` or raise :class:`SessionLeasedError`."""
        pid, host, started = os.getpid(), socket.gethostname(), started_self()
        tries = 0

        def take(conn: Conn) -> LeaseInfo | None:
            nonlocal tries
            tries += 1
            params = self._params(
                session_id, owner=owner, pid=pid, host=host, started=started, ttl=ttl
            )
            if tries == 1:  # a live holder is refused at once, without waiting on its row
                holder = _holder(conn.execute(self._row, (session_id,)).fetchone())
                if holder is not None:
                    raise SessionLeasedError(session_id, holder)
            with conn.transaction():
                try:  # NOWAIT: a holder's fenced write locks the row (it may be stopped there)
                    row = conn.execute(self._row_for_update, (session_id,)).fetchone()
                except psycopg.errors.LockNotAvailable as e:
                    raise SessionLeasedError(session_id, None) from e
                if row is None:
                    got = conn.execute(self._insert, params).fetchone()
                    if got is None:
                        return None  # another acquirer inserted it first: look again
                else:
                    holder = _holder(row)
                    if holder is not None and not (tries > 1 and self._lost_take(holder, owner)):
                        raise SessionLeasedError(session_id, holder)
                    got = conn.execute(self._take, params | {"max_token": MAX_TOKEN}).fetchone()
                    assert got is not None  # the row is locked
            return LeaseInfo(owner, pid, host, int(got[0]), float(got[1]))

        info = None
        while info is None:
            info = self._run(take, "acquire a lease")
        lease = Lease(self._cp, session_id, info)
        with self._lock:
            self._held[lease] = ttl
            self._start_renewer()
        self._wake.set()  # a shorter ttl may need an earlier renewal
        return lease

    def _lost_take(self, holder: LeaseInfo, owner: str) -> bool:
        """Whether ``holder`` is an earlier try of this very acquisition, committed though its
        answer was lost with the connection: this process's, ``owner``'s, and no lease this
        checkpointer holds. The retry takes the lease again (on its new connection)."""
        with self._lock:
            return (
                holder.owner == owner
                and holder.pid == os.getpid()
                and all(lease.info.token != holder.token for lease in self._held)
            )

    def release(self, lease: Lease) -> None:
        """Give the lease up (if it is still ours); a failure is logged, the lease then ends at
        its expiry or with this process."""
        with self._lock:
            self._held.pop(lease, None)
        params = self._params(lease)
        failed_at = self._release_failed_at
        retry = failed_at is None or time.monotonic() - failed_at > self._cp.retry_timeout
        try:
            self._run(
                lambda conn: conn.execute(self._release_q, params), "release a lease", retry=retry
            )
        except LiteAgentError as e:
            self._release_failed_at = time.monotonic()
            _log.warning(
                "lease_release_failed", session_id=lease.session_id, error=str(e), retried=retry
            )
        else:
            self._release_failed_at = None

    def drop(self, session_id: str) -> None:
        """Delete the leases row of a deleted session unless a live holder has it."""

        def drop(conn: Conn) -> None:
            with conn.transaction():  # a row someone locks (takes, writes under) stays
                row = conn.execute(self._row_unless_locked, (session_id,)).fetchone()
                if row is not None and _holder(row) is None:
                    conn.execute(self._drop_q, (session_id,))

        self._run(drop, "remove a deleted session's lease")

    def records(self) -> list[str]:
        """The session ids with a leases row, held or not."""
        statement = q("SELECT session_id FROM {s}.leases", self._cp.schema)
        return self._cp._db.run(
            lambda conn, _: [sid for (sid,) in conn.execute(statement).fetchall()],
            "list the lease rows",
        )

    def holder(self, session_id: str) -> LeaseInfo | None:
        """The live holder of ``session_id``'s lease, or None."""
        return self._cp._db.run(
            lambda conn, _: _holder(conn.execute(self._row, (session_id,)).fetchone()),
            "look up a lease",
        )

    def check_mine(self, conn: Conn, lease: Lease, *, lock: bool = False) -> None:
        """Raise :class:`LeaseLostError` unless the lease row is still ``lease``'s (``lock``:
        share-lock it, inside a transaction, so no takeover commits before this one)."""
        if lease.released:
            raise LeaseLostError(lease.session_id, None, "was released")
        statement = self._is_mine + q(" FOR SHARE", self._cp.schema) if lock else self._is_mine
        if conn.execute(statement, self._params(lease)).fetchone() is None:
            mark_lease_lost(lease)
            holder = _holder(conn.execute(self._row, (lease.session_id,)).fetchone())
            raise LeaseLostError(lease.session_id, holder, "was taken by another holder")

    def close(self) -> None:
        """Stop the renewer and close the lease connection (every lease was released)."""
        with self._lock:
            renewer, self._renewer = self._renewer, None
        self._wake.set()
        with self._conn_lock:
            self._stopped = True
            self._drop_connection()
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(10)

    # -- renewal ----------------------------------------------------------------------------------

    def _start_renewer(self) -> None:
        """Start the renewer thread if it is not running; call with ``_lock`` held."""
        if self._renewer is None and not self._stopped:
            self._renewer = threading.Thread(
                target=self._renew_loop, name="liteagent-postgres-lease-renewer", daemon=True
            )
            self._renewer.start()

    def _renew_loop(self) -> None:
        run_renewer(self._wake, self._period, self._renew)

    def _period(self) -> float | None:
        """A third of the shortest ttl held; None (the renewer ends) when nothing is held."""
        with self._lock:
            if self._stopped or not self._held:
                self._renewer = None
                return None
            return min(self._held.values()) / 3

    def _renew(self) -> None:
        """Push every held lease's expiry forward; mark the ones found taken as lost."""
        with self._lock:
            held = [(lease, ttl) for lease, ttl in self._held.items() if not lease.released]

        def renew(conn: Conn) -> list[Lease]:
            lost = []
            for lease, ttl in held:
                with self._lock:
                    if lease not in self._held:  # released since (a retry must not revive it:
                        continue  # release() takes it out before its statement runs)
                if conn.execute(self._renew_q, self._params(lease, ttl=ttl)).rowcount == 0:
                    lost.append(lease)
            return lost

        since = lease_clock()
        with contextlib.suppress(LiteAgentError):  # a server that cannot be reached: next time
            lost = set(self._run(renew, "renew leases"))
            for lease, _ in held:
                if lease not in lost:
                    note_lease_renewed(lease, since)
            for lease in lost:
                mark_lease_lost(lease)
                with self._lock:
                    self._held.pop(lease, None)
