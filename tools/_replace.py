"""Replacing a file's content atomically and durably.

The new content goes to a temp file in the same folder, which is fsynced and renamed over the
file; then the folder is fsynced. The file tools and a restore write every file this way, so:

- a crash or a kill never leaves a file half written: it has the old content or the new one;
- a file that is a hard link (to a file outside the workspace, say) is replaced, its link broken,
  never written through: the other names keep the old content;
- an existing file keeps its permission bits, and its owner and group as far as the process may
  set them.

A temp file is named ``.liteagent-put-<16 hex digits of the name's SHA-256>-<8 hex digits>`` (a
fixed 32 characters, so a 255-byte name still has one the file system accepts). One a crash left
beside a file is removed by the next write of that file; a user's own file that only looks like
one (another name, another length) is never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
from pathlib import Path

__all__ = ["remove_temps", "replace_file"]

_TEMP_PREFIX = ".liteagent-put-"
_HEX = frozenset("0123456789abcdef")


def _temp_prefix(name: str) -> str:
    """The start of the temp names of writes to ``name``: the name's hash, not the name."""
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    return f"{_TEMP_PREFIX}{digest}-"


def remove_temps(path: Path) -> None:
    """Remove the temp files an interrupted write of ``path`` left beside it. A write in
    progress (in this process or another) holds an ``flock`` on its temp file until its rename:
    that one is left alone."""
    prefix = _temp_prefix(path.name)
    try:
        names = os.listdir(path.parent)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        tail = name[len(prefix) :]
        if name.startswith(prefix) and len(tail) == 8 and all(c in _HEX for c in tail):
            _remove_if_abandoned(path.parent / name)


def _remove_if_abandoned(temp: Path) -> None:
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # gone meanwhile, or not a file of ours
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.suppress(OSError):
            os.unlink(temp)
    except OSError:
        pass  # locked: a write in progress
    finally:
        os.close(fd)


def _locked_temp(path: Path) -> tuple[Path, int]:
    """A new temp file beside ``path``, open for writing and ``flock``-ed: no
    :func:`remove_temps` takes it while it is written. One removed between its creation and
    the lock (it looked abandoned for that moment) is let go, and another made."""
    while True:
        tmp = path.parent / f"{_temp_prefix(path.name)}{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: only such a remover may hold it
            if os.fstat(fd).st_nlink:
                return tmp, fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Make the file ``path`` hold ``data``, atomically and durably (module docstring); its
    folder must exist. A file that is there keeps its permission bits, owner and group; one this
    creates gets ``mode`` when given, else 0o666 less the umask. Raises ``OSError``; then the
    file is as it was and no temp file is left. Writers of the same file in other processes
    do not disturb each other: the last rename wins."""
    remove_temps(path)
    tmp, fd = _locked_temp(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        _take_over_attributes(tmp, path, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)  # after the rename: the lock covered the whole write
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _take_over_attributes(tmp: Path, path: Path, mode: int | None) -> None:
    """Give ``tmp`` the permission bits, owner and group of ``path`` (``mode`` when ``path``
    does not exist). An owner or group the process may not give is left as it is."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        return
    mine = os.stat(tmp)
    if (st.st_uid, st.st_gid) != (mine.st_uid, mine.st_gid):
        with contextlib.suppress(PermissionError):
            os.chown(tmp, st.st_uid, st.st_gid)
    os.chmod(tmp, st.st_mode & 0o7777)  # after chown, which may clear set-id bits
