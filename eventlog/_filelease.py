"""Session leases of the file backend: an ``flock`` on ``<root>/.<session_id>.lease``.

The holder keeps the file open with ``flock(LOCK_EX | LOCK_NB)`` for as long as it holds the
lease; the kernel drops the lock when the holder closes it or dies (SIGKILL included), so a
lease never outlives its process and needs no expiry or renewal. The file also holds a small
JSON record, rewritten under the lock: the fencing token (a counter that survives every
release) and, while the lease is held, who holds it. :func:`lease_holder` only reads that
record (it never touches the lock, so it cannot make a concurrent acquire fail); a record left
"held" by a process that is gone (checked by pid and process start time on this host) is
reported as free.

A session that is not there keeps no lease file: releasing a lease of a session without a log
(never written, or deleted while the lease was held) unlinks the file, under the lock, and
deleting a session nobody holds a lease of removes it too (:func:`drop_file_lease`). A new
lease file's first token is the time in microseconds (``first_token``), so tokens keep
increasing across files.
A process that opened the file just before it was unlinked may then take the lock on the
unlinked file; so an acquire checks, once it has the lock, that the path still names the file
it locked, and starts again when it does not.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import stat
import threading
import time
from typing import TYPE_CHECKING, Any

from ._contract import IntegrityProblem
from ._errors import SessionLeasedError
from ._fsutil import close_unlocked, open_regular
from ._ids import SESSION_ID_PATTERN
from ._lease import MAX_TOKEN, Lease, LeaseInfo, next_token
from ._liveness import MAX_PID

if TYPE_CHECKING:
    from ._contract import Checkpointer

__all__ = [
    "FileLease",
    "acquire_file_lease",
    "drop_file_lease",
    "file_lease_holder",
    "lease_path",
    "lease_problems",
    "lease_records",
]

_RECORD_MAX = 4096
# Every open lease-file descriptor, from its open to its close: a forked child closes its
# copies at once (closing a copy drops no lock of the parent's). Opens happen under the lock,
# which a fork waits for, so no descriptor is open and not yet here when the child starts.
_OPEN_FDS: set[int] = set()
_OPEN_FDS_LOCK = threading.Lock()
_NAMING_WAIT = 0.5  # seconds a refused acquire waits for the winner to write its record


_LEASE_NAME = re.compile(r"\.(" + SESSION_ID_PATTERN + r")\.lease")


def lease_path(root: str, session_id: str) -> str:
    """The lease file of ``session_id`` under ``root``."""
    return os.path.join(root, "." + session_id + ".lease")


def lease_records(root: str) -> list[str]:
    """The session ids with a lease file under ``root`` (``OSError`` passes through)."""
    with os.scandir(root) as entries:
        return [m.group(1) for e in entries if (m := _LEASE_NAME.fullmatch(e.name)) is not None]


def lease_problems(entries: list[os.DirEntry[str]]) -> list[IntegrityProblem]:
    """A ``"corrupt"`` finding for each lease path among the store folder's ``entries`` that
    is not a regular file (a folder, FIFO or symbolic link put there): its session can take
    no lease, so no turn, restore or compaction, until that is removed (never by the library,
    which only ever unlinks a regular lease file)."""
    problems = []
    for entry in entries:
        name = _LEASE_NAME.fullmatch(entry.name)
        if name is None:
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            what = f"cannot be looked up ({e.strerror or e})"
        else:
            if stat.S_ISREG(mode):
                continue
            kind = "a symbolic link" if stat.S_ISLNK(mode) else _not_a_file(mode)
            what = f"is {kind}, not a regular file"
        problems.append(
            IntegrityProblem(
                "corrupt",
                f"its lease file {entry.path} {what}: the session takes no turn, restore or "
                "compaction until it is removed",
                name.group(1),
            )
        )
    return problems


def _not_a_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a socket or device"


class FileLease(Lease):
    """A held file lease: the open, flocked lease file."""

    def __init__(
        self, checkpointer: Checkpointer, session_id: str, info: LeaseInfo, fd: int, path: str
    ) -> None:
        super().__init__(checkpointer, session_id, info)
        self.fd = fd
        self.path = path

    def close_file(self, log_path: str) -> None:
        """Mark the record free, drop the lock and close the file (once). When the session has
        no log at ``log_path`` (never written, or deleted), the lease file is unlinked too,
        under the lock: nothing is left of a session that is not there."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        try:
            with contextlib.suppress(OSError):
                _write_record(fd, {"token": self.info.token, "held": False})
                if not os.path.lexists(log_path) and _still_named(fd, self.path):
                    os.unlink(self.path)
        finally:
            _close_lease_file(fd)


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux /proc), or None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields and fields[0] in (b"Z", b"X"):  # a zombie or dead process holds nothing
        return "dead"
    return fields[19].decode() if len(fields) > 19 else None


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    now = _start_time(pid)
    return now != "dead" and (start is None or now is None or now == start)


def _read_record(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, _RECORD_MAX, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


def _holder(record: dict[str, Any]) -> LeaseInfo | None:
    """The holder a record names, if it says held and its process is alive."""
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
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(1e400)
        return None
    if not (0 < info.pid <= MAX_PID and 0 <= info.token <= MAX_TOKEN):
        return None  # a damaged record names nobody
    if info.host == socket.gethostname() and not _alive(info.pid, record.get("start")):
        return None
    return info


def _lock_or_refuse(fd: int, session_id: str) -> None:
    """Take the flock on ``fd`` or raise :class:`SessionLeasedError` naming the holder.

    The winner of a race writes its record just after it takes the lock, so a loser that finds
    the record not (yet) naming a live holder reads it again for a moment (or takes the lock,
    should the holder release it meanwhile) instead of refusing without a name."""
    deadline = time.monotonic() + _NAMING_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(_read_record(fd))
            if holder is not None or time.monotonic() >= deadline:
                raise SessionLeasedError(session_id, holder) from None
            time.sleep(0.002)
        else:
            return


def _still_named(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not unlinked or replaced)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def _refuse_a_link_to_another_file(fd: int, path: str) -> None:
    """Raise ``OSError`` when the lease file is a hard link shared with a file that holds
    something other than a lease record (another session's log, say), which the record would
    overwrite. A hard link between lease files (a backup made with links) is let be."""
    if os.fstat(fd).st_nlink < 2:
        return
    raw = os.pread(fd, _RECORD_MAX + 1, 0)
    try:
        record = json.loads(raw) if raw and len(raw) <= _RECORD_MAX else {}
    except ValueError:
        record = None
    if not isinstance(record, dict) or (raw and not record):
        raise OSError(
            errno.EMLINK,
            "the lease file is a hard link to a file that is not a lease record, which the "
            "record would overwrite; remove the lease file",
            path,
        )


def _open_locked(path: str, session_id: str) -> int:
    """Open the lease file at ``path`` (made if missing) and take its lock, or raise
    :class:`SessionLeasedError`; a file unlinked by a delete meanwhile is let go and the path
    opened again."""
    while True:
        # Never follow a symlink at the lease path (it could point at another session's log,
        # which the record would overwrite) and never block on a FIFO there.
        fd = _open_lease_file(path, os.O_RDWR | os.O_CREAT)
        try:
            _refuse_a_link_to_another_file(fd, path)
            _lock_or_refuse(fd, session_id)
            if _still_named(fd, path):
                return fd
        except BaseException:
            _close_lease_file(fd, unlock=False)
            raise
        _close_lease_file(fd)


def acquire_file_lease(
    checkpointer: Checkpointer, root: str, session_id: str, owner: str
) -> FileLease:
    """Take the lease or raise :class:`SessionLeasedError` at once (``OSError`` passes
    through for the caller to translate)."""
    fd = _open_locked(lease_path(root, session_id), session_id)
    try:
        token = _read_record(fd).get("token")
        pid = os.getpid()
        info = LeaseInfo(
            owner,
            pid,
            socket.gethostname(),
            next_token(token),
            None,
        )
        _write_record(
            fd,
            {
                "token": info.token,
                "held": True,
                "owner": owner,
                "pid": pid,
                "host": info.host,
                "start": _start_time(pid),
            },
        )
    except BaseException:
        _close_lease_file(fd)
        raise
    return FileLease(checkpointer, session_id, info, fd, lease_path(root, session_id))


def drop_file_lease(root: str, session_id: str) -> None:
    """Unlink the lease file of a deleted session unless its lease is held (``OSError``
    passes through)."""
    path = lease_path(root, session_id)
    try:
        fd = _open_lease_file(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held: it stays
        if _still_named(fd, path):
            os.unlink(path)
    finally:
        _close_lease_file(fd)


def file_lease_holder(root: str, session_id: str) -> LeaseInfo | None:
    """Who holds the lease, from its record (without touching the lock)."""
    try:
        fd = open_regular(lease_path(root, session_id), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return _holder(_read_record(fd))
    finally:
        os.close(fd)


def _open_lease_file(path: str, flags: int) -> int:
    """Open a lease file (``open_regular``), registered for a forked child to close."""
    with _OPEN_FDS_LOCK:
        fd = open_regular(path, flags, 0o644)
        _OPEN_FDS.add(fd)
    return fd


def _close_lease_file(fd: int, *, unlock: bool = True) -> None:
    """Close a descriptor of :func:`_open_lease_file` (``unlock``: dropping its flock first)."""
    with _OPEN_FDS_LOCK:
        _OPEN_FDS.discard(fd)
    if unlock:
        close_unlocked(fd)
    else:
        os.close(fd)


def _close_copies_in_child() -> None:
    """In a forked child: close the copies of the parent's lease files, keeping its locks."""
    global _OPEN_FDS_LOCK  # noqa: PLW0603 -- a fresh lock in the child
    for fd in _OPEN_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN_FDS.clear()
    _OPEN_FDS_LOCK = threading.Lock()


def _before_fork() -> None:
    _OPEN_FDS_LOCK.acquire()


def _after_fork_in_parent() -> None:
    _OPEN_FDS_LOCK.release()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_close_copies_in_child,
)
