"""SQLite connections for the checkpointer: opening, schema, and the one place where apsw
exceptions become liteagent errors."""

from __future__ import annotations

import errno
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from ._contract import IntegrityProblem
from ._errors import (
    CheckpointerClosedError,
    CheckpointerError,
    CorruptLogError,
    LiteAgentError,
    NotADatabaseError,
    SchemaVersionError,
    StorageIOError,
)
from ._sqlite_schema import SCHEMA, SCHEMA_VERSION, TABLES

__all__ = [
    "SCHEMA_VERSION",
    "integrity_problem",
    "map_error",
    "open_connection",
    "set_busy_wait",
    "translate",
]


_BUSY_SLEEP_S = (0.0002, 0.002)  # a waiting connection looks again after a random pause in this
_WAL_ATTEMPTS = 200  # x 10 ms: how long to retry a WAL switch refused on a fresh file
_CREATE_WAIT_S = 600.0  # how long an open waits for another process creating the schema


def set_busy_wait(conn: apsw.Connection, busy_ms: int) -> None:
    """Make ``conn`` wait up to ``busy_ms`` for a lock another connection holds, looking again
    every 0.2 to 2 ms (at random), until it gets it.

    SQLite's own busy timeout sleeps longer and longer between looks, up to 100 ms each: a
    connection that has waited a while looks ten times a second, while newcomers look at once
    and take the lock as it comes free. With several processes writing all the time, one could
    then wait past any timeout although each transaction holds the lock for a millisecond.
    Looking often keeps every waiter in the race at each release."""
    if busy_ms <= 0:
        conn.set_busy_handler(None)
        return
    budget = busy_ms / 1000
    since = 0.0
    low, high = _BUSY_SLEEP_S

    def wait(prior: int) -> bool:
        nonlocal since
        now = time.monotonic()
        if prior == 0:
            since = now
        left = budget - (now - since)
        if left <= 0:
            return False
        time.sleep(min(left, random.uniform(low, high)))  # noqa: S311 -- jitter, not secrets
        return True

    conn.set_busy_handler(wait)


def map_error(e: BaseException, session_id: str | None) -> LiteAgentError:
    """The one place where apsw (and OS) exceptions become liteagent errors."""
    where = f"session {session_id!r}: " if session_id else ""
    if isinstance(e, LiteAgentError):
        return e
    if isinstance(e, apsw.NotADBError):
        return NotADatabaseError(f"{where}the file is not a SQLite database: {e}")
    if isinstance(e, apsw.CorruptError):
        return CorruptLogError(
            session_id,
            None,
            f"the database file itself is damaged (SQLite: {e}); `lite-agent doctor` reports "
            "what SQLite's integrity check finds",
        )
    if isinstance(e, UnicodeError):
        return CorruptLogError(
            session_id, None, f"the database holds text that is not valid UTF-8 ({e})"
        )
    if isinstance(e, (apsw.BusyError, apsw.LockedError)):
        return StorageIOError(
            errno.EBUSY, f"{where}the database stayed locked past busy_timeout_ms: {e}"
        )
    if isinstance(e, (apsw.ConnectionClosedError, apsw.CursorClosedError)):
        return CheckpointerClosedError(f"{where}the SQLite checkpointer is closed")
    code = _ERRNO.get(type(e))
    if code is not None:
        return StorageIOError(code, f"{where}{os.strerror(code)} (SQLite: {e})")
    if isinstance(e, OSError):
        return StorageIOError(e.errno, f"{where}{e.strerror or e}")
    return CheckpointerError(f"{where}SQLite error: {e}")


_ERRNO: dict[type[BaseException], int] = {
    apsw.FullError: errno.ENOSPC,
    apsw.IOError: errno.EIO,
    apsw.CantOpenError: errno.EIO,
    apsw.ReadOnlyError: errno.EROFS,
    apsw.PermissionsError: errno.EACCES,
    apsw.NoMemError: errno.ENOMEM,
}


@contextmanager
def translate(session_id: str | None = None) -> Iterator[None]:
    """Translate apsw and OS errors raised inside the block (see :func:`map_error`)."""
    try:
        yield
    except (apsw.Error, OSError, UnicodeError) as e:
        raise map_error(e, session_id) from e


def open_connection(file: str, busy_timeout_ms: int, synchronous: str) -> apsw.Connection:
    """Open one connection: busy timeout first, refuse a database of another schema version
    or of another program before changing anything, switch to WAL (retrying a refusal on a
    fresh file), set ``synchronous``, and create the schema if the database is new."""
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    if file.startswith("file:"):
        flags |= apsw.SQLITE_OPEN_URI
    try:
        conn = apsw.Connection(file, flags=flags)
    except apsw.CantOpenError as e:
        raise (_why_not_opened(file) or e) from e
    try:
        _refuse_a_stub(conn.filename, file)
        set_busy_wait(conn, busy_timeout_ms)  # before any pragma
        # Refuse a database of another version, or a foreign one, before changing anything
        # in it (the WAL switch below rewrites the file header).
        _refuse_unsupported_or_foreign(conn, file)
        for attempt in range(_WAL_ATTEMPTS):
            try:
                conn.pragma("journal_mode", "wal")
                break
            except apsw.BusyError:
                # A fresh file can refuse the WAL switch at once, ignoring the busy timeout.
                if attempt == _WAL_ATTEMPTS - 1:
                    raise
                time.sleep(0.01)
        conn.pragma("synchronous", synchronous)
        conn.pragma("journal_size_limit", 64 * 1024 * 1024)
        _ensure_schema(conn, file)
        _check_columns(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _why_not_opened(file: str) -> OSError | None:
    """What the OS says about opening ``file`` (a plain path) when SQLite could not: SQLite's
    own "unable to open database file" hides a denied permission or a folder at the path.
    None when the OS opens it (or ``file`` is a URI): SQLite's error stands then."""
    if file.startswith("file:") or file == ":memory:":
        return None
    try:
        os.close(os.open(file, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK))
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(file))
        if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
            return PermissionError(errno.EACCES, f"cannot create a file in {folder!r}")
        return None
    except OSError as e:
        return e
    return None


_SQLITE_HEADER = 100  # bytes: no database file SQLite writes is shorter (but an empty one)


def _refuse_a_stub(path: str, file: str) -> None:
    """Refuse a file of 1 to 99 bytes at the database's path (``path``: its real name, empty
    for an in-memory database): SQLite takes it for an empty database and would write a new
    one over it, while no database SQLite writes is that short (a log cut down, or another
    file). An empty file is an empty database (its content may still be in the WAL)."""
    if not path:
        return
    try:
        size = os.stat(path).st_size
    except OSError:
        return  # not there (a new database), or not looked up: SQLite says why
    if 0 < size < _SQLITE_HEADER:
        raise NotADatabaseError(
            f"{file} is not a SQLite database: it holds {size} bytes, shorter than a SQLite "
            "header; liteagent will not change it"
        )


def _ensure_schema(conn: apsw.Connection, file: str) -> None:
    """Create the schema of a new database in one ``BEGIN IMMEDIATE`` transaction; wait (up
    to ``_CREATE_WAIT_S``) while another process holds the write lock, until it has created
    the schema. Any version but the current one and 0 (new) is refused."""
    version = conn.pragma("user_version")
    _refuse_unsupported(version, file)
    if version == SCHEMA_VERSION:
        return
    deadline = time.monotonic() + _CREATE_WAIT_S
    try:  # the BEGIN inside: an interrupt right after it must not leave it open
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                break
            except apsw.BusyError:
                # Another process holds the write lock past our busy timeout: it may be
                # creating the schema and writing on at once. Done when it has set the version.
                if time.monotonic() > deadline:
                    raise
                if conn.pragma("user_version") == SCHEMA_VERSION:
                    return
                time.sleep(0.01)
        version = conn.pragma("user_version")
        _refuse_unsupported(version, file)
        if version == 0:
            conn.execute(SCHEMA)
            conn.pragma("user_version", SCHEMA_VERSION)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_expected_columns: dict[str, list[tuple[object, ...]]] = {}


def _columns(conn: apsw.Connection, table: str) -> list[tuple[object, ...]]:
    """``(name, declared type, not null, primary key position)`` of each column."""
    return [(r[1], r[2], r[3], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _check_columns(conn: apsw.Connection) -> None:
    """Refuse a store whose tables do not have the columns schema 2 gives them (a damaged
    schema page can rename a column or change its type): CorruptLogError, before any
    statement would fail on it."""
    if not _expected_columns:
        fresh = apsw.Connection(":memory:")
        try:
            fresh.execute(SCHEMA)
            _expected_columns.update({t: _columns(fresh, t) for t in TABLES})
        finally:
            fresh.close()
    for table, expected in _expected_columns.items():
        found = _columns(conn, table)
        if found != expected:
            raise CorruptLogError(
                None,
                None,
                f"the database schema is damaged: table {table} has columns {found}, "
                f"expected {expected}",
            )


def _refuse_unsupported_or_foreign(conn: apsw.Connection, file: str) -> None:
    """Refuse a database of a schema version this liteagent does not read, or of another
    program (unversioned, with tables), before anything in it is changed. Both are read in
    one snapshot."""
    try:  # the BEGIN inside: an interrupt right after it must not leave it open
        conn.execute("BEGIN")
        version = conn.pragma("user_version")
        names = sorted(
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        )
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    _refuse_unsupported(version, file)
    # liteagent creates its tables and sets user_version in one transaction, so an
    # unversioned database with any table is not one of ours.
    if version == 0 and names:
        raise NotADatabaseError(
            f"{file} is a SQLite database but not a liteagent log "
            f"(it has tables {names}); liteagent will not change it"
        )


def _refuse_unsupported(version: int, file: str) -> None:
    """Refuse every ``user_version`` but 0 (a new database) and :data:`SCHEMA_VERSION`."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{file} has schema version {version}; this liteagent knows up to "
            f"{SCHEMA_VERSION}: upgrade liteagent"
        )
    if version < 0:
        raise SchemaVersionError(
            f"{file} has schema version {version}, which no liteagent writes; it is left as it is"
        )
    if 0 < version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{file} has schema version {version}, older than the version {SCHEMA_VERSION} "
            "this liteagent reads: it was written by a development version before the first "
            "release, and there is no migration from it; it is left as it is"
        )


def integrity_problem(conn: apsw.Connection) -> IntegrityProblem | None:
    """Run SQLite's own ``PRAGMA integrity_check``; None when the database is healthy."""
    try:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    except (apsw.CorruptError, apsw.NotADBError, UnicodeError) as e:
        rows = [str(e)]
    if rows == ["ok"]:
        return None
    detail = "; ".join(" ".join(str(r).split()) for r in rows[:10])  # one line
    return IntegrityProblem("database", f"PRAGMA integrity_check: {detail}")
