"""Salvage of tables whose SQLite pages are damaged (a repair's last resort).

When SQLite itself reports a table as damaged (``PRAGMA quick_check(table)``), the table is
renamed aside as ``<table>_damaged_<n>`` (never dropped: its pages stay in the file for an
expert's ``.recover``), a new empty table of the same schema takes its name, and every row that
can still be read is copied into it with the values and types it had: first in order until the
damage, then backwards from the end until the damage. Rows on the damaged pages are lost; the
checks of ``_sqlite_rows`` then see them missing (a session's head no longer reached), and a
session's repair reports them.

Everything runs inside the caller's transaction: nothing is changed unless it all commits.
"""

from __future__ import annotations

import contextlib
import errno

import apsw

from ._errors import StorageIOError
from ._sqlite_rows import decode_raw, raw_select, session_row_problem
from ._sqlite_schema import COLUMNS, TABLES

__all__ = ["damaged_tables", "rebuild_damaged"]

_ORDER = {"sessions": "id", "meta": "key", "leases": "session_id"}  # WITHOUT ROWID tables


def _is_damaged(conn: apsw.Connection, table: str, *, thorough: bool = False) -> bool:
    pragma = "integrity_check" if thorough else "quick_check"
    try:
        rows = [r[0] for r in conn.execute(f"PRAGMA {pragma}({table})")]
    except (apsw.CorruptError, apsw.NotADBError, apsw.SQLError):
        return True
    return rows != ["ok"]


def damaged_tables(
    conn: apsw.Connection, tables: tuple[str, ...] | None = None, *, thorough: bool = False
) -> list[str]:
    """The tables of ``tables`` (default: every liteagent table the store has) that SQLite's
    quick check (``thorough``: full integrity check) finds damaged."""
    if tables is None:
        existing = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        tables = tuple(t for t in TABLES if t in existing)
    return [t for t in tables if _is_damaged(conn, t, thorough=thorough)]


def _salvage(conn: apsw.Connection, table: str) -> list[tuple[object, ...]]:
    """Every row of ``table`` that can be read, as (value, type) pairs."""
    select = f"SELECT {raw_select(COLUMNS[table])} FROM {table} "  # noqa: S608
    order = _ORDER.get(table, "rowid")
    forward: list[tuple[object, ...]] = []
    try:
        forward.extend(conn.execute(select + f"ORDER BY {order}"))
    except apsw.Error:
        backward: list[tuple[object, ...]] = []
        with contextlib.suppress(apsw.Error):
            backward.extend(conn.execute(select + f"ORDER BY {order} DESC"))
        forward.extend(reversed(backward))
    if table == "sessions":
        # A damaged page can hold two rows under one id: keep the one that verifies.
        forward.sort(key=lambda raw: not _session_row_ok(raw))
    return forward


def _session_row_ok(raw: tuple[object, ...]) -> bool:
    sid, head, generation, _mtime, crc = decode_raw(raw)
    return type(sid) is str and session_row_problem(sid, (head, generation, crc)) is None


def _insert(conn: apsw.Connection, table: str, rows: list[tuple[object, ...]]) -> None:
    """Insert rows of (value, type) pairs, each value with the type it had."""
    columns = COLUMNS[table]
    statements: dict[tuple[object, ...], str] = {}
    for raw in rows:
        types = raw[1::2]
        sql = statements.get(types)
        if sql is None:
            values = ", ".join("CAST(? AS TEXT)" if t == "text" else "?" for t in types)
            sql = statements[types] = (
                f"INSERT OR IGNORE INTO {table}({', '.join(columns)}) VALUES ({values})"  # noqa: S608
            )
        conn.execute(sql, raw[0::2])


def _free_name(conn: apsw.Connection, table: str) -> str:
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    n = 1
    while f"{table}_damaged_{n}" in names:
        n += 1
    return f"{table}_damaged_{n}"


def rebuild_damaged(conn: apsw.Connection) -> list[str]:
    """Rebuild every damaged table on ``conn``, which must be outside any transaction; return
    what was done, one line per table (empty when SQLite finds no table damaged).

    An index that does not match its table is rebuilt from the table (``REINDEX``); a table
    whose own pages are damaged is moved aside and its readable rows copied into a new one
    (see the module docstring). SQLite refuses every write of a transaction once it has met a
    damaged page, so the damaged tables are found and read in one transaction and changed in
    another; ``PRAGMA data_version`` tells whether another process committed in between (then
    it starts over).
    """
    for _ in range(5):
        try:  # the BEGIN inside: an interrupt right after it must not leave it open
            conn.execute("BEGIN IMMEDIATE")
            version = conn.pragma("data_version")
            damaged = damaged_tables(conn, thorough=True)
            salvaged = {t: _salvage(conn, t) for t in damaged}
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        if not damaged:
            return []
        reindexed = _reindex(conn, damaged, version)
        if reindexed is not None:
            return reindexed
        try:
            conn.execute("BEGIN IMMEDIATE")
            if conn.pragma("data_version") != version:
                conn.execute("ROLLBACK")
                continue
            done = []
            for table in damaged:
                aside = _free_name(conn, table)
                conn.execute(f"ALTER TABLE {table} RENAME TO {aside}")
                # An explicit index keeps its name on the table moved aside (and may be
                # damaged, so it is not dropped): the new table goes without it (it only
                # speeds up reading the quarantine).
                conn.execute(TABLES[table])
                _insert(conn, table, salvaged[table])
                done.append(f"{table}: moved aside as {aside}, its readable rows copied back")
            _fix_generation_counter(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return done
    raise StorageIOError(
        errno.EBUSY, "the store kept changing while its damaged tables were salvaged: try again"
    )


def _reindex(conn: apsw.Connection, damaged: list[str], version: int) -> list[str] | None:
    """Rebuild the indexes of ``damaged`` from their tables; what was done, or None when that
    does not make them whole (their own pages are damaged)."""
    try:  # the BEGIN inside: an interrupt right after it must not leave it open
        conn.execute("BEGIN IMMEDIATE")
        if conn.pragma("data_version") != version:
            return None
        for table in damaged:
            conn.execute(f"REINDEX {table}")
        if damaged_tables(conn, tuple(damaged), thorough=True):
            return None
        conn.execute("COMMIT")
    except apsw.Error:
        return None
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    return [f"{table}: its indexes rebuilt from the table" for table in damaged]


def _fix_generation_counter(conn: apsw.Connection) -> None:
    """Make sure the generation counter exists and is past every generation still stored."""
    highest = 0
    for table in ("sessions", "quarantine"):
        row = conn.execute(
            f"SELECT max(generation) FROM {table} WHERE typeof(generation) = 'integer'"  # noqa: S608
        ).fetchone()
        if row is not None and type(row[0]) is int:
            highest = max(highest, row[0])
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('next_generation', ?) ON CONFLICT(key) DO UPDATE "
        "SET value = max(CASE typeof(value) WHEN 'integer' THEN value ELSE 0 END, "
        "excluded.value)",
        (highest + 1,),
    )
