"""Putting files back: atomic writes and deletes, with a rollback to the backups when one fails.

Each write goes to a temp file in the same folder, is fsynced and renamed over the target, and
the folder is fsynced; a delete unlinks. ``apply`` is idempotent, so a restore interrupted by a
crash can be finished by applying the same plan again, or rolled back by applying the backups.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from liteagent.eventlog import BlobStore, Lease
from liteagent.eventlog._lease import check_lease_fresh
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError
from liteagent.eventlog.types import RestoreFile
from liteagent.tools._paths import printed_name
from liteagent.tools._replace import remove_temps, replace_file

from ._restore_plan import FilePlan, RestoreRefusedError, read_regular, reason, unreadable

__all__ = [
    "RestoreFailedError",
    "apply_files",
    "backup_files",
    "put_file",
    "remove_created_folders",
]


class RestoreFailedError(LiteAgentError):
    """Raised when putting a file back failed; the files already changed were returned to how
    they were and the log cut back to what it was before the restore."""


def put_file(workdir: Path, rel: str, content: bytes | None, mode: int | None = None) -> None:
    """Make ``workdir/rel`` hold ``content`` (``None``: not exist), atomically and durably. A
    file that is there keeps its permission bits; one this creates gets ``mode`` (when given;
    else the default, 0o666 less the umask). See :mod:`liteagent.tools._replace`.

    Temp files a crashed earlier write of the same path left beside it are removed first."""
    path = workdir / rel
    remove_temps(path)
    if content is None:  # absent already when a folder on its path is a file, or it is one
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            os.unlink(path)
        return
    if path.is_dir() and not path.is_symlink():
        _remove_empty_folders(path)  # emptied by the same operation's deletions (preflight)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, content, mode)


def remove_created_folders(workdir: Path, folders: Sequence[str]) -> None:
    """Remove each of ``folders`` (relative, deepest first: folders the agent's file tools
    created) that is now an empty folder inside the workspace, reached through no symlink.
    Any other is left as it is: one that holds anything (the user's files, say) is kept."""
    inside = os.path.join(workdir, "")
    for rel in folders:
        path = os.path.normpath(os.path.join(workdir, rel))
        if os.path.isabs(rel) or not path.startswith(inside) or os.path.realpath(path) != path:
            continue
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _remove_empty_folders(folder: Path) -> None:
    """Remove ``folder`` and the folders in it, deepest first; ``OSError`` (nothing more is
    removed) when one still holds anything else."""
    for root, dirs, _files in os.walk(folder, topdown=False):
        for name in dirs:
            os.rmdir(os.path.join(root, name))
    os.rmdir(folder)


def backup_files(workdir: Path, plans: Sequence[FilePlan], blobs: BlobStore) -> list[RestoreFile]:
    """For each file to put back, store its current content (and note its mode) as its backup,
    so the restore can be rolled back, and return the restore records. Raises
    :class:`RestoreRefusedError` (nothing was changed) when a file cannot be read."""
    out = []
    for plan in plans:
        try:
            now = read_regular(workdir / plan.path)
        except OSError as e:
            raise RestoreRefusedError([(plan.path, unreadable(e))]) from e
        backup = None if now is None else blobs.put(now.data)
        out.append(
            RestoreFile(
                path=plan.path,
                target=plan.target,
                target_hash=plan.target_hash,
                backup=backup,
                backup_hash=None if backup is None else backup.removeprefix("sha256:"),
                target_mode=plan.target_mode,
                backup_mode=None if now is None else now.mode,
            )
        )
    return out


def _in_order(
    pairs: Sequence[tuple[RestoreFile, bytes | None]],
) -> list[tuple[RestoreFile, bytes | None]]:
    """Files with what to put there (``None``: nothing), in the order that lets each step
    succeed: deletions first, deepest paths first, then writes, shallowest first (a file ``d``
    put back where the plan also removes ``d/x``; ``d/x`` put back where it removes ``d``)."""
    deletions = sorted((p for p in pairs if p[1] is None), key=lambda p: -p[0].path.count("/"))
    writes = sorted((p for p in pairs if p[1] is not None), key=lambda p: p[0].path.count("/"))
    return deletions + writes


def _check_stop(stop: Callable[[], str | None] | None) -> None:
    reason = stop() if stop is not None else None
    if reason:
        raise OperationCancelledError(reason)


def _put_back(
    workdir: Path, files: Sequence[RestoreFile], blobs: BlobStore, lease: Lease | None
) -> list[str]:
    """Put each file back to its backup, going on past failures; return one line per file
    that could not be put back (its path and why). Raises :class:`LeaseLostError` (and puts
    nothing more back) once the session's lease may be another holder's."""
    failed: list[str] = []
    ready: list[tuple[RestoreFile, bytes | None]] = []
    for f in files:
        try:
            ready.append((f, None if f.backup is None else blobs.get(f.backup)))
        except Exception as e:  # noqa: BLE001 -- each failure is reported, the rest go on
            failed.append(f"{printed_name(f.path)} ({reason(e)})")
    for f, backup in _in_order(ready):
        if lease is not None:
            check_lease_fresh(lease)
        try:
            put_file(workdir, f.path, backup, f.backup_mode)
        except Exception as e:  # noqa: BLE001 -- each failure is reported, the rest go on
            failed.append(f"{printed_name(f.path)} ({reason(e)})")
    return failed


def apply_files(
    workdir: Path,
    files: Sequence[RestoreFile],
    blobs: BlobStore,
    *,
    to_target: bool,
    progress: Callable[[int, int], None] | None = None,
    stop: Callable[[], str | None] | None = None,
    lease: Lease | None = None,
) -> list[str]:
    """Put every file to its target (``to_target``) or back to its backup; return the paths.

    If a write fails (or ``stop()`` returns a reason) while going to the targets, the files
    already written are put back to their backups and :class:`RestoreFailedError` is raised.
    Before each file, the session's ``lease`` must still be this process's
    (:func:`~liteagent.eventlog._lease.check_lease_fresh`): once it may be another holder's,
    nothing more is written, nothing is put back (the new holder settles the restore), and
    :class:`LeaseLostError` is raised.
    """
    if not to_target:
        failed = _put_back(workdir, files, blobs, lease)
        if failed:
            raise RestoreFailedError(
                f"could not return {len(failed)} of {len(files)} file(s) to how they were: "
                + "; ".join(failed)
            )
        return [f.path for f in files]
    contents = [None if f.target is None else blobs.get(f.target) for f in files]
    done: list[RestoreFile] = []
    for i, (f, content) in enumerate(_in_order(list(zip(files, contents, strict=True)))):
        if lease is not None:
            check_lease_fresh(lease)
        try:
            _check_stop(stop)
            # put_file is looked up at call time (tests inject faults)
            put_file(workdir, f.path, content, f.target_mode)
        except Exception as e:
            failed = _put_back(workdir, list(reversed(done)), blobs, lease)
            returned = (
                f"the {len(done)} file(s) already changed were returned to how they were"
                if not failed
                else f"{len(failed)} of the {len(done)} file(s) already changed could not be "
                f"returned to how they were: {'; '.join(failed)}"
            )
            raise RestoreFailedError(
                f"could not put back {printed_name(f.path)}: {reason(e)}; {returned}"
            ) from e
        done.append(f)
        if progress is not None:
            progress(i + 1, len(files))
    return [f.path for f in files]
