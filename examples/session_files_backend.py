"""A third-party-style Checkpointer: one SQLite file per session, through the stdlib ``sqlite3``.

It uses only public names (``liteagent.eventlog`` and ``liteagent.eventlog.backend``) and passes
the conformance suite in one process, across processes and under SIGKILL
(``tests/test_backend_example.py``). Use it as ``session_files_checkpointer(root)``::

    root/store.sqlite              a counter: generations and lease tokens
    root/store.lock                an flock: every operation holds it shared, delete exclusively
    root/sessions/<id>.sqlite      one database per session: tables ``session`` (one row,
                                   generation and mtime, while the session exists) and
                                   ``events`` (seq, ts, kind, body)
    root/leases/<id>               an flock while the lease is held, and who holds it (JSON)
    root/blobs/                    the blobs (``FileBlobStore``)

SQLite's rollback journal makes each append and truncate atomic against other processes and
crashes. Deleting a session removes its file, which must not happen while another process has
it open: hence the store lock. A generation is never reused, also by a session deleted and
created again: hence the counter. A lease is an ``flock``, which the kernel drops when its
holder dies, so it cannot be taken over while its holder lives and the default fencing of
``append(..., lease=)`` is exact.

Left out, to stay small: ``repair()`` (the base class refuses it: a session found damaged takes
no writes until it is deleted), and checksums of its own: SQLite finds damage to its pages,
not a changed byte inside a row, so this backend does not claim the corruption suite.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from liteagent.eventlog import (
    BlobStore,
    Checkpointer,
    IntegrityProblem,
    IntegrityReport,
    Lease,
    LeaseInfo,
    Position,
    SessionInfo,
    StoredEvent,
)
from liteagent.eventlog.backend import (
    EncodedEvent,
    FileBlobStore,
    check_position,
    decode_stored,
    integrity_report,
)
from liteagent.eventlog.errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CodecError,
    CorruptLogError,
    SessionLeasedError,
    StorageIOError,
    TruncateRangeError,
)

__all__ = ["SessionFilesCheckpointer", "session_files_checkpointer"]

PAGE = 256  # events per read transaction


@contextlib.contextmanager
def translated(session_id: str | None) -> Iterator[None]:
    """The one boundary where sqlite3 and OS errors become liteagent errors."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        if e.sqlite_errorname in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            raise CorruptLogError(session_id, None, str(e)) from e
        raise StorageIOError(errno.EIO, f"sqlite3: {e}") from e
    except StorageIOError:
        raise
    except OSError as e:
        raise StorageIOError(e.errno, str(e)) from e


@contextlib.contextmanager
def transaction(path: Path, *, write: bool) -> Iterator[sqlite3.Connection]:
    """A connection to ``path`` inside one transaction (``BEGIN IMMEDIATE`` to write), closed
    afterwards: nothing is cached, so a deleted file is never read through an old handle."""
    with contextlib.closing(sqlite3.connect(path, timeout=30.0, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def session_state(conn: sqlite3.Connection) -> tuple[Position, float] | None:
    """The position and mtime stored in a session file; ``None`` when it holds no session."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'session'").fetchone() is None:
        return None
    row = conn.execute("SELECT generation, mtime FROM session").fetchone()
    if row is None:
        return None
    (head,) = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
    return Position(head, row[0]), row[1]


def _close_unlocked(fd: int) -> None:
    """Drop the flock, then close: a close alone keeps the lock while a process forked
    meanwhile still holds a copy of the descriptor."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class SessionFilesCheckpointer(Checkpointer):
    """See :func:`session_files_checkpointer`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self._root = Path(os.path.abspath(root))  # a later chdir must not move the store
        self._store = self._root / "store.sqlite"
        self._lock = threading.Lock()
        self._lease_files: dict[Lease, int] = {}  # a held lease -> its open, flocked file
        with translated(None):
            (self._root / "sessions").mkdir(parents=True, exist_ok=True)
            (self._root / "leases").mkdir(exist_ok=True)
            with transaction(self._store, write=True) as conn:
                conn.execute("CREATE TABLE IF NOT EXISTS counter (one INTEGER PRIMARY KEY, n INT)")
                conn.execute("INSERT OR IGNORE INTO counter VALUES (1, 0)")
        self._blob_store = FileBlobStore(self._root / "blobs")

    # -- helpers ----------------------------------------------------------------------------------

    def _file(self, session_id: str) -> Path:
        return self._root / "sessions" / f"{session_id}.sqlite"

    def _next_number(self) -> int:
        """The store's counter, increased: generations and lease tokens never repeat."""
        with transaction(self._store, write=True) as conn:
            conn.execute("UPDATE counter SET n = n + 1")
            (n,) = conn.execute("SELECT n FROM counter").fetchone()
        return int(n)

    @contextlib.contextmanager
    def _store_lock(self, *, exclusive: bool = False) -> Iterator[None]:
        fd = os.open(self._root / "store.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            _close_unlocked(fd)

    @contextlib.contextmanager
    def _session(self, session_id: str, *, write: bool) -> Iterator[sqlite3.Connection | None]:
        """A transaction on the session's file under the shared store lock; ``None`` for a
        read of a session that has no file. A write creates the file and its tables."""
        with translated(session_id), self._store_lock():
            path = self._file(session_id)
            if not write and not path.exists():
                yield None
                return
            with transaction(path, write=write) as conn:
                if write:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS session "
                        "(generation INTEGER NOT NULL, mtime REAL NOT NULL)"
                    )
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, "
                        "ts REAL NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL)"
                    )
                yield conn

    # -- the hooks --------------------------------------------------------------------------------

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        if not batch:
            head, generation = self._position(session_id)
            check_position(session_id, head, generation, expected_head, expected_generation)
            return head
        with self._session(session_id, write=True) as conn:
            assert conn is not None
            state = session_state(conn)
            head, generation = (0, 0) if state is None else state[0]
            check_position(session_id, head, generation, expected_head, expected_generation)
            if state is None:
                conn.execute("INSERT INTO session VALUES (?, ?)", (self._next_number(), ts))
            else:
                conn.execute("UPDATE session SET mtime = ?", (ts,))
            conn.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?)",
                [(head + i, ts, e.kind, e.body) for i, e in enumerate(batch, 1)],
            )
        return head + len(batch)

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        generation, seq = None, since_seq
        while True:  # one short transaction per page: nothing is held between pages
            if self.closed:
                raise CheckpointerClosedError("SessionFilesCheckpointer is closed")
            with self._session(session_id, write=False) as conn:
                state = None if conn is None else session_state(conn)
                now = None if state is None else state[0].generation
                if generation is None and now is None:
                    return
                if generation is not None and now != generation:
                    raise CheckpointConflictError(
                        session_id,
                        generation,
                        now or 0,
                        "the history was replaced while it was being read",
                    )
                generation = now
                assert conn is not None
                rows = conn.execute(
                    "SELECT seq, ts, kind, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                    (seq, PAGE),
                ).fetchall()
            if not rows:
                return  # the empty page above confirmed the generation: one history only
            for row_seq, ts, kind, body in rows:
                if row_seq != seq + 1:
                    raise CorruptLogError(session_id, seq + 1, "the seqs are not contiguous")
                seq = row_seq
                yield decode_stored(session_id, seq, ts, kind, body)

    def _position(self, session_id: str) -> Position:
        with self._session(session_id, write=False) as conn:
            state = None if conn is None else session_state(conn)
        return Position(0, 0) if state is None else state[0]

    def _list(self) -> list[SessionInfo]:
        infos = []
        with translated(None):
            files = sorted((self._root / "sessions").glob("*.sqlite"))
        for path in files:
            session_id = path.name.removesuffix(".sqlite")
            with self._session(session_id, write=False) as conn:
                state = None if conn is None else session_state(conn)
            if state is not None:
                infos.append(SessionInfo(session_id, state[1]))
        return infos

    def _delete(self, session_id: str) -> None:
        path = self._file(session_id)
        with translated(session_id), self._store_lock(exclusive=True):
            if not path.exists():
                return
            # A writer killed mid-transaction leaves a hot journal, which must not outlive its
            # database (SQLite would apply it to the next file of that name): reading the
            # database first rolls it back. A damaged file is deleted all the same.
            with contextlib.suppress(sqlite3.DatabaseError), transaction(path, write=False) as c:
                c.execute("SELECT count(*) FROM sqlite_master").fetchone()
            path.with_name(path.name + "-journal").unlink(missing_ok=True)
            path.unlink()

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        if not self._file(session_id).exists():  # an unknown session: create nothing
            check_position(session_id, 0, 0, expected_head, expected_generation)
            if to_seq != 0:
                raise TruncateRangeError(session_id, to_seq, 0)
            return 0
        with self._session(session_id, write=True) as conn:
            assert conn is not None
            state = session_state(conn)
            head, generation = (0, 0) if state is None else state[0]
            check_position(session_id, head, generation, expected_head, expected_generation)
            if not 0 <= to_seq <= head:
                raise TruncateRangeError(session_id, to_seq, head)
            if state is not None:
                conn.execute("DELETE FROM events WHERE seq > ?", (to_seq,))
                conn.execute(
                    "UPDATE session SET generation = ?, mtime = ?",
                    (self._next_number(), time.time()),
                )
        return to_seq

    def _check_integrity(self) -> IntegrityReport:
        problems: list[IntegrityProblem] = []
        sessions = events = 0
        for info in self._list():
            sessions += 1
            try:
                with self._session(info.id, write=False) as conn:
                    check = None if conn is None else conn.execute("PRAGMA quick_check")
                    verdict = "ok" if check is None else check.fetchone()[0]
                if verdict != "ok":
                    problems.append(IntegrityProblem("database", verdict, info.id))
                for _ in self._read(info.id, 0):
                    events += 1
            except CheckpointConflictError:
                continue  # truncated or deleted meanwhile: the next check sees the new history
            except CodecError as e:
                problems.append(IntegrityProblem("codec", str(e), info.id, e.seq))
            except CorruptLogError as e:
                problems.append(IntegrityProblem("corrupt", e.detail, info.id, e.seq))
        return integrity_report(problems, sessions, events)

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:  # noqa: ARG002
        # An flock lives exactly as long as its holder: no ttl, no expiry, no renewal.
        with translated(session_id):
            fd = os.open(
                self._root / "leases" / session_id, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise SessionLeasedError(session_id, holder_of(read_record(fd))) from None
                info = LeaseInfo(
                    owner, os.getpid(), socket.gethostname(), self._next_number(), None
                )
                write_record(
                    fd,
                    {
                        "held": True,
                        "owner": owner,
                        "pid": info.pid,
                        "host": info.host,
                        "token": info.token,
                    },
                )
            except BaseException:
                os.close(fd)
                raise
        lease = Lease(self, session_id, info)
        with self._lock:
            self._lease_files[lease] = fd
        return lease

    def _release_lease(self, lease: Lease) -> None:
        with self._lock:
            fd = self._lease_files.pop(lease, -1)
        if fd < 0:
            return
        with contextlib.suppress(OSError):
            write_record(fd, {"held": False})
        _close_unlocked(fd)

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:
        with translated(session_id):
            try:
                fd = os.open(self._root / "leases" / session_id, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            try:
                return holder_of(read_record(fd))
            finally:
                os.close(fd)

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        """Nothing to release: every operation opens and closes its own connection."""


# -- lease files -----------------------------------------------------------------------------------


def read_record(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_record(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


def holder_of(record: dict[str, Any]) -> LeaseInfo | None:
    """The holder a record names, if it says held and (on this host) its process is alive."""
    try:
        if record.get("held") is not True:
            return None
        info = LeaseInfo(
            str(record["owner"]),
            int(record["pid"]),
            str(record["host"]),
            int(record["token"]),
            None,
        )
    except (KeyError, TypeError, ValueError):
        return None
    if info.host == socket.gethostname():
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return None  # killed without releasing: the kernel dropped its flock
        except PermissionError:
            pass  # another user's live process
    return info


def session_files_checkpointer(root: str | os.PathLike[str]) -> Checkpointer:
    """Return a checkpointer keeping one SQLite file per session under the folder ``root``
    (created if missing), shared safely by threads and processes on one host."""
    return SessionFilesCheckpointer(root)
