"""The transaction a batch of SQLite writes runs in (see ``_sqlite_writer``).

Appends read the sessions rows of the batch ahead and defer the rows they write, which
:meth:`Batch.flush` writes with a few multi-row statements: SQLite runs each statement without
Python's GIL, and a statement per append would hand the GIL to the waiting threads once per
append, with the commit queued behind them every time.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, cast

import apsw

from ._errors import CheckpointerError

__all__ = ["Batch", "BatchConflict", "WriteOp"]


class BatchConflict(CheckpointerError):  # noqa: N818 -- a signal, not an error
    """Raised by :meth:`Batch.flush` (and caught by the writer, never seen by callers) when a
    deferred row collides with a stored one (damage): the batch is rolled back and its writes
    are run one by one, so that only the write that meets the damage fails."""


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
                    f"FROM sessions WHERE id IN ({marks})",
                    chunk,
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
                    self.cur.execute(_insert_events(len(chunk)), [v for row in chunk for v in row])
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
    return (
        "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES "  # noqa: S608
        + ", ".join(["(?, ?, ?, ?, ?, ?)"] * n)
    )


@functools.lru_cache(maxsize=256)
def _update_sessions(n: int) -> str:
    return (
        "UPDATE sessions SET head = v.column2, generation = v.column3, "  # noqa: S608
        "mtime = v.column4, crc = v.column5 FROM (VALUES "
        + ", ".join(["(?, ?, ?, ?, ?)"] * n)
        + ") AS v WHERE sessions.id = v.column1"
    )


@functools.lru_cache(maxsize=256)
def _insert_sessions(n: int) -> str:
    return (
        "INSERT INTO sessions(id, head, generation, mtime, crc) VALUES "  # noqa: S608
        + ", ".join(["(?, ?, ?, ?, ?)"] * n)
    )


WriteOp = Callable[[apsw.Connection, Batch], Any]
"""One write: runs inside the batch's transaction and returns its result or raises; nothing of
a write that raised is committed (see ``_sqlite_commit``)."""
