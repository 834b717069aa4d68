"""Truncate and delete of the PostgreSQL backend: two statements in one transaction.

The sessions row first (``SELECT ... FOR UPDATE``, then its update or delete), which waits for
an append that holds the row lock, then the events, in a new statement: in
READ COMMITTED a new statement has a new snapshot, which sees the rows of the append it
waited for. One statement doing both would delete the events as of its start and leave that
append's rows behind as orphans above the new head (measured: hundreds of primary-key
collisions per second of racing appenders; see ``docs/postgres.md``).

A truncate or a delete records its id in ``ops`` (with the generation a truncate gave), in its
transaction: when the connection is lost before the answer to its ``COMMIT``, the retry takes
the session's row lock (so a try still committing finishes first) and then looks for the id,
and does not truncate or delete twice. Ids older than an hour (far beyond any retry) are
removed by the next truncate or delete.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from ._contract import check_position
from ._errors import TruncateRangeError
from ._lease import Lease
from ._postgres_repair import check_rows
from ._postgres_schema import q

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["Truncator"]

_LOCK_ROW = "SELECT head, generation, truncated_by FROM {s}.sessions WHERE id = %s FOR UPDATE"
_KEPT = (
    "SELECT seq, ts, kind, body, crc FROM {s}.events"
    " WHERE session_id = %s AND seq > %s AND seq <= %s ORDER BY seq"
)
_TRUNCATE = (
    "UPDATE {s}.sessions SET head = %s, generation = nextval('{s}.generations'), mtime = %s,"
    " truncated_by = %s WHERE id = %s RETURNING generation"
)
_DROP = "DELETE FROM {s}.events WHERE session_id = %s AND seq > %s"
_OP_DONE = "SELECT generation FROM {s}.ops WHERE op_id = %s"
_OP_RECORD = "INSERT INTO {s}.ops (op_id, generation, at) VALUES (%s, %s, %s)"
_OPS_EXPIRE = "DELETE FROM {s}.ops WHERE at < %s"
_OPS_KEPT = 3600.0  # seconds an operation's id is kept for its retries
_DELETE_SESSION = "DELETE FROM {s}.sessions WHERE id = %s"
_DELETE_EVENTS = "DELETE FROM {s}.events WHERE session_id = %s"


class Truncator:
    """The truncates and deletes of one checkpointer."""

    def __init__(self, cp: PostgresCheckpointer) -> None:
        self._cp = cp
        s = cp.schema
        self._lock_row, self._kept = q(_LOCK_ROW, s), q(_KEPT, s)
        self._truncate_q, self._drop = q(_TRUNCATE, s), q(_DROP, s)
        self._op_done, self._op_record = q(_OP_DONE, s), q(_OP_RECORD, s)
        self._ops_expire = q(_OPS_EXPIRE, s)
        self._delete_q = (q(_DELETE_SESSION, s), q(_DELETE_EVENTS, s))

    def _done_before(self, conn: Conn, op_id: uuid.UUID, tries: int) -> int | None:
        """For a retry (``tries > 0``), holding the session's row lock: the generation that an
        earlier try of ``op_id`` committed, or None when none did."""
        if tries == 0:
            return None
        row = conn.execute(self._op_done, (op_id,)).fetchone()
        return None if row is None else int(row[0])

    def _record(self, conn: Conn, op_id: uuid.UUID, generation: int, now: float) -> None:
        """Record ``op_id`` as done (in its transaction) and forget the ids of long ago."""
        conn.execute(self._op_record, (op_id, generation, now))
        conn.execute(self._ops_expire, (now - _OPS_KEPT,))

    def truncate(
        self,
        session_id: str,
        to_seq: int,
        expected: tuple[int | None, int | None],
        lease: Lease | None,
    ) -> int:
        """The contract's truncate (fenced by ``lease`` when given)."""
        cp = self._cp
        op_id = uuid.uuid4()
        now = time.time()

        def attempt(conn: Conn, tries: int) -> tuple[int, int] | None:
            with conn.transaction():
                if lease is not None:
                    cp._lease_rows.check_mine(conn, lease, lock=True)
                row = conn.execute(self._lock_row, (session_id,)).fetchone()
                done = self._done_before(conn, op_id, tries)  # the lost try committed?
                if done is not None:
                    return done, to_seq
                head, gen = (0, 0) if row is None else (int(row[0]), int(row[1]))
                check_position(session_id, head, gen, *expected)
                if not 0 <= to_seq <= head:
                    raise TruncateRangeError(session_id, to_seq, head)
                if row is None:
                    return None
                known = cp._verified.get(session_id)
                after = known[1] if known is not None and known[0] == gen else 0
                if after < to_seq:  # the rows kept must read back
                    rows = (
                        conn.cursor(binary=True)
                        .execute(self._kept, (session_id, after, to_seq))
                        .fetchall()
                    )
                    check_rows(session_id, rows, after + 1, to_seq)
                got = conn.execute(self._truncate_q, (to_seq, now, op_id, session_id)).fetchone()
                assert got is not None  # the row is locked
                conn.execute(self._drop, (session_id, to_seq))
                self._record(conn, op_id, int(got[0]), now)
                cp._notify(conn, session_id)
                return int(got[0]), to_seq

        done = cp._db.run(attempt, "truncate")
        if done is None:
            return 0
        cp._verified.replace(session_id, done[0], to_seq)
        return to_seq

    def delete(self, session_id: str, lease: Lease | None) -> None:
        """The contract's delete (fenced by ``lease`` when given): the sessions row, then the
        events."""
        cp = self._cp
        op_id = uuid.uuid4()

        def delete(conn: Conn, tries: int) -> None:
            with conn.transaction():
                if lease is not None:
                    cp._lease_rows.check_mine(conn, lease, lock=True)
                # The row lock waits for a running append, or for a try of this delete whose
                # answer was lost: a session created again since is not deleted by the retry.
                conn.execute(self._lock_row, (session_id,))
                if self._done_before(conn, op_id, tries) is not None:
                    return
                conn.execute(self._delete_q[0], (session_id,))
                conn.execute(self._delete_q[1], (session_id,))
                self._record(conn, op_id, 0, time.time())
                cp._notify(conn, session_id)

        cp._db.run(delete, "delete")
        cp._verified.forget(session_id)
