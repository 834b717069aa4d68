"""The file checkpointer: one append-only file of checksummed frames per session.

Layout under ``root``: ``<session_id>.log`` per session, ``.<session_id>.tmp`` while a truncate is
being written, and ``blobs/`` for the blob store. Processes coordinate with ``flock`` on the log
file itself: a writer takes an exclusive lock, then checks that the path still names the file it
locked (a truncate replaces the file by rename, a delete unlinks it) and retries if not. Readers
take a shared lock only for the instant they measure the file, never while the caller iterates.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import structlog

from ._blobs import BlobStore, FileBlobStore
from ._codec import Codec
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
    CheckpointConflictError,
    CorruptLogError,
    InvalidArgumentError,
    StorageIOError,
    TruncateRangeError,
)
from ._events import StoredEvent
from ._filerewrite import new_generation, rewrite_log, unlink_quietly
from ._filescan import check_log, find_tail, read_header, read_log
from ._frames import (
    FILE_HEADER_SIZE,
    build_frame,
    build_header,
    encode_payload,
)
from ._fsutil import fsync_dir, write_all
from ._ids import SESSION_ID_PATTERN
from ._paths import project_dir

__all__ = ["FileCheckpointer", "file_checkpointer"]

_log = structlog.get_logger("liteagent.eventlog")

Durability = Literal["normal", "full"]
_MAX_OPEN_HANDLES = 128
_RO = os.O_RDONLY | os.O_CLOEXEC
_RW = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
_LOG_NAME = re.compile(SESSION_ID_PATTERN + r"\.log")


class _Handle:
    """A session's cached write state in this process, guarded by ``lock``."""

    __slots__ = (
        "evicted", "fd", "generation", "head", "ino", "lock", "path", "size", "torn", "valid"
    )

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.fd = -1
        self.ino = 0
        self.size = 0
        self.head = 0
        self.generation = 0
        self.valid = False
        self.torn = False  # a torn tail was seen by a reader; the next writer cuts it
        self.evicted = False

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.valid = False


class FileCheckpointer(Checkpointer):
    """See :func:`file_checkpointer`."""

    def __init__(self, root: Path, durability: Durability, codec: Codec | None) -> None:
        super().__init__()
        if durability not in ("normal", "full"):
            raise InvalidArgumentError(f"durability must be 'normal' or 'full', got {durability!r}")
        if codec is not None and not isinstance(codec, Codec):
            raise InvalidArgumentError(f"codec must have encode() and decode(), got {codec!r}")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot create {root}: {e.strerror}") from e
        self._root = root
        self._root_s = os.fspath(root)
        self._full = durability == "full"
        self._codec = codec
        self._handles: dict[str, _Handle] = {}
        self._handles_lock = threading.Lock()
        self._blob_store = FileBlobStore(root / "blobs", codec)

    @property
    def root(self) -> Path:
        """The folder holding the session logs."""
        return self._root

    def path_of(self, session_id: str) -> Path:
        """The log file of ``session_id`` (which may not exist)."""
        return self._root / f"{session_id}.log"

    def _path(self, session_id: str) -> str:
        return os.path.join(self._root_s, session_id + ".log")

    def _tmp_path(self, session_id: str) -> str:
        return os.path.join(self._root_s, "." + session_id + ".tmp")

    # -- handles and locking --------------------------------------------------------------------

    def _handle(self, session_id: str) -> _Handle:
        h = self._handles.get(session_id)  # fast path: a dict read is atomic
        if h is not None and not self._closed:
            return h
        with self._handles_lock:
            self._check_open()
            h = self._handles.get(session_id)
            if h is None:
                h = self._handles[session_id] = _Handle(self._path(session_id))
                if len(self._handles) > _MAX_OPEN_HANDLES:
                    self._evict_idle()
            return h

    def _evict_idle(self) -> None:
        # Oldest first (dict order); a busy handle is skipped and evicted on a later call.
        for sid in list(self._handles)[: len(self._handles) - _MAX_OPEN_HANDLES]:
            old = self._handles[sid]
            if old.lock.acquire(blocking=False):
                try:
                    old.evicted = True
                    old.close_fd()
                    del self._handles[sid]
                finally:
                    old.lock.release()

    def _acquire(self, session_id: str) -> _Handle:
        """Return the session's handle with its thread lock held (a live, not evicted one)."""
        while True:
            h = self._handle(session_id)
            h.lock.acquire()
            if not h.evicted:
                return h
            h.lock.release()

    def _flock(self, h: _Handle, session_id: str, *, create: bool, exclusive: bool) -> bool:
        """flock the session's current log file through ``h`` and make ``h``'s state current.

        Returns False (holding no flock) when the file does not exist and ``create`` is false.
        Must be called with ``h.lock`` held; the caller releases the flock with ``_unflock``.
        """
        path = h.path
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        while True:
            if h.fd < 0:
                try:
                    h.fd = os.open(path, _RW | (os.O_CREAT if create else 0), 0o644)
                except FileNotFoundError:
                    if create:
                        raise
                    return False
                h.ino = os.fstat(h.fd).st_ino
                h.valid = False
            fcntl.flock(h.fd, mode)
            st: os.stat_result | None = os.fstat(h.fd)
            # One link means the file is still at its path: liteagent replaces a log only by
            # renaming over it and deletes it by unlinking, both of which drop the old file to
            # zero links. Any other count (a replaced file, or a hard link made by a backup
            # tool) is settled by looking the path up.
            if st is not None and st.st_nlink != 1:
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    st = None
            if st is not None and st.st_ino == h.ino:
                if not h.valid or st.st_size != h.size or (exclusive and h.torn):
                    try:
                        self._load(h, session_id, st.st_size, repair=exclusive)
                    except BaseException:
                        fcntl.flock(h.fd, fcntl.LOCK_UN)
                        raise
                return True
            fcntl.flock(h.fd, fcntl.LOCK_UN)
            h.close_fd()
            if st is None and not create:
                return False

    @staticmethod
    def _unflock(h: _Handle) -> None:
        if h.fd >= 0:
            fcntl.flock(h.fd, fcntl.LOCK_UN)

    def _load(self, h: _Handle, session_id: str, size: int, *, repair: bool) -> None:
        """Read the file's header and find its last whole frame; cut a torn tail if ``repair``."""
        h.valid = False
        if size < FILE_HEADER_SIZE:
            # A new file, or a creation cut short before its header was whole: no session yet.
            end, head, generation, damage = 0, 0, 0, size > 0
            reason = "an incomplete file header"
        else:
            generation = read_header(h.fd, session_id).generation
            end, head, found = find_tail(h.fd, size)
            if found is not None and not found.torn:
                raise CorruptLogError(session_id, head + 1, found.reason)
            damage = found is not None
            reason = "" if found is None else found.reason
        if repair:
            unlink_quietly(self._tmp_path(session_id))  # debris of a killed truncate
        if damage and repair:
            _log.warning(
                "eventlog.torn_tail_cut",
                session_id=session_id,
                offset=end,
                bytes=size - end,
                reason=reason,
            )
            os.ftruncate(h.fd, end)
            if self._full:
                os.fsync(h.fd)
        h.size = end if repair or not damage else size
        h.torn = damage and not repair
        h.head, h.generation, h.valid = head, generation, True

    # -- contract primitives ----------------------------------------------------------------------

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        if not batch:
            head, gen = self._position(session_id)
            check_position(session_id, head, gen, expected_head, expected_generation)
            return head
        payload = encode_payload(batch, ts, self._codec)  # before any lock: a codec error
        h = self._acquire(session_id)  # touches nothing on disk
        try:
            try:
                self._flock(h, session_id, create=True, exclusive=True)
            except OSError as e:
                raise _io_error(e, session_id, "open") from e
            try:
                return self._append_locked(
                    h, session_id, payload, len(batch), (expected_head, expected_generation)
                )
            finally:
                self._unflock(h)
        finally:
            h.lock.release()

    def _append_locked(
        self,
        h: _Handle,
        session_id: str,
        payload: bytes,
        count: int,
        expected: tuple[int | None, int | None],
    ) -> int:
        check_position(session_id, h.head, h.generation, *expected)
        frame = build_frame(payload, h.head + 1, count)
        generation = h.generation
        if h.size == 0:
            generation = new_generation()
            frame = build_header(generation) + frame
        try:
            write_all(h.fd, frame)
            if self._full:
                os.fdatasync(h.fd)
                if h.size == 0:
                    fsync_dir(self._root_s)
        except OSError as e:
            h.valid = False
            with contextlib.suppress(OSError):  # else the next write-open cuts the torn tail
                os.ftruncate(h.fd, h.size)
            raise _io_error(e, session_id, "append") from e
        h.size += len(frame)
        h.head += count
        h.generation = generation
        return h.head

    def _position(self, session_id: str) -> Position:
        h = self._acquire(session_id)
        try:
            try:
                if not self._flock(h, session_id, create=False, exclusive=False):
                    return Position(0, 0)
            except OSError as e:
                raise _io_error(e, session_id, "read") from e
            self._unflock(h)
            return Position(h.head, h.generation)
        finally:
            h.lock.release()

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        path = self._path(session_id)
        while True:
            try:
                fd = os.open(path, _RO)
            except FileNotFoundError:
                return
            except OSError as e:
                raise _io_error(e, session_id, "read") from e
            try:
                events = read_log(
                    fd,
                    path,
                    session_id,
                    since_seq,
                    codec=self._codec,
                    check_open=self._check_open,
                    replaced=lambda generation: self._replaced(session_id, generation),
                )
                if events is not None:
                    yield from events
                    return
            finally:
                os.close(fd)
            # The file was replaced between open and lock: read the current one.

    def _replaced(self, session_id: str, generation: int) -> CheckpointConflictError:
        try:
            actual: object = self._position(session_id).generation
        except Exception:  # noqa: BLE001 -- only for the message
            actual = "unknown"
        return CheckpointConflictError(
            session_id,
            generation,
            actual,
            "the history was truncated or deleted while it was being read",
        )

    def _list(self) -> list[SessionInfo]:
        pattern = _LOG_NAME
        out: list[SessionInfo] = []
        try:
            entries = list(os.scandir(self._root_s))
        except OSError as e:
            raise _io_error(e, None, "list") from e
        for entry in entries:
            if pattern.fullmatch(entry.name) is None:
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            if st.st_size >= FILE_HEADER_SIZE:
                out.append(SessionInfo(entry.name[:-4], st.st_mtime))
        return out

    def _delete(self, session_id: str) -> None:
        h = self._acquire(session_id)
        try:
            try:
                if not self._flock(h, session_id, create=False, exclusive=True):
                    return
            except OSError as e:
                raise _io_error(e, session_id, "delete") from e
            try:
                os.unlink(self._path(session_id))
                unlink_quietly(self._tmp_path(session_id))
                if self._full:
                    fsync_dir(self._root_s)
            except OSError as e:
                raise _io_error(e, session_id, "delete") from e
            finally:
                self._unflock(h)
                h.close_fd()
        finally:
            h.lock.release()

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        h = self._acquire(session_id)
        try:
            try:
                exists = self._flock(h, session_id, create=False, exclusive=True)
            except OSError as e:
                raise _io_error(e, session_id, "truncate") from e
            try:
                head, gen = (h.head, h.generation) if exists else (0, 0)
                check_position(session_id, head, gen, expected_head, expected_generation)
                if not 0 <= to_seq <= head:
                    raise TruncateRangeError(session_id, to_seq, head)
                if not exists or h.size == 0:
                    return 0
                try:
                    self._rewrite(h, session_id, to_seq)
                except OSError as e:
                    raise _io_error(e, session_id, "truncate") from e
                return to_seq
            finally:
                if exists:
                    self._unflock(h)
        finally:
            h.lock.release()

    def _rewrite(self, h: _Handle, session_id: str, to_seq: int) -> None:
        """Replace the log by its first ``to_seq`` events and point ``h`` at the new file
        (closing the old one releases its lock: its waiters find it replaced and retry)."""
        generation = new_generation()
        new_fd, new_size = rewrite_log(
            h.fd,
            h.size,
            to_seq,
            generation,
            paths=(self._path(session_id), self._tmp_path(session_id), self._root_s),
            session_id=session_id,
            codec=self._codec,
        )
        old_fd = h.fd
        h.fd, h.ino, h.size = new_fd, os.fstat(new_fd).st_ino, new_size
        h.head, h.generation, h.valid, h.torn = to_seq, generation, True, False
        os.close(old_fd)

    def _check_integrity(self) -> IntegrityReport:
        problems: list[IntegrityProblem] = []
        infos = sorted(self._list(), key=lambda i: i.id)
        events = 0
        for info in infos:
            try:
                events += check_log(self._path(info.id), info.id, self._codec, problems)
            except OSError as e:
                problems.append(IntegrityProblem("corrupt", f"cannot read: {e}", info.id))
        try:
            leftovers = sorted(n for n in os.listdir(self._root_s) if n.endswith(".tmp"))
        except OSError as e:
            raise _io_error(e, None, "check") from e
        problems.extend(
            IntegrityProblem(
                "leftover",
                f"{name}: the temp file of an interrupted truncate (removed by the next write)",
                name[1:-4],
            )
            for name in leftovers
        )
        return integrity_report(problems, len(infos), events)

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        with self._handles_lock:
            handles = list(self._handles.values())
            self._handles.clear()
        for h in handles:
            with h.lock:
                h.evicted = True
                h.close_fd()


def _io_error(e: OSError, session_id: str | None, what: str) -> StorageIOError:
    where = f" session {session_id!r}" if session_id else ""
    return StorageIOError(e.errno, f"cannot {what}{where}: {e.strerror or e}")


def file_checkpointer(
    root: str | os.PathLike[str] | None = None,
    *,
    durability: Durability = "normal",
    codec: Codec | None = None,
    workdir: str | os.PathLike[str] = ".",
    home: str | os.PathLike[str] | None = None,
) -> Checkpointer:
    """Return the default checkpointer: one append-only file per session under ``root``.

    ``root=None`` means ``<home>/projects/<project-hash>/sessions`` for ``workdir`` (see
    :func:`project_dir`). ``durability="normal"`` survives a process crash (no fsync per append);
    ``"full"`` also survives power loss (``fdatasync`` per append). ``codec`` transforms every
    frame and blob on disk (e.g. :func:`zlib_codec`). Safe to share between threads and between
    processes on one host.
    """
    path = Path(project_dir(workdir, home) / "sessions" if root is None else root)
    return FileCheckpointer(path, durability, codec)
