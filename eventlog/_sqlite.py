"""The SQLite checkpointer (apsw, WAL): many processes on one host share one database file.

Writes go through the process's one writer for the file (see ``_sqlite_writer``): each is run
in a ``BEGIN IMMEDIATE`` transaction that reads the session's position, checks the caller's
expectations and writes, and the writes that arrive together share one commit. Reads use a
connection per thread (apsw connections must not be used by two threads at once) and fetch a
page per short read transaction, never keeping one open while the caller iterates; an in-memory
database (``":memory:"``) is process-local and uses one connection under a lock.

Every event row carries a checksum of ``(session_id, seq, ts, kind, body)`` and every sessions
row one of ``(id, head, generation)`` (see ``_sqlite_rows``); a read checks each row's types,
checksum and seq, and that the rows reach the head the session records. An append first makes
sure that every row it builds on was verified by this process, so nothing is acknowledged onto a
log that cannot be read back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
import urllib.parse
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import apsw
import msgspec
import xxhash

from ._blobs import BlobStore
from ._codec import Codec, check_codec, codec_decode, codec_encode
from ._contract import (
    KEPT_IN_CHILD,
    Checkpointer,
    EncodedEvent,
    IntegrityReport,
    Position,
    RepairReport,
    SessionInfo,
    decode_stored,
    open_checkpointers,
)
from ._errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    LiteAgentError,
    NotADatabaseError,
    StorageIOError,
)
from ._events import StoredEvent
from ._follow import poll_for_change
from ._ids import validate_session_id
from ._lease import Lease, LeaseInfo
from ._paths import check_path
from ._shown import shown
from ._sqlite_batch import WriteOp
from ._sqlite_blobs import SqliteBlobStore
from ._sqlite_commit import run_alone
from ._sqlite_db import SCHEMA_VERSION, integrity_problem, open_connection, translate
from ._sqlite_lease import SqliteLeases
from ._sqlite_ops import Append, NeedsScan, delete_op, session_position, truncate_op
from ._sqlite_repair import check_store, rebuild_op, repair_op, unrepairable
from ._sqlite_rows import (
    Seeds,
    Verified,
    corrupt,
    decode_raw,
    fetch_page,
    fetch_session_row,
    raw_select,
    row_problem,
    session_row_problem,
)
from ._sqlite_writer import REGISTRY, Writer

__all__ = ["SCHEMA_VERSION", "SqliteCheckpointer", "sqlite_checkpointer"]

Synchronous = Literal["normal", "full"]
_PAGE = 2000
_INLINE_VERIFY = 2000  # rows an append verifies inside its transaction; more: before it
_MAX_BUSY_MS = (1 << 31) - 1
_CRC_MASK = (1 << 63) - 1

_xxh = xxhash.xxh3_64_intdigest
_pack = struct.Struct("<qd").pack
_INSERT = "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES (?, ?, ?, ?, ?, ?)"
_LAST_SEQ = "SELECT seq FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"


def _check_file(given: object) -> str:
    file = check_path("file", given)  # a plain, non-empty str without NUL
    try:
        file.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"file is not encodable as UTF-8: {shown(file)}") from e
    return file


def _absolute(path: str) -> str:
    """``path`` made absolute against the current folder (a plain path, or the path of a
    ``file:`` URI), so that a process that changes its folder later still opens this store
    (every thread opens its own connection, some long after). Memory databases and URIs with
    an absolute path are returned as they are."""
    if not path.startswith("file:"):
        return path if path == ":memory:" else os.path.abspath(path)
    rest = path[len("file:") :]
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    name, tail = rest[:cut], rest[cut:]
    if not name or name.startswith(("/", ":memory:")):
        return path
    return f"file:{urllib.parse.quote(os.getcwd(), safe='/')}/{name}{tail}"


def _opening(path: str, error: StorageIOError | NotADatabaseError) -> LiteAgentError:
    """``error``, raised while opening the store at ``path``, with the path in its message."""
    if isinstance(error, StorageIOError):
        return StorageIOError(error.errno, f"cannot open the SQLite store {path!r}: {error}")
    return NotADatabaseError(f"{path!r}: {error}")


class SqliteCheckpointer(Checkpointer):
    """See :func:`sqlite_checkpointer`."""

    def __init__(
        self,
        file: object,
        synchronous: object,
        busy_timeout_ms: object,
        integrity_check_on_open: object,
        codec: object = None,
    ) -> None:
        super().__init__()
        path = _check_file(file)
        self._codec = check_codec(codec)
        if type(synchronous) is not str or synchronous not in ("normal", "full"):
            raise InvalidArgumentError(
                f"synchronous must be 'normal' or 'full', got {shown(synchronous)}"
            )
        if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= _MAX_BUSY_MS:
            raise InvalidArgumentError(
                f"busy_timeout_ms must be an int in 0..{_MAX_BUSY_MS}, got {shown(busy_timeout_ms)}"
            )
        if type(integrity_check_on_open) is not bool:
            raise InvalidArgumentError(
                f"integrity_check_on_open must be a bool, got {shown(integrity_check_on_open)}"
            )
        path = _absolute(path)
        self._file = path
        self._uri = path.startswith("file:")
        # Every connection to ":memory:" (or a memory URI) is a database of its own: such a
        # checkpointer shares one connection between threads, under a lock.
        self._memory = path == ":memory:" or (
            self._uri and (path.startswith("file::memory:") or "mode=memory" in path)
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
        self._writer: Writer | None = None
        self._verified = Verified()
        self._blob_store = SqliteBlobStore(self, self._codec)
        self._lease_table = SqliteLeases(self)
        if not self._memory and not self._uri:
            if os.path.isdir(path):
                raise StorageIOError(
                    errno.EISDIR, f"file {path!r} is a folder, not a database file"
                )
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as e:
                raise StorageIOError(
                    errno.ENOTDIR, f"file {path!r}: a part of its folder is a file, not a folder"
                ) from e
            except OSError as e:
                raise StorageIOError(
                    e.errno, f"cannot make the folder of {path!r}: {e.strerror or e}"
                ) from e
        try:
            self._open(path, integrity_check_on_open)
        except BaseException:
            self.close()
            raise

    def _open(self, path: str, integrity_check: bool) -> None:
        """Open this thread's connection now, so that a bad file fails here (its error naming
        ``path``), and join the process's writer of the file."""
        try:
            with self._conn() as conn, translate():
                if not self._memory:
                    st = os.stat(conn.filename)
                    self._writer = REGISTRY.acquire(path, (st.st_dev, st.st_ino), conn.filename)
                    self._verified = self._writer.verified
                problem = integrity_problem(conn) if integrity_check else None
        except (StorageIOError, NotADatabaseError) as e:
            if path in str(e):
                raise
            raise _opening(path, e) from e
        if problem is not None:
            raise CorruptLogError(None, None, problem.detail)

    def _fork_refs(self) -> list[object]:
        """Before a fork: what of this checkpointer holds SQLite connections (see
        :func:`_before_fork`)."""
        lock = getattr(self, "_conns_lock", None)
        if lock is None:  # its construction failed before it opened anything
            return []
        with lock:
            return [*self._conns, self._shared, self._writer]

    def _forked(self) -> None:
        """In a forked child: the connections (and the writer) are the parent's, never used or
        closed here (SQLite's connections must not cross a fork; closing them could also wait
        forever on a mutex a parent thread held at the fork). Threads open new ones, through a
        writer of the child's own; the lease bookkeeping starts empty."""
        self._local = threading.local()
        self._conns = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        self._mem_lock = threading.RLock()
        old = self._writer
        if old is not None and not self._closed:
            self._writer = REGISTRY.acquire(old.file, old.key, old.path)
            self._verified = self._writer.verified
        self._lease_table.forked()

    @property
    def file(self) -> str:
        """The database file."""
        return self._file

    # -- connections ------------------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[apsw.Connection]:
        """This thread's connection (the shared one, under a lock, for ``:memory:``); raises
        :class:`StorageIOError` (``ESTALE``) once the database file was deleted, moved or
        replaced while open."""
        if self._memory:
            with self._mem_lock:
                yield self._shared_conn()
            return
        writer = self._writer
        if writer is not None:  # (None only while opening)
            gone = writer.moved()  # the file at the path is no longer the one open here
            if gone is not None:
                raise gone
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

    def _submit(self, op: WriteOp, session_id: str | None, *, own_transaction: bool = False) -> Any:
        """Run one write and return its result once it is committed."""
        writer = self._writer
        if writer is not None:
            return writer.submit(
                op, session_id, self._sync, self._busy_ms, own_transaction=own_transaction
            )
        with self._mem_lock:
            return run_alone(self._shared_conn(), op, session_id, own_transaction=own_transaction)

    @contextmanager
    def _snapshot(self, session_id: str | None) -> Iterator[apsw.Connection]:
        """A short read transaction: the statements inside see one snapshot."""
        with self._conn() as conn, translate(session_id):
            try:  # the BEGIN inside: an interrupt right after it must not leave it open
                conn.execute("BEGIN")
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    # -- contract primitives ----------------------------------------------------------------------

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        batch = self._encoded(batch)
        op = Append(session_id, batch, ts, (expected_head, expected_generation), self._verified)
        return self._submit_append(op, session_id)

    def _encoded(self, batch: list[EncodedEvent]) -> list[EncodedEvent]:
        """The batch as stored: each body through the storage codec (before any lock)."""
        codec = self._codec
        if codec is None:
            return batch
        return [EncodedEvent(e.kind, codec_encode(codec, e.body, "an event")) for e in batch]

    def _submit_append(self, op: Append, session_id: str) -> int:
        for _ in range(3):
            try:
                return cast(int, self._submit(op, session_id))
            except NeedsScan:
                # Verify the rows this process has not read yet outside the write transaction
                # (a big session must not hold every writer up), then try again.
                self._scan(session_id)
        op.limit = None  # still more (others keep appending): verify inside the transaction
        return cast(int, self._submit(op, session_id))

    def _append_leased(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        self._check_held(lease)
        op = Append(
            session_id,
            self._encoded(batch),
            ts,
            (expected_head, expected_generation),
            self._verified,
            fence=self._lease_table.fence(lease),
        )
        return self._submit_append(op, session_id)

    def _scan(self, session_id: str) -> None:
        """Read the session's rows without decoding them: records how far they verify."""
        known = self._verified.get(session_id)
        for _ in self._rows(session_id, 0 if known is None else known[1], decode=False):
            pass

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        return self._rows(session_id, since_seq, decode=True)

    def _rows(self, session_id: str, since_seq: int, *, decode: bool) -> Iterator[StoredEvent]:
        generation: int | None = None
        last = since_seq
        seeds = Seeds(session_id)
        xxh, pack, mask = _xxh, _pack, _CRC_MASK
        codec = self._codec
        while True:
            head, current, rows = self._page(session_id, last)
            if generation is None:
                generation = current
            elif current != generation:
                raise CheckpointConflictError(
                    session_id,
                    generation,
                    current,
                    "the history was truncated or deleted while it was being read",
                )
            # Check and decode the page into a list and hand it over with one `yield from`;
            # a damaged event still comes after every good event before it.
            page: list[StoredEvent] = []
            append = page.append
            error: LiteAgentError | None = None
            for row in rows:
                seq, ts, kind, body, crc = row
                try:
                    good = (
                        seq == last + 1
                        and seq <= head
                        and crc == xxh(body, xxh(pack(seq, ts), seeds[kind])) & mask
                    )
                except (TypeError, struct.error, OverflowError):
                    good = False
                if not good:
                    error = corrupt(session_id, last + 1, _why(seeds, row, last, head))
                    break
                last = seq
                if not decode:
                    continue
                try:
                    if codec is not None:
                        body = codec_decode(codec, body, "an event", session_id=session_id, seq=seq)
                    append(decode_stored(session_id, seq, ts, kind, body))
                except CodecError as e:
                    error = e
                    break
            yield from page
            if error is not None:
                raise error
            if len(rows) < _PAGE:
                if last < head:
                    raise corrupt(
                        session_id,
                        last + 1,
                        f"the session records head {head}; its stored rows end at seq {last}",
                    )
                self._verified.extend(session_id, generation, since_seq, head)
                # The caller may have taken a while over the last page: a history replaced
                # meanwhile is still reported before the read ends.
                if page and self._generation(session_id) != generation:
                    raise CheckpointConflictError(
                        session_id,
                        generation,
                        None,
                        "the history was truncated or deleted while it was being read",
                    )
                return
            self._check_open()

    def _page(self, session_id: str, after: int) -> tuple[int, int, list[Any]]:
        """``(head, generation, rows)``: the checked session record and a page of rows after
        ``after``, from one snapshot."""
        with self._snapshot(session_id) as conn:
            srow = fetch_session_row(conn, session_id)
            rows = fetch_page(conn, session_id, after, _PAGE)
        if srow is None:
            if rows:
                raise corrupt(
                    session_id,
                    after + 1,
                    "rows are stored for a session that has no session record",
                )
            return 0, 0, rows
        problem = session_row_problem(session_id, srow)
        if problem is not None:
            raise corrupt(session_id, None, problem)
        return srow[0], srow[1], rows

    def _generation(self, session_id: str) -> int:
        with self._conn() as conn, translate(session_id):
            row = conn.execute(
                "SELECT generation FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        return 0 if row is None else cast(int, row[0])

    def _position(self, session_id: str) -> Position:
        with self._snapshot(session_id) as conn:
            head, gen, exists = session_position(conn, session_id)
            row = conn.execute(_LAST_SEQ, (session_id,)).fetchone()
        last = 0 if row is None else row[0]
        if last != head:
            if not exists:
                raise corrupt(
                    session_id, None, "rows are stored for a session that has no session record"
                )
            raise corrupt(
                session_id,
                min(last, head) + 1 if type(last) is int else None,
                f"the session records head {head}; its last stored row is seq {last!r}",
            )
        return Position(head, gen)

    def _list(self) -> list[SessionInfo]:
        with self._conn() as conn, translate():
            rows = [
                decode_raw(r)
                for r in conn.execute(
                    f"SELECT {raw_select(('id', 'mtime'))} FROM sessions"  # noqa: S608
                )
            ]
        out = []
        for sid, mtime in rows:
            # A damaged id is not a session anyone can name; check_integrity reports it.
            if type(sid) is str and _valid_id(sid):
                out.append(SessionInfo(sid, float(mtime) if type(mtime) is float else 0.0))
        return out

    def _delete(self, session_id: str) -> None:
        self._submit(delete_op(session_id, self._verified), session_id)

    def _delete_leased(self, session_id: str, *, lease: Lease) -> None:
        self._check_held(lease)
        fence = self._lease_table.fence(lease)
        self._submit(delete_op(session_id, self._verified, fence=fence), session_id)

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        op = truncate_op(session_id, to_seq, (expected_head, expected_generation), self._verified)
        return cast(int, self._submit(op, session_id))

    def _truncate_leased(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        self._check_held(lease)
        op = truncate_op(
            session_id,
            to_seq,
            (expected_head, expected_generation),
            self._verified,
            fence=self._lease_table.fence(lease),
        )
        return cast(int, self._submit(op, session_id))

    def _check_integrity(self) -> IntegrityReport:
        with self._conn() as conn:
            return check_store(conn, lambda sid: self._rows(sid, 0, decode=True))

    def _repair(self, session_id: str) -> RepairReport:
        op = repair_op(session_id, self._verified, self._file, self._codec)
        try:
            return cast(RepairReport, self._submit(op, session_id))
        except CorruptLogError as e:
            if not isinstance(e.__cause__, (apsw.CorruptError, apsw.NotADBError)):
                raise
        # SQLite's own pages are damaged: salvage the damaged tables, then repair again.
        moved = cast(list[str], self._submit(rebuild_op, None, own_transaction=True))
        try:
            report = cast(RepairReport, self._submit(op, session_id))
        except CorruptLogError as e:
            if isinstance(e.__cause__, (apsw.CorruptError, apsw.NotADBError)):
                raise unrepairable(session_id, self._file, e.__cause__) from e
            raise
        if moved:
            parts = [report.detail] if report.detail else []
            parts.append("damaged tables: " + "; ".join(moved))
            report = msgspec.structs.replace(report, repaired=True, detail="; ".join(parts))
        return report

    def _follow_wait(
        self, session_id: str, position: Position, wake: threading.Event, timeout: float
    ) -> None:
        # PRAGMA data_version changes when another connection (this process's writer, or
        # another process) committed; an in-memory database has one connection: poll the
        # position itself there.
        def probe() -> object:
            if self._closed:
                return None
            if self._memory:
                return self._position(session_id)
            with self._conn() as conn, translate(session_id):
                return conn.pragma("data_version")

        poll_for_change(
            probe, lambda: self._closed or self._position(session_id) != position, wake, timeout
        )

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:
        return self._lease_table.acquire(session_id, owner, ttl)

    def _release_lease(self, lease: Lease) -> None:
        self._lease_table.release(lease)

    def _drop_lease(self, session_id: str) -> None:
        self._lease_table.drop(session_id)

    def _lease_records(self) -> list[str]:
        return self._lease_table.records()

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:
        return self._lease_table.holder(session_id)

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        self._lease_table.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            REGISTRY.release(writer)
        with self._mem_lock, self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
            self._shared = None
        for conn in conns:
            # Closing is best effort: a connection busy in another thread stays open.
            with contextlib.suppress(apsw.Error):
                conn.close()
        self._local = threading.local()


def _why(seeds: Seeds, row: Any, last: int, head: int) -> str:
    """Why ``row`` failed the read's fast check (the slow, exact explanation)."""
    problem = row_problem(seeds, row, last + 1)
    if problem is not None:
        return problem
    return f"a row is stored at seq {last + 1}, after the session's recorded head {head}"


def _valid_id(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except LiteAgentError:
        return False
    return True


def sqlite_checkpointer(
    file: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "normal",
    busy_timeout_ms: int = 5000,
    integrity_check_on_open: bool = False,
    codec: Codec | None = None,
) -> Checkpointer:
    """Return a checkpointer on a SQLite database in WAL mode, shared by many processes.

    ``synchronous="normal"`` survives a process crash; ``"full"`` also survives power loss (an
    fsync per commit; the appends of concurrent sessions share a commit). ``busy_timeout_ms``
    bounds how long a writer waits for another process's. ``":memory:"`` gives a process-local
    database. A database of another schema version (written by a newer liteagent, or an older
    one by a development version before the first release) is refused with
    :class:`SchemaVersionError`, a file that is not a database with :class:`NotADatabaseError`,
    and either is left as it is. ``codec`` transforms every stored event body and blob
    (e.g. :func:`zlib_codec`; the checksums cover the stored bytes): a store written with a
    codec must be opened with the same one, else reads raise :class:`CodecError`.
    """
    return SqliteCheckpointer(file, synchronous, busy_timeout_ms, integrity_check_on_open, codec)


# Connections of a SQLite database must not cross a fork: a forked child neither uses nor closes
# its copies. CPython frees the other threads' thread-locals in the child (closing their
# connections there, which can wait forever on a mutex a parent thread held at the fork), so
# every connection gets one more reference before the fork, which the child keeps for good.
_ACROSS_FORK: list[object] = []  # the references taken before a fork (the parent drops them)


def _before_fork() -> None:
    for cp in open_checkpointers():
        if isinstance(cp, SqliteCheckpointer):
            # (one whose construction failed halfway holds no connection; a fork hook must
            # never raise)
            with contextlib.suppress(Exception):
                _ACROSS_FORK.extend(cp._fork_refs())


def _after_fork_in_parent() -> None:
    _ACROSS_FORK.clear()


def _after_fork_in_child() -> None:
    KEPT_IN_CHILD.extend(_ACROSS_FORK)
    _ACROSS_FORK.clear()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
