"""The SQLite checkpointer (apsw, WAL): many processes on one host share one database file.

Every write is one ``BEGIN IMMEDIATE`` transaction that reads the session's position, checks the
caller's expectations and writes, so concurrent writers serialize without lost updates. Each
thread gets its own connection (apsw connections must not be used by two threads at once); an
in-memory database (``":memory:"``) is process-local and uses one connection under a lock.
Reads fetch a page per short read transaction and never keep one open while the caller iterates.
Every event row carries a checksum of its body, so damage inside a row is detected, not decoded.

apsw exceptions are translated to liteagent's errors here, in :func:`_translate`, and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import apsw
import msgspec
import xxhash

from ._blobs import BlobStore, blob_ref, parse_blob_ref, verify_blob
from ._contract import (
    Checkpointer,
    EncodedEvent,
    IntegrityProblem,
    IntegrityReport,
    Position,
    SessionInfo,
    check_position,
    integrity_report,
)
from ._errors import (
    BlobNotFoundError,
    CheckpointConflictError,
    CheckpointerClosedError,
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    LiteAgentError,
    TruncateRangeError,
)
from ._eventcodec import DECODERS
from ._events import OpaqueEvent, StoredEvent
from ._sqlite_db import SCHEMA_VERSION, integrity_problem, map_error, open_connection, translate

__all__ = ["SCHEMA_VERSION", "SqliteCheckpointer", "sqlite_checkpointer"]

Synchronous = Literal["normal", "full"]
_PAGE = 2000
_CRC_MASK = (1 << 63) - 1

_POSITION = "SELECT head, generation FROM sessions WHERE id = ?"
_TOUCH = "UPDATE sessions SET head = ?, mtime = ? WHERE id = ?"
_xxh = xxhash.xxh3_64_intdigest
_decoder_for = DECODERS.get
_INSERT = "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES (?, ?, ?, ?, ?, ?)"


def _crc(body: bytes) -> int:
    return _xxh(body) & _CRC_MASK


class SqliteCheckpointer(Checkpointer):
    """See :func:`sqlite_checkpointer`."""

    def __init__(
        self,
        file: str,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        integrity_check_on_open: bool,
    ) -> None:
        super().__init__()
        if synchronous not in ("normal", "full"):
            raise InvalidArgumentError(
                f"synchronous must be 'normal' or 'full', got {synchronous!r}"
            )
        if type(busy_timeout_ms) is not int or busy_timeout_ms < 0:
            raise InvalidArgumentError(
                f"busy_timeout_ms must be an int >= 0, got {busy_timeout_ms!r}"
            )
        self._file = file
        self._uri = file.startswith("file:")
        # Every connection to ":memory:" (or a memory URI) is a database of its own: such a
        # checkpointer shares one connection between threads, under a lock.
        self._memory = file == ":memory:" or (
            self._uri and (file.startswith("file::memory:") or "mode=memory" in file)
        )
        self._sync = synchronous.upper()
        self._busy_ms = busy_timeout_ms
        self._local = threading.local()
        # Every open connection, for close(). A thread's connection lives in self._local; when
        # the thread ends, its connection is released (and closed by apsw) with it.
        self._conns: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
        self._shared: apsw.Connection | None = None
        self._conns_lock = threading.Lock()
        self._mem_lock = threading.RLock()
        self._blob_store = SqliteBlobStore(self)
        if not self._memory and not self._uri:
            with translate():
                Path(file).parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._conn() as conn, translate():  # open now: a bad file fails here
                problem = integrity_problem(conn) if integrity_check_on_open else None
        except BaseException:
            self.close()
            raise
        if problem is not None:
            self.close()
            raise CorruptLogError(None, None, problem.detail)

    @property
    def file(self) -> str:
        """The database file."""
        return self._file

    # -- connections ------------------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[apsw.Connection]:
        """This thread's connection (the shared one, under a lock, for ``:memory:``)."""
        if self._memory:
            with self._mem_lock:
                yield self._shared_conn()
            return
        yield self._thread_conn()

    def _shared_conn(self) -> apsw.Connection:
        """The one connection of an in-memory database; call with ``_mem_lock`` held."""
        self._check_open()
        if self._shared is None:
            with translate():
                self._shared = open_connection(self._file, self._busy_ms, self._sync)
            self._conns.add(self._shared)
        return self._shared

    def _thread_conn(self) -> apsw.Connection:
        """This thread's own connection, opened on first use."""
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        self._check_open()
        with translate():
            conn = open_connection(self._file, self._busy_ms, self._sync)
        with self._conns_lock:
            if self._closed:
                conn.close()
                raise CheckpointerClosedError("SqliteCheckpointer is closed")
            self._conns.add(conn)
        self._local.conn = conn
        return conn

    @contextmanager
    def _write(self, session_id: str | None) -> Iterator[apsw.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error."""
        with self._conn() as conn, translate(session_id):
            conn.execute("BEGIN IMMEDIATE")
            committed = False
            try:
                yield conn
                conn.execute("COMMIT")
                committed = True
            finally:
                if not committed and conn.in_transaction:
                    conn.execute("ROLLBACK")

    @contextmanager
    def _snapshot(self, session_id: str | None) -> Iterator[apsw.Connection]:
        """A short read transaction: the statements inside see one snapshot."""
        with self._conn() as conn, translate(session_id):
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    @staticmethod
    def _next_generation(conn: apsw.Connection) -> int:
        rows = conn.execute(
            "UPDATE meta SET value = value + 1 WHERE key = 'next_generation' RETURNING value - 1"
        ).fetchall()
        return int(cast(int, rows[0][0]))

    # -- contract primitives ----------------------------------------------------------------------

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        # The hot path: no context managers, one try block as the error boundary.
        if self._memory:
            with self._mem_lock:
                conn = self._shared_conn()
                return self._append_on(
                    conn, session_id, batch, ts, (expected_head, expected_generation)
                )
        conn = getattr(self._local, "conn", None) or self._thread_conn()
        return self._append_on(conn, session_id, batch, ts, (expected_head, expected_generation))

    def _append_on(
        self,
        conn: apsw.Connection,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected: tuple[int | None, int | None],
    ) -> int:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(_POSITION, (session_id,)).fetchone()
                head, gen = (0, 0) if row is None else cast(tuple[int, int], row)
                check_position(session_id, head, gen, *expected)
                if batch:
                    if len(batch) == 1:
                        e = batch[0]
                        body = e.body
                        conn.execute(_INSERT, (session_id, head + 1, ts, e.kind, body,
                                               _xxh(body) & _CRC_MASK))
                    else:
                        conn.executemany(
                            _INSERT,
                            [
                                (session_id, head + 1 + i, ts, e.kind, e.body, _crc(e.body))
                                for i, e in enumerate(batch)
                            ],
                        )
                    if row is None:
                        conn.execute(
                            "INSERT INTO sessions(id, head, generation, mtime) "
                            "VALUES (?, ?, ?, ?)",
                            (session_id, head + len(batch), self._next_generation(conn), ts),
                        )
                    else:
                        conn.execute(_TOUCH, (head + len(batch), ts, session_id))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except apsw.Error as e:
            raise map_error(e, session_id) from e
        return head + len(batch)

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        generation: int | None = None
        last = since_seq
        while True:
            with self._snapshot(session_id) as conn:
                row = conn.execute(
                    "SELECT generation FROM sessions WHERE id = ?", (session_id,)
                ).fetchone()
                rows = (
                    []
                    if row is None
                    else conn.execute(
                        "SELECT seq, ts, kind, body, crc FROM events "
                        "WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                        (session_id, last, _PAGE),
                    ).fetchall()
                )
            current = 0 if row is None else int(row[0])
            if generation is None:
                generation = current
            elif current != generation:
                raise CheckpointConflictError(
                    session_id,
                    generation,
                    current,
                    "the history was truncated or deleted while it was being read",
                )
            if not rows:
                return
            # Decode the page into a list and hand it over with one `yield from`; a damaged
            # event still comes after every good event before it.
            page: list[StoredEvent] = []
            append = page.append
            error: LiteAgentError | None = None
            typed = cast(list[tuple[int, float, str, bytes, int]], rows)
            for seq, ts, kind, body, crc in typed:
                if seq != last + 1:
                    error = CorruptLogError(session_id, last + 1, f"the next stored seq is {seq}")
                    break
                if _xxh(body) & _CRC_MASK != crc:
                    error = CorruptLogError(session_id, seq, "the event's checksum does not match")
                    break
                last = seq
                decoder = _decoder_for(kind)
                if decoder is None:
                    append(StoredEvent(seq, ts, kind, OpaqueEvent(kind, body)))
                    continue
                try:
                    append(StoredEvent(seq, ts, kind, decoder.decode(body)))
                except (msgspec.DecodeError, RecursionError) as e:
                    error = CodecError(
                        f"cannot decode {kind} event: {e}", session_id=session_id, seq=seq
                    )
                    error.__cause__ = e
                    break
            yield from page
            if error is not None:
                raise error
            self._check_open()

    def _position(self, session_id: str) -> Position:
        with self._conn() as conn, translate(session_id):
            row = conn.execute(
                "SELECT head, generation FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        return Position(0, 0) if row is None else Position(int(row[0]), int(row[1]))

    def _list(self) -> list[SessionInfo]:
        with self._conn() as conn, translate():
            return [
                SessionInfo(sid, float(mtime))
                for sid, mtime in conn.execute("SELECT id, mtime FROM sessions")
            ]

    def _delete(self, session_id: str) -> None:
        with self._write(session_id) as conn:
            conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        with self._write(session_id) as conn:
            row = conn.execute(
                "SELECT head, generation FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            head, gen = (0, 0) if row is None else row
            check_position(session_id, head, gen, expected_head, expected_generation)
            if not 0 <= to_seq <= head:
                raise TruncateRangeError(session_id, to_seq, int(head))
            if row is None:
                return 0
            conn.execute(
                "DELETE FROM events WHERE session_id = ? AND seq > ?", (session_id, to_seq)
            )
            conn.execute(
                "UPDATE sessions SET head = ?, generation = ?, mtime = ? WHERE id = ?",
                (to_seq, self._next_generation(conn), time.time(), session_id),
            )
            return to_seq

    def _check_integrity(self) -> IntegrityReport:
        problems: list[IntegrityProblem] = []
        with self._conn() as conn, translate():
            db_problem = integrity_problem(conn)
            if db_problem is not None:
                problems.append(db_problem)
            try:
                sessions = [
                    (str(sid), int(cast(int, head)))
                    for sid, head in conn.execute("SELECT id, head FROM sessions ORDER BY id")
                ]
            except apsw.CorruptError as e:
                problems.append(IntegrityProblem("database", f"cannot list sessions: {e}"))
                sessions = []
        events = 0
        for sid, head in sessions:
            events += self._check_session(sid, head, problems)
        return integrity_report(problems, len(sessions), events)

    def _check_session(self, session_id: str, head: int, problems: list[IntegrityProblem]) -> int:
        unknown: set[str] = set()
        count = 0
        try:
            for count, ev in enumerate(self._read(session_id, 0), start=1):
                if ev.seq != count:
                    problems.append(
                        IntegrityProblem("gap", f"expected seq {count}, found {ev.seq}",
                                         session_id, count)
                    )
                    return count
                if isinstance(ev.body, OpaqueEvent):
                    unknown.add(ev.kind)
        except CorruptLogError as e:
            problems.append(IntegrityProblem("corrupt", e.detail, session_id, e.seq))
            return count
        except CodecError as e:
            problems.append(IntegrityProblem("codec", str(e), session_id, e.seq))
            return count
        if count != head:
            problems.append(
                IntegrityProblem("gap", f"the session records head {head}, the log ends at "
                                 f"{count}", session_id, count + 1)
            )
        if unknown:
            problems.append(
                IntegrityProblem(
                    "unknown_kind",
                    f"events of kinds this version does not know (kept as-is): {sorted(unknown)}",
                    session_id,
                )
            )
        return count

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        with self._mem_lock, self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
            self._shared = None
        for conn in conns:
            # Closing is best effort: a connection busy in another thread stays open.
            with contextlib.suppress(apsw.Error):
                conn.close()
        self._local = threading.local()


class SqliteBlobStore(BlobStore):
    """Blobs inside the checkpointer's database (table ``blobs``), so they live with the log."""

    def __init__(self, owner: SqliteCheckpointer) -> None:
        self._owner = owner

    def put(self, data: bytes) -> str:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"blob data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        ref = blob_ref(data)
        self._owner._check_open()
        with self._owner._write(None) as conn:
            conn.execute("INSERT OR IGNORE INTO blobs(ref, data) VALUES (?, ?)", (ref, data))
        return ref

    def _fetch(self, ref: str) -> Any:
        parse_blob_ref(ref)
        self._owner._check_open()
        with self._owner._conn() as conn, translate():
            return conn.execute("SELECT data FROM blobs WHERE ref = ?", (ref,)).fetchone()

    def get(self, ref: str) -> bytes:
        row = self._fetch(ref)
        if row is None:
            raise BlobNotFoundError(f"no blob {ref}")
        return verify_blob(ref, bytes(row[0]))

    def has(self, ref: str) -> bool:
        return self._fetch(ref) is not None


def sqlite_checkpointer(
    file: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "normal",
    busy_timeout_ms: int = 5000,
    integrity_check_on_open: bool = False,
) -> Checkpointer:
    """Return a checkpointer on a SQLite database in WAL mode, shared by many processes.

    ``synchronous="normal"`` survives a process crash; ``"full"`` also survives power loss (an
    fsync per commit). ``busy_timeout_ms`` bounds how long a writer waits for another one.
    ``":memory:"`` gives a process-local database. A database written by a newer liteagent is
    refused with :class:`SchemaVersionError`; a file that is not a database with
    :class:`NotADatabaseError`.
    """
    return SqliteCheckpointer(
        os.fspath(file), synchronous, busy_timeout_ms, integrity_check_on_open
    )
