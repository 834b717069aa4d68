"""Integrity check and repair of the SQLite store.

:func:`check_store` reports SQLite's own integrity check, every damaged sessions row, event rows
that belong to no session, and every session whose rows do not read back (see ``_sqlite_rows``).

:func:`repair_op` salvages one session: it keeps the readable prefix (the rows whose types and
checksums verify and that decode, consecutive from seq 1, up to the head the session records when
its record is intact), moves every other row of the session to the ``quarantine`` table (never
deleted; the values keep the types they had), sets the head to the kept prefix, gives the session a
new generation and reports exactly which seqs were lost. Damage in SQLite's own pages that a
``REINDEX`` cannot fix makes the repair impossible in place: it raises :class:`CorruptLogError`
saying so (the file then needs SQLite's ``.recover``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import apsw

from ._checkread import check_read
from ._codec import Codec
from ._contract import IntegrityProblem, IntegrityReport, RepairReport, integrity_report
from ._decodecheck import decode_problem
from ._errors import CorruptLogError, LiteAgentError
from ._events import StoredEvent
from ._ids import validate_session_id
from ._sqlite_batch import Batch, WriteOp
from ._sqlite_db import integrity_problem
from ._sqlite_rebuild import damaged_tables, rebuild_damaged
from ._sqlite_rows import (
    Seeds,
    Verified,
    decode_raw,
    fetch_page,
    fetch_session_row,
    next_generation,
    raw_select,
    row_problem,
    session_crc,
    session_row_problem,
)

__all__ = ["check_store", "rebuild_op", "repair_op", "unrepairable"]

_PAGE = 2000
_SESSIONS = f"SELECT {raw_select(('id', 'head', 'generation', 'crc'))} FROM sessions"  # noqa: S608
_ORPHANS = (
    f"SELECT {raw_select(('session_id',))} FROM "  # noqa: S608
    "(SELECT DISTINCT session_id FROM events WHERE session_id NOT IN (SELECT id FROM sessions))"
)
_NOT_KEPT = "session_id = ? AND NOT (typeof(seq) = 'integer' AND seq BETWEEN 1 AND ?)"


def _session_id(value: object) -> str | None:
    """``value`` if it is a valid session id, else None."""
    if type(value) is not str:
        return None
    try:
        return validate_session_id(value)
    except LiteAgentError:
        return None


# -- check -----------------------------------------------------------------------------------------


def check_store(
    conn: apsw.Connection, read: Callable[[str], Iterator[StoredEvent]]
) -> IntegrityReport:
    """Check the whole store; ``read(sid)`` reads one session with every check of a read."""
    problems: list[IntegrityProblem] = []
    try:
        db_problem = integrity_problem(conn)
        if db_problem is not None:
            problems.append(_attribute(conn, db_problem))
        stored = [decode_raw(r) for r in conn.execute(_SESSIONS)]
        orphans = [decode_raw(r)[0] for r in conn.execute(_ORPHANS)]
    except apsw.Error as e:
        problems.append(IntegrityProblem("database", f"cannot list sessions: {e}"))
        stored, orphans = [], []
    sessions = []
    for sid_value, *rest in stored:
        sid = _session_id(sid_value)
        if sid is None:
            problems.append(
                IntegrityProblem("corrupt", f"a session record has a damaged id: {sid_value!r}")
            )
            continue
        problem = session_row_problem(sid, (rest[0], rest[1], rest[2]))
        if problem is not None:
            problems.append(IntegrityProblem("corrupt", problem, sid))
            continue
        sessions.append(sid)
    for value in orphans:
        sid = _session_id(value)
        problems.append(
            IntegrityProblem(
                "corrupt",
                "rows are stored for a session that has no session record"
                if sid is not None
                else f"rows are stored under a damaged session id {value!r}",
                sid,
            )
        )
    events = 0
    for sid in sorted(sessions):
        events += check_read(read, sid, problems)
    return integrity_report(problems, len(stored), events)


def _attribute(conn: apsw.Connection, problem: IntegrityProblem) -> IntegrityProblem:
    """SQLite's integrity check failed: when every live table checks out and tables moved
    aside by a repair exist, the damage is theirs (kept on purpose): report it as a leftover."""
    aside = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB '*_damaged_[0-9]*'"
        )
    ]
    if not aside or damaged_tables(conn, thorough=True):
        return problem
    return IntegrityProblem(
        "leftover",
        f"tables a repair moved aside keep their damaged pages: {', '.join(aside)} (every "
        "live table checks out; drop them, or VACUUM INTO a new file, to reclaim the space)",
    )


# -- repair ----------------------------------------------------------------------------------------


def repair_op(session_id: str, verified: Verified, file: str, codec: Codec | None) -> WriteOp:
    """The write that repairs ``session_id`` (see the module docstring). Damage in SQLite's own
    pages makes it raise ``apsw.CorruptError``: the caller then runs :func:`rebuild_op` and
    this again."""

    def op(conn: apsw.Connection, tx: Batch) -> RepairReport:
        # A damaged generation counter would refuse every later write of every session.
        conn.execute("SELECT value FROM meta WHERE key = 'next_generation'").fetchall()
        return _repair(conn, tx, session_id, verified, file, codec=codec)

    return op


def rebuild_op(conn: apsw.Connection, _tx: Batch) -> list[str]:
    """The write (outside any transaction) that salvages the damaged tables."""
    return rebuild_damaged(conn)


def unrepairable(session_id: str, file: str, error: BaseException) -> CorruptLogError:
    """The error of a repair that SQLite's own damage makes impossible in place."""
    return CorruptLogError(
        session_id,
        None,
        f"cannot repair in place: the database file itself is damaged beyond its tables "
        f"(SQLite: {error}); copy out what SQLite can still read with "
        f"`sqlite3 {file} .recover` into a new file",
    )


def _repair(
    conn: apsw.Connection,
    tx: Batch,
    session_id: str,
    verified: Verified,
    file: str,
    *,
    codec: Codec | None,
) -> RepairReport:
    sid = session_id
    # Even a session that reads back whole needs tables it can be written to.
    _check_tables(conn, verified)
    srow = fetch_session_row(conn, sid)
    record_problem = None if srow is None else session_row_problem(sid, srow)
    recorded: int | None = None
    generation = 0
    if srow is not None and record_problem is None:
        recorded, generation = int(srow[0]), int(srow[1])
    kept, problem = _readable_prefix(conn, sid, recorded, codec)
    if problem is None and recorded is not None and kept < recorded:
        problem = f"the session records head {recorded}; its stored rows end at seq {kept}"
    if problem is None and srow is None and kept > 0:
        problem = "rows are stored for a session that has no session record"
    problem = problem or record_problem
    if problem is None:
        return RepairReport(sid, False, kept, generation)
    row = conn.execute(
        "SELECT max(seq) FROM events WHERE session_id = ? AND typeof(seq) = 'integer'", (sid,)
    ).fetchone()
    max_seq = row[0] if row is not None and type(row[0]) is int else 0
    now = time.time()
    new_gen = next_generation(conn)
    conn.execute(
        "INSERT INTO quarantine(session_id, seq, ts, kind, body, crc, reason, generation, "  # noqa: S608
        "moved_at) SELECT session_id, seq, ts, kind, body, crc, "
        "CASE WHEN seq IS ? THEN ? ELSE ? END, ?, ? FROM events WHERE " + _NOT_KEPT,
        (
            kept + 1,
            problem,
            f"stored after the first damaged seq {kept + 1}",
            new_gen,
            now,
            sid,
            kept,
        ),
    )
    moved = conn.changes()
    conn.execute("DELETE FROM events WHERE " + _NOT_KEPT, (sid, kept))  # noqa: S608
    conn.execute(
        "INSERT INTO sessions(id, head, generation, mtime, crc) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET head = excluded.head, generation = excluded.generation, "
        "mtime = excluded.mtime, crc = excluded.crc",
        (sid, kept, new_gen, now, session_crc(sid, kept, new_gen)),
    )
    lost: tuple[tuple[int, int | None], ...] = ()
    if recorded is None:
        lost = ((kept + 1, None),)  # the damaged record hides how far the log went
    elif max(recorded, max_seq) > kept:
        lost = ((kept + 1, max(recorded, max_seq)),)
    tx.after_commit(lambda: verified.replace(sid, new_gen, kept))
    return RepairReport(
        sid,
        True,
        kept,
        new_gen,
        lost,
        quarantine=f"table quarantine of {file} ({moved} rows, generation {new_gen})"
        if moved
        else None,
        detail=problem,
    )


def _check_tables(conn: apsw.Connection, verified: Verified) -> None:
    """Make sure SQLite's own structures of the tables a session lives in are whole (an index
    that misses rows would make the repair miss them; a damaged page would refuse the next
    append). A damaged one raises
    :class:`CorruptLogError` caused by ``apsw.CorruptError``: the caller then salvages the
    tables and repairs again. Checked once
    until another process commits (``PRAGMA data_version``)."""
    version = conn.pragma("data_version")
    if verified.checked_version == version:
        return
    damaged = damaged_tables(conn, ("sessions", "meta", "events", "quarantine"), thorough=True)
    if damaged:
        found = f"SQLite's integrity check finds damage in {damaged}"
        raise CorruptLogError(None, None, found) from apsw.CorruptError(found)
    verified.checked_version = version


def _readable_prefix(
    conn: apsw.Connection, session_id: str, recorded: int | None, codec: Codec | None
) -> tuple[int, str | None]:
    """How many rows from seq 1 verify and decode (not past ``recorded``), and why the next one
    does not (None when every stored row verified). A first row that does not decode raises
    :class:`CodecError` (see ``_decodecheck``)."""
    seeds = Seeds(session_id)
    kept = 0
    while True:
        rows = fetch_page(conn, session_id, kept, _PAGE)
        for row in rows:
            if recorded is not None and kept >= recorded:
                return kept, f"a row is stored after the session's recorded head {recorded}"
            problem = row_problem(seeds, row, kept + 1)
            if problem is not None:
                return kept, problem
            problem = decode_problem(codec, session_id, row[:4], kept)
            if problem is not None:
                return kept, problem
            kept += 1
        if len(rows) < _PAGE:
            return kept, None
