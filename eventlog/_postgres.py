"""The PostgreSQL checkpointer (psycopg 3): sessions shared by many processes on many hosts.

The pieces: ``_postgres_schema`` (the tables, created on open), ``_postgres_db`` (the pool, error
classes, retries), ``_postgres_append`` (the one-statement, exactly-once append),
``_postgres_lease`` (leases and fencing), ``_postgres_tail`` (LISTEN/NOTIFY for ``follow``),
``_postgres_repair`` (integrity check and repair), ``_postgres_blobs``. This module holds the
reads and the other writes.

Reads are keyset pages (``seq > cursor ORDER BY seq LIMIT n``), each one autocommit statement
that also returns the session's head and generation: no transaction or server cursor is ever
open while the caller iterates, and a generation that changes between pages (a truncate or a
delete) raises :class:`CheckpointConflictError`. Every row's checksum, its seq and the head
it must reach are checked, as on SQLite; an append first verifies (once per checkpointer) every
row it builds on. Truncates and deletes are in ``_postgres_truncate``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from ._blobs import BlobStore
from ._codec import Codec, codec_decode, codec_encode
from ._contract import (
    KEPT_IN_CHILD,
    Checkpointer,
    EncodedEvent,
    IntegrityReport,
    Position,
    RepairReport,
    SessionInfo,
    decode_stored,
)
from ._errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CodecError,
    InvalidArgumentError,
    LiteAgentError,
    StorageIOError,
)
from ._events import StoredEvent
from ._ids import validate_session_id
from ._lease import Lease, LeaseInfo
from ._postgres_append import Appender
from ._postgres_blobs import PostgresBlobStore
from ._postgres_db import Conn, Database, translate
from ._postgres_lease import PostgresLeases
from ._postgres_repair import check_store, damaged_generation, repair_session
from ._postgres_schema import ensure_schema, q
from ._postgres_tail import Watcher
from ._postgres_truncate import Truncator
from ._sqlite_rows import Seeds, Verified, corrupt, row_crc

__all__ = ["PostgresCheckpointer"]

_PAGE = 2000
_PAGE_Q = (
    "SELECT s.head, s.generation, e.seq, e.ts, e.kind, e.body, e.crc FROM {s}.sessions s"
    " LEFT JOIN LATERAL (SELECT seq, ts, kind, body, crc FROM {s}.events"
    " WHERE session_id = s.id AND seq > %s ORDER BY seq LIMIT %s) e ON true WHERE s.id = %s"
)
# Rows without a session record, in one statement (one snapshot): asked after a page query found
# no record, it must not take a session created since for damage.
_ANY_ROW = (
    "SELECT 1 FROM {s}.events WHERE session_id = %(sid)s"
    " AND NOT EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(sid)s) LIMIT 1"
)
_POSITION = (
    "SELECT (SELECT head FROM {s}.sessions WHERE id = %(sid)s),"
    " (SELECT generation FROM {s}.sessions WHERE id = %(sid)s),"
    " (SELECT max(seq) FROM {s}.events WHERE session_id = %(sid)s)"
)
_GENERATION = "SELECT generation FROM {s}.sessions WHERE id = %s"
_LIST = "SELECT id, mtime FROM {s}.sessions"
_NOTIFY = "SELECT pg_notify(%s, %s)"
_SETTINGS = (
    "SET lock_timeout = '5s'; SET statement_timeout = '60s';"
    " SET idle_in_transaction_session_timeout = '30s'"
)


class PostgresCheckpointer(Checkpointer):
    """See :func:`liteagent.eventlog.postgres_checkpointer`."""

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        schema: str,
        durability: str,
        codec: Codec | None,
        notify: bool,
        pgbouncer: bool,
        listen_dsn: str | None,
        max_connections: int,
        retry_timeout: float,
        poll_interval: float,
    ) -> None:
        super().__init__()
        self.schema = schema
        self.channel = f"liteagent_{schema}"[:63]
        self.codec = codec
        self.notify = notify
        self.pgbouncer = pgbouncer
        self.retry_timeout = retry_timeout
        self._poll_interval = poll_interval
        self._durability = durability
        self._verified = Verified()
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": None if pgbouncer else 5,
            "connect_timeout": max(1, min(10, round(retry_timeout))),
            # Which process a server backend serves (pg_stat_activity): "liteagent/<pid>".
            "application_name": f"liteagent/{os.getpid()}",
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        }
        if isinstance(target, ConnectionPool):
            pool: ConnectionPool[Any] = target
            self._conninfo = str(target.conninfo)
            owns = False
        else:
            _check_dsn(target, "the DSN")
            self._conninfo = target
            pool = ConnectionPool(
                target,
                min_size=1,
                max_size=max_connections,
                open=False,
                timeout=retry_timeout,
                max_lifetime=1800,
                max_idle=300,
                reconnect_timeout=max(retry_timeout, 10.0),
                kwargs=self._connect_kwargs,
                configure=self._configure,
                name=f"liteagent-{schema}",
                num_workers=1,
            )
            owns = True
        if listen_dsn is not None:
            _check_dsn(listen_dsn, "listen_dsn")
        self._listen_dsn = listen_dsn or self._conninfo
        self._db = Database(
            pool,
            owns_pool=owns,
            retry_timeout=retry_timeout,
            is_closed=lambda: self._closed,
            configure=None if owns else self._configure,
        )
        self._fork_closed = False  # closed because this process was forked (see _forked)
        self._lease_rows = PostgresLeases(self)
        self._watcher = Watcher(self)
        self._blob_store = PostgresBlobStore(self)
        s = schema
        self._page_q, self._any_row = q(_PAGE_Q, s), q(_ANY_ROW, s)
        self._position_q, self._generation_q = q(_POSITION, s), q(_GENERATION, s)
        self._list_q = q(_LIST, s)
        self._writes = Truncator(self)
        try:
            if owns:
                try:
                    pool.open(wait=True, timeout=retry_timeout)
                except PoolTimeout as e:
                    raise self._why_not_connected(e) from e
            self._db.run(lambda conn, _: ensure_schema(conn, schema), "open the store")
            self._appender = Appender(self)
        except BaseException:
            self.close()
            raise

    # -- connections ------------------------------------------------------------------------------

    def _configure(self, conn: Conn) -> None:
        """Session settings of every pooled connection (none behind PgBouncer: set them with
        ``ALTER ROLE`` there)."""
        if self.pgbouncer:
            return
        sync = "off" if self._durability == "normal" else "on"
        try:
            conn.execute(_SETTINGS + f"; SET synchronous_commit = {sync}")
        except BaseException:
            conn.close()  # the pool does not close a connection its configure step failed on
            raise

    def _why_not_connected(self, timeout: PoolTimeout) -> LiteAgentError:
        """The error of a pool that never connected: the server's (or libpq's) own reason,
        from one more direct try (a database or role that does not exist, a refused password,
        no server there), which the pool's timeout does not carry."""
        try:
            conn = psycopg.connect(self._conninfo, **self._connect_kwargs)
        except psycopg.Error as e:
            return StorageIOError(errno.ECONNREFUSED, f"PostgreSQL unreachable during connect: {e}")
        conn.close()
        return translate(timeout, "connect")

    def _connect(self, *, listen: bool = False) -> Conn:
        """A connection of its own (the lease and LISTEN connections), not from the pool."""
        conn = psycopg.connect(
            self._listen_dsn if listen else self._conninfo, **self._connect_kwargs
        )
        try:
            if not listen:
                self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _notify(self, conn: Conn, session_id: str) -> None:
        if self.notify:
            conn.execute(_NOTIFY, (self.channel, session_id))

    # -- reads ------------------------------------------------------------------------------------

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        return self._rows(session_id, since_seq, decode=True)

    def _rows(self, session_id: str, since_seq: int, *, decode: bool) -> Iterator[StoredEvent]:
        generation: int | None = None
        last = since_seq
        seeds = Seeds(session_id)
        codec = self.codec
        while True:
            self._check_open()
            head, current, rows = self._page(session_id, last)
            if generation is None:
                generation = current
            elif current != generation:
                raise CheckpointConflictError(
                    session_id,
                    generation,
                    current,
                    "the history was truncated or deleted while it was being read",
                )
            page: list[StoredEvent] = []
            error: LiteAgentError | None = None
            for seq, ts, kind, body, crc in rows:
                if not _typed_row(seq, ts, kind, body, crc):  # a column's type changed by hand
                    error = corrupt(
                        session_id, last + 1, "a stored value does not have its column's type"
                    )
                    break
                if seq != last + 1 or seq > head or crc != row_crc(seeds[kind], seq, ts, body):
                    error = corrupt(session_id, last + 1, _why(seq, last, head))
                    break
                last = seq
                if not decode:
                    continue
                try:
                    plain = body
                    if codec is not None:
                        plain = codec_decode(
                            codec, body, "an event", session_id=session_id, seq=seq
                        )
                    page.append(decode_stored(session_id, seq, ts, kind, plain))
                except CodecError as e:
                    error = e
                    break
            yield from page
            if error is not None:
                raise error
            if len(rows) < _PAGE:
                if last < head:
                    raise corrupt(
                        session_id,
                        last + 1,
                        f"the session records head {head}; its stored rows end at seq {last}",
                    )
                self._verified.extend(session_id, generation, since_seq, head)
                if page and self._generation(session_id) != generation:
                    raise CheckpointConflictError(
                        session_id,
                        generation,
                        None,
                        "the history was truncated or deleted while it was being read",
                    )
                return

    def _page(self, session_id: str, after: int) -> tuple[int, int, list[tuple[Any, ...]]]:
        """``(head, generation, rows)`` from one statement."""

        def fetch(conn: Conn, _attempt: int) -> tuple[int, int, list[tuple[Any, ...]]]:
            cur = conn.cursor(binary=True)
            found = cur.execute(self._page_q, (after, _PAGE, session_id)).fetchall()
            if not found:
                if cur.execute(self._any_row, {"sid": session_id}).fetchone() is not None:
                    raise corrupt(
                        session_id,
                        None,
                        "rows are stored for a session that has no session record",
                    )
                return 0, 0, []
            rows = [r[2:] for r in found if r[2] is not None]
            return int(found[0][0]), int(found[0][1]), rows

        return self._db.run(fetch, "read")

    def _generation(self, session_id: str) -> int:
        row = self._db.run(
            lambda conn, _: conn.execute(self._generation_q, (session_id,)).fetchone(), "read"
        )
        return 0 if row is None else int(row[0])

    def _position(self, session_id: str) -> Position:
        row = self._db.run(
            lambda conn, _: conn.execute(self._position_q, {"sid": session_id}).fetchone(),
            "read the position",
        )
        head, gen, last = row if row is not None else (None, None, None)
        if head is None:
            if last is not None:
                raise corrupt(
                    session_id, None, "rows are stored for a session that has no session record"
                )
            return Position(0, 0)
        if (last or 0) != head:
            raise corrupt(
                session_id,
                min(last or 0, head) + 1,
                f"the session records head {head}; its last stored row is seq {last}",
            )
        if gen is None or gen < 1:
            raise corrupt(session_id, None, damaged_generation(gen))
        return Position(int(head), int(gen))

    def _catch_up(self, session_id: str) -> tuple[int, int]:
        """The session's ``(generation, head)`` now, every row up to it verified."""
        for _ in range(100):
            head, gen = self._position(session_id)
            if gen == 0:
                return 0, 0
            known = self._verified.get(session_id)
            if known == (gen, head):
                return known
            after = known[1] if known is not None and known[0] == gen and known[1] <= head else 0
            try:
                for _ in self._rows(session_id, after, decode=False):
                    pass
            except CheckpointConflictError:
                continue
            known = self._verified.get(session_id)
            if known is not None and known[0] == gen and known[1] >= head:
                return known
        raise CheckpointConflictError(session_id, None, None, "the history kept being replaced")

    def _list(self) -> list[SessionInfo]:
        rows = self._db.run(lambda conn, _: conn.execute(self._list_q).fetchall(), "list")
        return [
            SessionInfo(sid, float(mtime) if type(mtime) is float else 0.0)
            for sid, mtime in rows
            if _valid_id(sid)
        ]

    # -- writes -----------------------------------------------------------------------------------

    def _encoded(self, batch: list[EncodedEvent]) -> list[EncodedEvent]:
        codec = self.codec
        if codec is None:
            return batch
        return [EncodedEvent(e.kind, codec_encode(codec, e.body, "an event")) for e in batch]

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        expected = (expected_head, expected_generation)
        return self._appender.append(session_id, self._encoded(batch), ts, expected, None)

    def _append_leased(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        self._check_held(lease)
        expected = (expected_head, expected_generation)
        return self._appender.append(session_id, self._encoded(batch), ts, expected, lease)

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        return self._truncate_fenced(session_id, to_seq, (expected_head, expected_generation), None)

    def _truncate_leased(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        self._check_held(lease)
        expected = (expected_head, expected_generation)
        return self._truncate_fenced(session_id, to_seq, expected, lease)

    def _truncate_fenced(
        self,
        session_id: str,
        to_seq: int,
        expected: tuple[int | None, int | None],
        lease: Lease | None,
    ) -> int:
        return self._writes.truncate(session_id, to_seq, expected, lease)

    def _delete(self, session_id: str) -> None:
        self._writes.delete(session_id, None)

    def _delete_leased(self, session_id: str, *, lease: Lease) -> None:
        self._check_held(lease)
        self._writes.delete(session_id, lease)

    # -- integrity, leases, follow, blobs ---------------------------------------------------------

    def _check_integrity(self) -> IntegrityReport:
        return check_store(self, lambda sid: self._rows(sid, 0, decode=True))

    def _repair(self, session_id: str) -> RepairReport:
        return repair_session(self, session_id)

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:
        return self._lease_rows.acquire(session_id, owner, ttl)

    def _release_lease(self, lease: Lease) -> None:
        self._lease_rows.release(lease)

    def _drop_lease(self, session_id: str) -> None:
        self._lease_rows.drop(session_id)

    def _forked(self) -> None:
        # PostgreSQL connections do not cross a fork: in the child this checkpointer is closed
        # without closing anything (closing would end the parent's server sessions), and what
        # holds the connections is kept for good; the child opens a checkpointer of its own.
        self._lease_rows.forked()
        KEPT_IN_CHILD.append((self._db, self._lease_rows, self._watcher))
        self._closed = True
        self._fork_closed = True

    def _lease_records(self) -> list[str]:
        return self._lease_rows.records()

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:
        return self._lease_rows.holder(session_id)

    def _follow_wait(
        self, session_id: str, position: Position, wake: threading.Event, timeout: float
    ) -> None:
        if self._closed:
            return
        if self.notify:
            self._watcher.wait(session_id, position, wake, timeout)
        else:
            wake.wait(min(timeout, self._poll_interval))

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        self._watcher.close()
        self._lease_rows.close()
        with contextlib.suppress(psycopg.Error, LiteAgentError):
            self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(
                "PostgresCheckpointer is closed"
                + (
                    " in this process: it was opened before this process was forked, and "
                    "PostgreSQL connections do not cross a fork (open a checkpointer of its own)"
                    if self._fork_closed
                    else ""
                )
            )


def _why(seq: int, last: int, head: int) -> str:
    """Why a row failed a read's check."""
    if seq != last + 1:
        return f"expected seq {last + 1}, the next stored seq is {seq}"
    if seq > head:
        return f"a row is stored at seq {seq}, after the session's recorded head {head}"
    return "the event's checksum does not match"


def _valid_id(session_id: object) -> bool:
    try:
        validate_session_id(session_id)
    except LiteAgentError:
        return False
    return True


def _typed_row(seq: object, ts: object, kind: object, body: object, crc: object) -> bool:
    """Whether an events row holds the types of its columns (bigint, float8, text, bytea,
    bigint): a column whose type was changed by hand is damage, read as such."""
    return (
        type(seq) is int
        and type(ts) is float
        and type(kind) is str
        and isinstance(body, bytes)
        and type(crc) is int
    )


def _check_dsn(dsn: str, name: str) -> None:
    """A DSN that cannot be parsed never connects: :class:`InvalidArgumentError` now, not a
    failure after the retries (or, for the LISTEN connection, followers that poll silently)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise InvalidArgumentError(f"{name} cannot be parsed: {e}") from None
