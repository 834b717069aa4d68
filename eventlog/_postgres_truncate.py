"""Truncate and delete of the PostgreSQL backend: two statements in one transaction.

The sessions row first (``SELECT ... FOR UPDATE`` for a truncate, ``DELETE`` for a delete),
which waits for an append that holds the row lock, then the events, in a new statement: in
READ COMMITTED a new statement has a new snapshot, which sees the rows of the append it
waited for. One statement doing both would delete the events as of its start and leave that
append's rows behind as orphans above the new head (measured: hundreds of primary-key
collisions per second of racing appenders; see ``docs/postgres.md``).

A truncate records its id in ``sessions.truncated_by``: when the connection is lost before the
answer to its ``COMMIT``, the retry looks for it first and does not truncate twice.
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
_TRUNCATED_BY = "SELECT truncated_by, generation FROM {s}.sessions WHERE id = %s"
_DELETE_SESSION = "DELETE FROM {s}.sessions WHERE id = %s"
_DELETE_EVENTS = "DELETE FROM {s}.events WHERE session_id = %s"


class Truncator:
    """The truncates and deletes of one checkpointer."""

    def __init__(self, cp: PostgresCheckpointer) -> None:
        self._cp = cp
        s = cp.schema
        self._lock_row, self._kept = q(_LOCK_ROW, s), q(_KEPT, s)
        self._truncate_q, self._drop = q(_TRUNCATE, s), q(_DROP, s)
        self._truncated_by = q(_TRUNCATED_BY, s)
        self._delete_q = (q(_DELETE_SESSION, s), q(_DELETE_EVENTS, s))

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
            if tries > 0:  # did the try whose connection was lost commit?
                row = conn.execute(self._truncated_by, (session_id,)).fetchone()
                if row is not None and row[0] == op_id:
                    return int(row[1]), to_seq
            with conn.transaction():
                if lease is not None:
                    cp._lease_rows.check_mine(conn, lease, lock=True)
                row = conn.execute(self._lock_row, (session_id,)).fetchone()
                head, gen = (0, 0) if row is None else (int(row[0]), int(row[1]))
                if tries > 0 and row is not None and row[2] == op_id:
                    return gen, to_seq  # the lost try committed after the look above
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
                cp._notify(conn, session_id)
                return int(got[0]), to_seq

        done = cp._db.run(attempt, "truncate")
        if done is None:
            return 0
        cp._verified.replace(session_id, done[0], to_seq)
        return to_seq

    def delete(self, session_id: str) -> None:
        """The contract's delete: the sessions row, then the events."""
        cp = self._cp

        def delete(conn: Conn, _attempt: int) -> None:
            with conn.transaction():
                conn.execute(self._delete_q[0], (session_id,))  # waits for a running append
                conn.execute(self._delete_q[1], (session_id,))
                cp._notify(conn, session_id)

        cp._db.run(delete, "delete")
        cp._verified.forget(session_id)
