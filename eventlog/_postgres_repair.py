"""Integrity check and repair of the PostgreSQL store.

:func:`check_store` reports event rows that belong to no session and every session whose rows do
not read back (checksums, consecutive seqs, the recorded head reached; see ``_postgres``).
:func:`repair_session` salvages one session in one transaction, holding its row lock: it keeps the
readable prefix (the rows that verify and decode, consecutive from seq 1, up to the recorded head),
moves every other row of the session to the ``quarantine`` table (never deleted), sets the head to
the kept prefix, gives the session a new generation and reports exactly which seqs were lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._checkread import check_read
from ._codec import Codec
from ._contract import IntegrityProblem, IntegrityReport, RepairReport, integrity_report
from ._decodecheck import decode_problem
from ._events import StoredEvent
from ._postgres_schema import q
from ._sqlite_rows import Seeds, corrupt, row_crc

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["check_rows", "check_store", "damaged_generation", "repair_session"]

_SESSIONS = "SELECT id, generation FROM {s}.sessions"
_ORPHANS = (
    "SELECT DISTINCT session_id FROM {s}.events e"
    " WHERE NOT EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = e.session_id)"
)
_LOCK = "SELECT head, generation FROM {s}.sessions WHERE id = %s FOR UPDATE"
# From seq 1: a stray row at a seq below 1 (damage) is set aside with the rest, never the
# reason the intact prefix after it is thrown away.
_ALL_ROWS = (
    "SELECT seq, ts, kind, body, crc FROM {s}.events WHERE session_id = %s AND seq >= 1"
    " ORDER BY seq"
)
_STRAY = "SELECT min(seq), count(*) FROM {s}.events WHERE session_id = %s AND seq < 1"
_NOT_KEPT = "session_id = %(sid)s AND NOT (seq BETWEEN 1 AND %(kept)s)"
_QUARANTINE = (
    "INSERT INTO {s}.quarantine (session_id, seq, ts, kind, body, crc, reason, generation,"  # noqa: S608
    " moved_at) SELECT session_id, seq, ts, kind, body, crc, CASE WHEN seq = %(first)s"
    " THEN %(problem)s ELSE %(after)s END, %(gen)s, %(now)s FROM {s}.events WHERE " + _NOT_KEPT
)
_DROP = "DELETE FROM {s}.events WHERE " + _NOT_KEPT  # noqa: S608
_UPSERT = (
    "INSERT INTO {s}.sessions (id, head, generation, mtime) VALUES (%(sid)s, %(kept)s,"
    " %(gen)s, %(now)s) ON CONFLICT (id) DO UPDATE SET head = excluded.head,"
    " generation = excluded.generation, mtime = excluded.mtime"
)


def damaged_generation(generation: object) -> str:
    """Why a session record's generation is damage: the store gives generations from 1 on."""
    return f"the session records generation {generation}; a store gives generations from 1 on"


def check_rows(session_id: str, rows: list[tuple[Any, ...]], first: int, last: int) -> None:
    """Check that ``rows`` (``seq, ts, kind, body, crc``, in seq order) are the valid events
    ``first..last``; raise :class:`CorruptLogError` naming the first seq that is not."""
    seeds = Seeds(session_id)
    expect = first
    for seq, ts, kind, body, crc in rows:
        if seq != expect:
            raise corrupt(session_id, expect, f"expected seq {expect}, the next stored is {seq}")
        if crc != row_crc(seeds[kind], seq, ts, body):
            raise corrupt(session_id, seq, "the event's checksum does not match")
        expect += 1
    if expect <= last:
        raise corrupt(session_id, expect, f"the stored rows end at seq {expect - 1}, not {last}")


def check_store(
    cp: PostgresCheckpointer, read: Callable[[str], Iterator[StoredEvent]]
) -> IntegrityReport:
    """Check the whole store; ``read(sid)`` reads one session with every check of a read."""

    def listing(conn: Conn, _attempt: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        return (
            conn.execute(q(_SESSIONS, cp.schema)).fetchall(),
            conn.execute(q(_ORPHANS, cp.schema)).fetchall(),
        )

    sessions, orphans = cp._db.run(listing, "check integrity")
    problems = [
        IntegrityProblem("corrupt", "rows are stored for a session that has no session record", sid)
        for (sid,) in orphans
    ]
    events = 0
    for sid, generation in sorted(sessions):
        if generation is None or generation < 1:
            problems.append(IntegrityProblem("corrupt", damaged_generation(generation), sid))
            continue
        events += check_read(read, sid, problems)
    return integrity_report(problems, len(sessions), events)


def _readable_prefix(
    session_id: str, rows: list[tuple[Any, ...]], recorded: int | None, codec: Codec | None
) -> tuple[int, str | None]:
    """How many rows from seq 1 verify and decode (not past ``recorded``), and why the next one
    does not (None when every stored row verified). A first row that does not decode raises
    :class:`CodecError` (see ``_decodecheck``)."""
    seeds = Seeds(session_id)
    kept = 0
    for seq, ts, kind, body, crc in rows:
        if recorded is not None and kept >= recorded:
            return kept, f"a row is stored after the session's recorded head {recorded}"
        if seq != kept + 1:
            return kept, f"expected seq {kept + 1}, the next stored seq is {seq}"
        if crc != row_crc(seeds[kind], seq, ts, body):
            return kept, "the event's checksum does not match"
        problem = decode_problem(codec, session_id, (seq, ts, kind, bytes(body)), kept)
        if problem is not None:
            return kept, problem
        kept += 1
    return kept, None


def repair_session(cp: PostgresCheckpointer, session_id: str) -> RepairReport:
    """Salvage ``session_id`` (see the module docstring)."""
    s = cp.schema
    sid = session_id

    def repair(conn: Conn, _attempt: int) -> RepairReport:
        with conn.transaction():
            # One snapshot for the whole repair: the record (or its absence) and the rows it
            # judges are of one moment, and a writer that moved the session meanwhile (an
            # append creating it, say) makes the writes below fail with a serialization error,
            # which is retried, instead of a healthy session being taken for a damaged one.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            srow = conn.execute(q(_LOCK, s), (sid,)).fetchone()
            recorded = None if srow is None else int(srow[0])
            generation = 0 if srow is None or srow[1] is None else int(srow[1])
            rows = conn.cursor(binary=True).execute(q(_ALL_ROWS, s), (sid,)).fetchall()
            kept, problem = _readable_prefix(sid, rows, recorded, cp.codec)
            if problem is None and recorded is not None and kept < recorded:
                problem = f"the session records head {recorded}; its stored rows end at seq {kept}"
            if problem is None and srow is None and kept > 0:
                problem = "rows are stored for a session that has no session record"
            if problem is None and srow is not None and generation < 1:
                problem = damaged_generation(generation)
            stray = conn.execute(q(_STRAY, s), (sid,)).fetchone()
            if problem is None and stray is not None and stray[1]:
                problem = f"{stray[1]} rows are stored at seqs below 1 (the lowest {stray[0]})"
            if problem is None:
                return RepairReport(sid, False, kept, generation)
            max_seq = max((int(r[0]) for r in rows), default=0)
            gen_row = conn.execute(q("SELECT nextval('{s}.generations')", s)).fetchone()
            assert gen_row is not None
            new_gen = int(gen_row[0])
            now = time.time()
            params = {
                "sid": sid,
                "kept": kept,
                "first": kept + 1,
                "problem": problem,
                "after": f"stored after the first damaged seq {kept + 1}",
                "gen": new_gen,
                "now": now,
            }
            moved = conn.execute(q(_QUARANTINE, s), params).rowcount
            conn.execute(q(_DROP, s), params)
            conn.execute(q(_UPSERT, s), params)
            cp._notify(conn, sid)
        lost: tuple[tuple[int, int | None], ...] = ()
        if recorded is None:
            lost = ((kept + 1, None),)  # no record: how far the log went is unknown
        elif max(recorded, max_seq) > kept:
            lost = ((kept + 1, max(recorded, max_seq)),)
        return RepairReport(
            sid,
            True,
            kept,
            new_gen,
            lost,
            quarantine=f"table {s}.quarantine ({moved} rows, generation {new_gen})"
            if moved
            else None,
            detail=problem,
        )

    report = cp._db.run(repair, "repair")
    if report.repaired:
        cp._verified.replace(sid, report.generation, report.kept_head)
    return report
