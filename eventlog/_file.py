"""The file checkpointer: one append-only file of checksummed frames per session.

Layout under ``root``: ``<session_id>.log`` per session, ``.<session_id>.tmp`` while a truncate is
being written, ``.<session_id>.lease`` for the session's lease (see :mod:`._filelease`),
``<session_id>.log.quarantine-<time>`` for what a repair could not keep, and ``blobs/`` for the
blob store. Processes coordinate with ``flock`` on the log
file itself: a writer takes an exclusive lock, then checks that the path still names the file it
locked (a truncate replaces the file by rename, a delete unlinks it) and retries if not. Readers
take a shared lock only for the instant they measure the file, never while the caller iterates.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from ._blobs import BlobStore, FileBlobStore
from ._codec import Codec
from ._contract import (
    Checkpointer,
    EncodedEvent,
    IntegrityProblem,
    IntegrityReport,
    Position,
    RepairReport,
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
from ._filelease import (
    FileLease,
    acquire_file_lease,
    drop_file_lease,
    file_lease_holder,
    lease_problems,
    lease_records,
)
from ._filerepair import assess_log, salvage_log
from ._filerewrite import new_generation, rewrite_log, unlink_quietly
from ._filescan import Tail, check_log, read_header, read_log, verify_frames
from ._follow import poll_for_change
from ._frames import (
    FILE_HEADER_SIZE,
    build_frame,
    build_header,
    encode_payload,
)
from ._fsutil import close_unlocked, fsync_dir, open_regular, write_all
from ._ids import SESSION_ID_PATTERN, validate_session_id
from ._lease import Lease, LeaseInfo
from ._logger import get_logger
from ._paths import check_path, project_dir
from ._shown import shown

__all__ = ["FileCheckpointer", "file_checkpointer"]

_log = get_logger("liteagent.eventlog")

Durability = Literal["normal", "full"]
_MAX_OPEN_HANDLES = 128
_MAX_VERIFIED = 16384  # verified prefixes remembered for sessions whose handle was evicted
_MAX_TAILS = 16384  # where reads of a log last found a frame to end, per session
_RO = os.O_RDONLY | os.O_CLOEXEC
_RW = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
_LEFTOVER_TRIES = 5  # looks at a log replaced while it is looked at
_LOG_NAME = re.compile(SESSION_ID_PATTERN + r"\.log")


class _Handle:
    """A session's cached write state in this process, guarded by ``lock``."""

    __slots__ = (
        "evicted",
        "fd",
        "generation",
        "head",
        "ino",
        "lock",
        "path",
        "size",
        "torn",
        "valid",
        "verified",
        "writable",
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
        self.writable = False  # fd was opened for writing (else: a log this user only reads)
        # (ino, generation, end, head): the bytes up to ``end`` of that file were verified by
        # this process (whole, checksummed frames with consecutive seqs up to ``head``)
        self.verified: tuple[int, int, int, int] | None = None

    def close_fd(self) -> None:
        # The handle lets go of the number first: an interrupt (Ctrl-C) in the close must not
        # leave it naming a number the next open of another log may be given.
        fd, self.fd, self.valid = self.fd, -1, False
        if fd >= 0:
            close_unlocked(fd)


def _refuse_cut(
    session_id: str,
    verified: tuple[int, int, int, int] | None,
    ino: int,
    generation: int,
    size: int,
) -> None:
    """Raise :class:`CorruptLogError` when the log (``ino``, ``generation``) is ``size`` bytes,
    less than this process ``verified`` whole frames of it: liteagent never shortens a log in
    place past whole frames (a truncate or a repair writes a new file, with a new generation),
    so something else cut it, and events that were acknowledged may be gone."""
    if verified is None or verified[:2] != (ino, generation) or size >= verified[2]:
        return
    raise CorruptLogError(
        session_id,
        None,
        f"the log is shorter ({size} bytes) than this process read it whole ({verified[2]} "
        f"bytes, up to seq {verified[3]}): it was cut by something other than liteagent, and "
        "events it had acknowledged may be gone",
    )


class FileCheckpointer(Checkpointer):
    """See :func:`file_checkpointer`."""

    def __init__(self, root: Path, durability: Durability, codec: Codec | None) -> None:
        super().__init__()
        root = Path(os.path.abspath(root))  # a later change of folder must not move the store
        given: object = durability
        if type(given) is not str or given not in ("normal", "full"):
            raise InvalidArgumentError(f"durability must be 'normal' or 'full', got {shown(given)}")
        if codec is not None and not isinstance(codec, Codec):
            raise InvalidArgumentError(f"codec must have encode() and decode(), got {shown(codec)}")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except FileExistsError as e:  # a file (or a link to one) where the folder goes
            raise StorageIOError(
                errno.ENOTDIR, f"cannot use {root} as the store's folder: it is not a folder"
            ) from e
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot create {root}: {e.strerror}") from e
        self._root = root
        self._root_s = os.fspath(root)
        self._full = durability == "full"
        self._codec = codec
        self._handles: dict[str, _Handle] = {}
        self._handles_lock = threading.Lock()
        # What evicted handles had verified, so a session coming back is not scanned again.
        self._verified: dict[str, tuple[int, int, int, int]] = {}
        self._tails: dict[str, Tail] = {}  # where reads of each log found a frame to end
        self._blob_store = FileBlobStore(root / "blobs", codec, durability=durability)

    def _forked(self) -> None:
        """In a forked child: close this process's copies of the open logs without dropping
        their locks (they are the parent's), and start with fresh handles and locks."""
        for h in self._handles.values():
            if h.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(h.fd)
            h.fd = -1
        self._handles = {}
        self._handles_lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The folder holding the session logs."""
        return self._root

    def path_of(self, session_id: str) -> Path:
        """The log file of ``session_id`` (which may not exist)."""
        return self._root / f"{validate_session_id(session_id)}.log"

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
                h.verified = self._verified.pop(session_id, None)
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
                    if old.verified is not None:
                        self._verified[sid] = old.verified
                        if len(self._verified) > _MAX_VERIFIED:
                            del self._verified[next(iter(self._verified))]
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

    @staticmethod
    def _open_log(path: str, *, create: bool, write: bool) -> tuple[int, bool]:
        """Open a session's log for reading and writing, or (for a read, when this user may
        not write it) for reading only; return the descriptor and whether it is writable."""
        try:
            return open_regular(path, _RW | (os.O_CREAT if create else 0), 0o644), True
        except PermissionError:
            if write or create:
                raise
        return open_regular(path, os.O_RDONLY | os.O_CLOEXEC), False

    def _flock(
        self, h: _Handle, session_id: str, *, create: bool, exclusive: bool, load: bool = True
    ) -> bool:
        """flock the session's current log file through ``h`` and make ``h``'s state current
        (unless ``load`` is false: then only the lock is taken, whatever the file holds).

        Returns False (holding no flock) when the file does not exist and ``create`` is false.
        Must be called with ``h.lock`` held; the caller releases the flock with ``_unflock``.
        """
        path = h.path
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        while True:
            if h.fd >= 0 and exclusive and not h.writable:
                h.close_fd()  # opened by a read of a log this user could not write: try again
            if h.fd < 0:
                try:
                    h.fd, h.writable = self._open_log(path, create=create, write=exclusive)
                except FileNotFoundError:
                    if create:
                        raise
                    return False
                h.ino = os.fstat(h.fd).st_ino
                h.valid = False
            fcntl.flock(h.fd, mode)
            # The path must still name the file open here: liteagent replaces a log by renaming
            # over it and deletes it by unlinking; and the store's folder may have been moved
            # away (then the path names nothing, and nothing is written to the moved file).
            st: os.stat_result | None
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino == h.ino:
                if load and (not h.valid or st.st_size != h.size or (exclusive and h.torn)):
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
        """Make ``h`` describe the file: read its header and verify its frames, from where
        this process last verified them (the whole log the first time), so that the head it
        reports is one a reader can reach. A torn tail is cut if ``repair``; any other damage
        raises :class:`CorruptLogError` and changes nothing."""
        h.valid = False
        end, head, generation, damage = 0, 0, 0, None
        if size:
            if size < FILE_HEADER_SIZE:
                raise CorruptLogError(
                    session_id,
                    None,
                    f"the file is shorter than its header ({size} of {FILE_HEADER_SIZE} bytes)",
                )
            generation = read_header(h.fd, session_id).generation
            start, head = FILE_HEADER_SIZE, 0
            v = h.verified
            _refuse_cut(session_id, v, h.ino, generation, size)
            if v is not None and v[0] == h.ino and v[1] == generation:
                start, head = v[2], v[3]
            end, head, damage = verify_frames(
                h.fd, start, head, size, counts=True, codec=self._codec
            )
            h.verified = (h.ino, generation, end, head)
            if damage is not None and not damage.torn:
                raise CorruptLogError(session_id, head + 1, damage.reason)
        if repair:
            unlink_quietly(self._tmp_path(session_id))  # debris of a killed truncate
        if damage is not None and repair:
            _log.warning(
                "eventlog.torn_tail_cut",
                session_id=session_id,
                offset=end,
                bytes=size - end,
                reason=damage.reason,
            )
            os.ftruncate(h.fd, end)
            if self._full:
                os.fsync(h.fd)
        h.size = end if repair or damage is None else size
        h.torn = damage is not None and not repair
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
        h.verified = (h.ino, generation, h.size, h.head)
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
        try:
            yield from self._read_file(session_id, since_seq)
        except StorageIOError:
            raise
        except OSError as e:
            raise _io_error(e, session_id, "read") from e

    def _read_file(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        path = self._path(session_id)
        while True:
            try:
                fd = open_regular(path, _RO)
            except FileNotFoundError:
                return
            try:
                self._check_not_cut(session_id, fd)
                events = read_log(
                    fd,
                    path,
                    session_id,
                    since_seq,
                    codec=self._codec,
                    check_open=self._check_open,
                    replaced=lambda generation: self._replaced(session_id, generation),
                    tail=self._tails.get(session_id),
                    read_to=lambda tail: self._read_to(session_id, tail),
                )
                if events is not None:
                    yield from events
                    return
            finally:
                close_unlocked(fd)
            # The file was replaced between open and lock: read the current one.

    def _read_to(self, session_id: str, tail: Tail) -> None:
        """A read found a whole frame ending at ``tail``: the next read after its seq starts
        there (a live tail no longer walks the whole log for each new event)."""
        known = self._tails.get(session_id)
        if known is None or known[:2] != tail[:2] or known.seq < tail.seq:
            if len(self._tails) >= _MAX_TAILS and session_id not in self._tails:
                with contextlib.suppress(RuntimeError, StopIteration, KeyError):  # (raced)
                    self._tails.pop(next(iter(self._tails)))  # the oldest: it stays small
            self._tails[session_id] = tail

    def _check_not_cut(self, session_id: str, fd: int) -> None:
        """Raise :class:`CorruptLogError` when the log open as ``fd`` is shorter than this
        process read it whole (see :func:`_refuse_cut`)."""
        h = self._handles.get(session_id)
        v = h.verified if h is not None else self._verified.get(session_id)
        if v is None:
            return
        st = os.fstat(fd)  # (shorter than a header: a new file, or damage read_log reports)
        if st.st_ino == v[0] and FILE_HEADER_SIZE <= st.st_size < v[2]:
            generation = read_header(fd, session_id).generation
            _refuse_cut(session_id, v, st.st_ino, generation, st.st_size)

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
            except OSError as e:
                # gone since the scan: not listed. A link to nothing, a symlink loop, ...: the
                # session is listed (damaged: reading it raises, check_integrity() reports it)
                # and does not hide the store's other sessions.
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                _log.warning(
                    "eventlog.unreadable_log_entry", name=entry.name, error=str(e.strerror or e)
                )
                out.append(SessionInfo(entry.name[:-4], st.st_mtime))
                continue
            # empty: its first write never happened; shorter than a header: damage that reads
            # report (so a garbage collection cannot take it for a session without blobs); not
            # a file (a folder, a FIFO): damage, listed as such
            if st.st_size > 0 or not stat.S_ISREG(st.st_mode):
                out.append(SessionInfo(entry.name[:-4], st.st_mtime))
        return out

    def _delete(self, session_id: str) -> None:
        h = self._acquire(session_id)
        try:
            try:
                if not self._flock(h, session_id, create=False, exclusive=True, load=False):
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
        self._replace_fd(h, new_fd, new_size, to_seq, generation)

    @staticmethod
    def _replace_fd(h: _Handle, new_fd: int, size: int, head: int, generation: int) -> None:
        """Point ``h`` at the file that was just renamed over the log (closing the old one
        releases its lock: its waiters find it replaced and retry)."""
        old_fd, ino = h.fd, os.fstat(new_fd).st_ino
        h.fd, h.ino, h.size = new_fd, ino, size
        h.head, h.generation, h.valid, h.torn = head, generation, True, False
        h.verified = (h.ino, generation, size, head)
        close_unlocked(old_fd)

    def _check_integrity(self) -> IntegrityReport:
        problems: list[IntegrityProblem] = []
        events = sessions = 0
        for sid, size, odd in self._log_files():
            if size == 0:
                continue  # a session whose first write never happened
            sessions += 1
            if odd:
                problems.append(IntegrityProblem("corrupt", f"cannot read: {odd}", sid))
                continue
            if size < FILE_HEADER_SIZE:
                problems.append(
                    IntegrityProblem(
                        "corrupt",
                        f"the file is shorter than its header "
                        f"({size} of {FILE_HEADER_SIZE} bytes): "
                        "the log was cut, and any events it held are lost (needs repair)",
                        sid,
                    )
                )
                continue
            try:
                events += check_log(self._path(sid), sid, self._codec, problems)
            except FileNotFoundError:
                sessions -= 1  # deleted since it was listed
            except OSError as e:
                problems.append(
                    IntegrityProblem("corrupt", f"cannot read the log: {e.strerror or e}", sid)
                )
        try:
            entries = sorted(os.scandir(self._root_s), key=lambda e: e.name)
        except OSError as e:
            raise _io_error(e, None, "check") from e
        problems.extend(lease_problems(entries))
        temps = [e.name for e in entries if e.name.endswith(".tmp") and not _folder(e)]
        problems.extend(
            IntegrityProblem(
                "corrupt",
                f"{e.path} is a folder where a truncate writes its temp file: the session cannot "
                "be restored or repaired until it is removed",
                e.name[1:-4],
            )
            for e in entries
            if e.name.endswith(".tmp") and _folder(e)
        )
        problems.extend(
            IntegrityProblem(
                "leftover",
                f"{name}: the temp file of an interrupted truncate (removed by the next write)",
                name[1:-4],
            )
            for name in temps
            if self._left_over(name)
        )
        return integrity_report(problems, sessions, events)

    def _left_over(self, temp: str) -> bool:
        """Whether the temp file ``temp`` was left by an interrupted truncate, not made by one
        running now: a truncate holds its log's exclusive flock while its temp file exists."""
        temp_path = os.path.join(self._root_s, temp)
        log_path = self._path(temp[1:-4])
        for _ in range(_LEFTOVER_TRIES):
            try:
                fd = open_regular(log_path, os.O_RDONLY)
            except FileNotFoundError:
                return os.path.lexists(temp_path)
            except OSError:
                return True  # no log to ask (a link, a folder, ...): the temp file is left over
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino != os.stat(log_path).st_ino:
                    continue  # a truncate replaced the log meanwhile: ask the new one
                return os.path.lexists(temp_path)  # still there while no write holds the log
            except BlockingIOError:
                return False  # a write holds the log: its truncate is running
            except OSError:
                continue
            finally:
                close_unlocked(fd)
        return False  # replaced on every try: truncates are running

    def _log_files(self) -> list[tuple[str, int, str]]:
        """Every ``<sid>.log`` entry, its size and, for one that is not a regular file (or
        cannot be looked up), what is wrong with it (else ""), by session id."""
        out = []
        try:
            entries = list(os.scandir(self._root_s))
        except OSError as e:
            raise _io_error(e, None, "list") from e
        for entry in entries:
            if _LOG_NAME.fullmatch(entry.name) is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as e:
                out.append((entry.name[:-4], -1, f"cannot look it up: {e.strerror or e}"))
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((entry.name[:-4], st.st_size, ""))
            elif stat.S_ISLNK(st.st_mode):
                out.append((entry.name[:-4], -1, f"{entry.path} is a symbolic link (not followed)"))
            else:
                out.append((entry.name[:-4], -1, f"{entry.path} is not a regular file"))
        out.sort()
        return out

    def _repair(self, session_id: str) -> RepairReport:
        h = self._acquire(session_id)
        try:
            try:
                if not self._flock(h, session_id, create=False, exclusive=True, load=False):
                    return RepairReport(session_id, False, 0, 0, detail="no such session")
            except OSError as e:
                raise _io_error(e, session_id, "repair") from e
            try:
                return self._repair_locked(h, session_id)
            except OSError as e:
                raise _io_error(e, session_id, "repair") from e
            finally:
                self._unflock(h)
        finally:
            h.lock.release()

    def _repair_locked(self, h: _Handle, session_id: str) -> RepairReport:
        size = os.fstat(h.fd).st_size
        cut = ""  # why what this process knew of the log no longer holds
        try:
            header = read_header(h.fd, session_id)
        except CorruptLogError:  # a damaged header: assessed below
            pass
        else:
            try:
                _refuse_cut(session_id, h.verified, h.ino, header.generation, size)
            except CorruptLogError as e:
                cut = e.detail
        if cut:
            h.verified = None
            self._verified.pop(session_id, None)
        found = assess_log(h.fd, size, self._codec, session_id)
        unlink_quietly(self._tmp_path(session_id))
        if found.healthy:
            self._load(h, session_id, size, repair=True)
            return RepairReport(
                session_id,
                bool(cut),
                h.head,
                h.generation,
                detail=f"{cut}; kept as it is" if cut else "nothing to repair",
            )
        new_fd, new_size, generation, quarantine = salvage_log(
            h.fd,
            size,
            found,
            paths=(self._path(session_id), self._tmp_path(session_id), self._root_s),
            session_id=session_id,
            codec=self._codec,
        )
        self._replace_fd(h, new_fd, new_size, found.kept_head, generation)
        _log.warning(
            "eventlog.session_repaired",
            session_id=session_id,
            kept_head=found.kept_head,
            lost=found.lost,
            quarantine=quarantine,
            detail=found.detail,
        )
        return RepairReport(
            session_id, True, found.kept_head, generation, found.lost, quarantine, found.detail
        )

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:  # noqa: ARG002
        try:
            return acquire_file_lease(self, self._root_s, session_id, owner)
        except OSError as e:
            raise _io_error(e, session_id, "lease") from e

    def _release_lease(self, lease: Lease) -> None:
        if isinstance(lease, FileLease):
            lease.close_file(self._path(lease.session_id))

    def _drop_lease(self, session_id: str) -> None:
        drop_file_lease(self._root_s, session_id)

    def _lease_records(self) -> list[str]:
        try:
            return lease_records(self._root_s)
        except OSError as e:
            raise _io_error(e, None, "list the lease files") from e

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:
        try:
            return file_lease_holder(self._root_s, session_id)
        except OSError as e:
            raise _io_error(e, session_id, "lease") from e

    def _follow_wait(
        self, session_id: str, position: Position, wake: threading.Event, timeout: float
    ) -> None:
        # A write changes the log's size (an append) or its inode (a truncate, a repair, a
        # delete): poll that with stat(), as cheap as it gets.
        path = self._path(session_id)

        def probe() -> tuple[int, int, int] | None:
            if self._closed:
                return (-1, -1, -1)
            try:
                st = os.stat(path)
            except OSError:
                return None
            return (st.st_ino, st.st_size, st.st_mtime_ns)

        poll_for_change(
            probe, lambda: self._closed or self._position(session_id) != position, wake, timeout
        )

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


def _folder(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a folder (not followed through a symlink)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


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
    if root is None:
        path = project_dir(workdir, home) / "sessions"
    else:
        path = Path(check_path("root", root))
        if home is not None:
            check_path("home", home)
        check_path("workdir", workdir)
    return FileCheckpointer(path, durability, codec)
