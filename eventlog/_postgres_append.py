"""The append of the PostgreSQL backend: one autocommit statement, exactly once.

The statement is a compare-and-set on the session's ``(head, generation)`` as this checkpointer
last verified it: an ``UPDATE`` of the sessions row (an ``INSERT`` for a new session) that
takes the row lock, and in the same statement the ``INSERT`` of the events at ``head+1..``,
each with its checksum computed here, the last one carrying the batch's id. No row back means
the position moved: the checkpointer re-reads it (verifying any rows it has not read yet),
raises :class:`CheckpointConflictError` when the caller's expectations no longer hold, or tries
again at the new head (an append without expectations). One round trip when the position is
the one last seen (the common case: one writer per session).

**Exactly once.** When the connection is lost after the statement was sent, the outcome is
unknown; the statement is sent again on a new connection with the same batch id and the same
expected position (it waits behind the first one if that is still running). Either it writes
(the first did not), or it finds the position moved, and then the batch id tells: found, the
first one committed and its head is returned; absent, the position was moved by someone else,
and the first one can never commit anymore (it expected the old ``(head, generation)``, and a
generation is never reused). The first append of a new session has no generation to expect
(its ``INSERT`` expects no row, which a delete makes true again): each of its tries carries an
id of its own, and a retry first records the ids of the tries before it in ``ops``, which their
statement checks, so a lost try delivered late cannot bring back a session deleted since.
A lease (``append(..., lease=)``) is checked in the same statement, with the lease row
share-locked, so a takeover cannot commit in between.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psycopg import errors as pg_errors

from ._contract import EncodedEvent, check_position
from ._errors import CheckpointerError, CorruptLogError
from ._lease import Lease
from ._postgres_schema import q
from ._sqlite_rows import Seeds, row_crc

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["Appender"]

_LEASE_CTE = (
    "l AS (SELECT 1 FROM {s}.leases WHERE session_id = %(sid)s AND owner = %(owner)s"
    " AND token = %(token)s FOR SHARE), "
)
_EVENTS = (
    "e AS (INSERT INTO {s}.events (session_id, seq, ts, kind, body, crc, batch_id)"
    " SELECT %(sid)s, %(head)s + u.ord, %(ts)s, u.kind, u.body, u.crc,"
    " CASE WHEN u.ord = %(n)s THEN %(batch)s::uuid END"
    " FROM s, unnest(%(kinds)b::text[], %(bodies)b::bytea[], %(crcs)b::int8[])"
    " WITH ORDINALITY AS u(kind, body, crc, ord)) "
)
_ONE_EVENT = (  # the common case: scalar parameters, no arrays to encode or unnest
    "e AS (INSERT INTO {s}.events (session_id, seq, ts, kind, body, crc, batch_id)"
    " SELECT %(sid)s, %(new)s, %(ts)s, %(kind)s, %(body)b, %(crc)s, %(batch)s FROM s) "
)
_UPDATE = (
    "s AS (UPDATE {s}.sessions SET head = %(new)s, mtime = %(ts)s"
    " WHERE id = %(sid)s AND head = %(head)s AND generation = %(gen)s{lease}"
    " RETURNING generation), "
)
_INSERT = (
    "s AS (INSERT INTO {s}.sessions (id, head, generation, mtime)"
    " SELECT %(sid)s, %(new)s, nextval('{s}.generations'), %(ts)s"
    " WHERE NOT EXISTS (SELECT 1 FROM {s}.ops WHERE op_id = %(try)s::uuid){lease}"
    " ON CONFLICT (id) DO NOTHING RETURNING generation), "
)
_FOUND = "SELECT seq FROM {s}.events WHERE session_id = %s AND batch_id = %s"
_FENCE = (
    "INSERT INTO {s}.ops (op_id, generation, at) SELECT t, 0, %s FROM unnest(%s::uuid[]) AS t"
    " ON CONFLICT (op_id) DO NOTHING"
)
_MAX_ROUNDS = 1000  # re-reads of a moving position before giving up (a pathological race)


def _statement(schema: str, *, new: bool, leased: bool, single: bool, notify: bool) -> bytes:
    head = _INSERT if new else _UPDATE
    cond = " AND EXISTS (SELECT 1 FROM l)" if leased else ""
    text = "WITH " + (_LEASE_CTE if leased else "") + head.replace("{lease}", cond)
    text += _ONE_EVENT if single else _EVENTS
    text += "SELECT generation" + (", pg_notify(%(chan)s, %(sid)s)" if notify else "") + " FROM s"  # noqa: S608
    return q(text, schema)


class Appender:
    """Builds and runs the append statement of one checkpointer (see the module docstring)."""

    def __init__(self, cp: PostgresCheckpointer) -> None:
        self._cp = cp
        schema = cp.schema
        self._statements = {
            (new, leased, single): _statement(
                schema, new=new, leased=leased, single=single, notify=cp.notify
            )
            for new in (False, True)
            for leased in (False, True)
            for single in (False, True)
        }
        self._found = q(_FOUND, schema)
        self._fence = q(_FENCE, schema)

    def append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected: tuple[int | None, int | None],
        lease: Lease | None,
    ) -> int:
        cp = self._cp
        if not batch:
            head, gen = cp._position(session_id)
            check_position(session_id, head, gen, *expected)
            return head
        kinds = [e.kind for e in batch]
        bodies = [e.body for e in batch]
        seeds = Seeds(session_id)
        kind_seeds = [seeds[k] for k in kinds]
        n = len(batch)
        params: dict[str, Any] = {
            "sid": session_id,
            "ts": ts,
            "n": n,
            "batch": uuid.uuid4(),
            "chan": cp.channel,
        }
        single = n == 1
        if single:
            params["kind"], params["body"] = kinds[0], bodies[0]
        else:
            params["kinds"], params["bodies"] = kinds, bodies
        if lease is not None:
            params["owner"] = lease.info.owner
            params["token"] = lease.info.token
        known = cp._verified.get(session_id)
        for _ in range(_MAX_ROUNDS):
            if known is None or not _matches(known, expected):
                known = cp._catch_up(session_id)  # verified (generation, head), fresh
                check_position(session_id, known[1], known[0], *expected)
            gen, head = known
            params["head"] = head
            params["new"] = head + n
            params["gen"] = gen
            if single:
                params["crc"] = row_crc(kind_seeds[0], head + 1, ts, bodies[0])
            else:
                params["crcs"] = [
                    row_crc(seed, head + i, ts, body)
                    for i, (seed, body) in enumerate(zip(kind_seeds, bodies, strict=True), start=1)
                ]
            statement = self._statements[(gen == 0, lease is not None, single)]
            attempt = self._attempt(session_id, statement, params, lease, new=gen == 0)
            outcome = cp._db.run(attempt, "append")
            if outcome is not None:
                new_gen, new_head = outcome
                if new_gen is not None:
                    cp._verified.replace(session_id, new_gen, new_head)
                else:  # an earlier try committed: its head, but what came since is unknown
                    cp._verified.forget(session_id)
                return new_head
            known = None  # the position moved: read it again
        raise CheckpointerError(
            f"session {session_id!r}: the position kept moving under {_MAX_ROUNDS} appends"
        )

    def _attempt(
        self,
        session_id: str,
        statement: bytes,
        params: dict[str, Any],
        lease: Lease | None,
        *,
        new: bool,
    ) -> Callable[[Conn, int], tuple[int | None, int] | None]:
        """One try: ``(generation, new head)`` on success, ``(None, head)`` when an earlier try
        (whose connection was lost) turns out to have committed, ``None`` when the position
        moved. The tries of a ``new`` session's first append fence the ones before them."""
        cp = self._cp
        earlier: list[uuid.UUID] = []

        def attempt(conn: Conn, tries: int) -> tuple[int | None, int] | None:
            if new:
                if earlier:  # a lost try still on its way must never commit
                    conn.execute(self._fence, (time.time(), earlier))
                params["try"] = uuid.uuid4()
                earlier.append(params["try"])
            try:
                rows = conn.execute(statement, params).fetchall()
            except pg_errors.UniqueViolation as e:
                name = e.diag.constraint_name
                if name == "events_batch":
                    return self._committed_before(conn, session_id, params["batch"])
                raise CorruptLogError(
                    session_id,
                    params["head"] + 1,
                    f"rows are stored after the session's recorded head {params['head']} ({e})",
                ) from e
            if rows:
                return int(rows[0][0]), params["new"]
            if tries > 0:
                found = self._committed_before(conn, session_id, params["batch"])
                if found is not None:
                    return found
            if lease is not None:
                cp._lease_rows.check_mine(conn, lease)  # raises LeaseLostError when it is not
            return None

        return attempt

    def _committed_before(
        self, conn: Conn, session_id: str, batch: uuid.UUID
    ) -> tuple[None, int] | None:
        row = conn.execute(self._found, (session_id, batch)).fetchone()
        return None if row is None else (None, int(row[0]))


def _matches(known: tuple[int, int], expected: tuple[int | None, int | None]) -> bool:
    """Whether the position last verified meets the caller's expectations (else the position
    is read again before anything is sent: it may have moved to meet them)."""
    gen, head = known
    expected_head, expected_generation = expected
    return (expected_head is None or expected_head == head) and (
        expected_generation is None or expected_generation == gen
    )
