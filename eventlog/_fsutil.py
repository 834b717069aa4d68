"""Small file-system helpers shared by the file backend and the file blob store."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

__all__ = ["close_unlocked", "fsync_dir", "open_regular", "write_all"]


def close_unlocked(fd: int) -> None:
    """Drop ``fd``'s ``flock`` explicitly, then close it. Closing alone frees the lock only once
    every descriptor of the open file is closed, and a process forked meanwhile (a daemon's
    ``multiprocessing`` worker) holds a copy of each for as long as it lives."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def open_regular(
    path: str | os.PathLike[str], flags: int, mode: int = 0o644, *, follow: bool = False
) -> int:
    """Open ``path`` with ``flags`` and return the fd, refusing anything but a regular file.

    Unless ``follow``, a symbolic link at ``path`` is never followed (``O_NOFOLLOW``). The file
    is opened with ``O_NONBLOCK`` (so a FIFO cannot block the open) and checked with ``fstat``;
    ``O_NONBLOCK`` is then cleared. A symlink or a non-regular file raises :class:`OSError`
    whose ``strerror`` names the path and what is there.
    """
    extra = os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise OSError(
                errno.ELOOP,
                f"{os.fspath(path)} is a symbolic link, not a regular file (not followed)",
            ) from e
        if e.errno == errno.ENXIO:  # a write-only open of a FIFO (or socket) without reader
            raise OSError(errno.ENXIO, f"{os.fspath(path)} is not a regular file") from e
        raise
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if regular and not flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        what = _kind(st.st_mode)
        raise OSError(
            errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
            f"{os.fspath(path)} is {what}, not a regular file",
        )
    return fd


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    n = os.write(fd, data)
    if n == len(data):
        return
    view = memoryview(data)[n:]
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: Path | str) -> None:
    """fsync a folder, so that a rename or a new file in it survives power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
