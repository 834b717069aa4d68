"""Putting files back: atomic writes and deletes, with a rollback to the backups when one fails.

Each write goes to a temp file in the same folder, is fsynced and renamed over the target, and
the folder is fsynced; a delete unlinks. ``apply`` is idempotent, so a restore interrupted by a
crash can be finished by applying the same plan again, or rolled back by applying the backups.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

from liteagent.eventlog import BlobStore, LiteAgentError, OperationCancelledError, RestoreFile

from ._restore_plan import RestoreRefusedError, read_regular, unreadable

__all__ = ["RestoreFailedError", "apply_files", "backup_files", "put_file"]


class RestoreFailedError(LiteAgentError):
    """Raised when putting a file back failed; the files already changed were returned to how
    they were and the log was not touched (the restore is recorded as rolled back)."""


_TEMP_MARK = ".liteagent-"


def _remove_temps(path: Path) -> None:
    """Remove temp files an interrupted write of ``path`` left beside it."""
    prefix = f".{path.name}{_TEMP_MARK}"
    try:
        names = os.listdir(path.parent)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name.startswith(prefix) and len(name) == len(prefix) + 8:
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)


def put_file(workdir: Path, rel: str, content: bytes | None) -> None:
    """Make ``workdir/rel`` hold ``content`` (``None``: not exist), atomically and durably.

    Temp files a crashed earlier write of the same path left beside it are removed first."""
    path = workdir / rel
    _remove_temps(path)
    if content is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}{_TEMP_MARK}{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if path.exists():
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def backup_files(
    workdir: Path, files: Sequence[tuple[str, str | None, str | None]], blobs: BlobStore
) -> list[RestoreFile]:
    """For each ``(path, target, target_hash)``, store the file's current content as its backup
    (so a restore can be rolled back) and return the restore records. Raises
    :class:`RestoreRefusedError` (nothing was changed) when a file cannot be read."""
    out = []
    for rel, target, target_hash in files:
        try:
            data = read_regular(workdir / rel)
        except OSError as e:
            raise RestoreRefusedError([(rel, unreadable(e))]) from e
        backup = None if data is None else blobs.put(data)
        out.append(
            RestoreFile(
                path=rel,
                target=target,
                target_hash=target_hash,
                backup=backup,
                backup_hash=None if backup is None else backup.removeprefix("sha256:"),
            )
        )
    return out


def _check_stop(stop: Callable[[], str | None] | None) -> None:
    reason = stop() if stop is not None else None
    if reason:
        raise OperationCancelledError(reason)


def apply_files(
    workdir: Path,
    files: Sequence[RestoreFile],
    blobs: BlobStore,
    *,
    to_target: bool,
    progress: Callable[[int, int], None] | None = None,
    stop: Callable[[], str | None] | None = None,
) -> list[str]:
    """Put every file to its target (``to_target``) or back to its backup; return the paths.

    If a write fails (or ``stop()`` returns a reason) while going to the targets, the files
    already written are put back to their backups and :class:`RestoreFailedError` is raised.
    """
    contents = [
        blobs.get(ref) if ref is not None else None
        for ref in ((f.target if to_target else f.backup) for f in files)
    ]
    done: list[RestoreFile] = []
    for i, (f, content) in enumerate(zip(files, contents, strict=True)):
        try:
            _check_stop(stop if to_target else None)
            put_file(workdir, f.path, content)  # looked up at call time (tests inject faults)
        except Exception as e:
            if to_target:
                for back in reversed(done):
                    put_file(
                        workdir, back.path, None if back.backup is None else blobs.get(back.backup)
                    )
                raise RestoreFailedError(
                    f"could not put back {f.path}: {type(e).__name__}: {e}; the "
                    f"{len(done)} file(s) already changed were returned to how they were"
                ) from e
            raise
        done.append(f)
        if progress is not None:
            progress(i + 1, len(files))
    return [f.path for f in files]
