"""Planning a restore from the folded log: which files a checkpoint puts back, to what, and
whether that is safe now. Pure functions of the state and the workspace's current files."""

from __future__ import annotations

import bisect
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import NamedTuple

import msgspec

from liteagent.eventlog import BlobStore, SessionState
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import FileSnapshot, RestoreStarted
from liteagent.tools._paths import printed_name

__all__ = [
    "Checkpoint",
    "FilePlan",
    "InterruptedRestoreError",
    "InvalidCheckpointError",
    "NoBranchError",
    "RegularFile",
    "RestoreRefusedError",
    "checkpoints",
    "created_folders",
    "current_hash",
    "plan_files",
    "preflight",
    "read_regular",
    "reason",
    "unreadable",
    "unsafe_path",
]


class InvalidCheckpointError(LiteAgentError, ValueError):
    """Raised when a seq is not a checkpoint (a user-origin prompt) of the session."""


class InterruptedRestoreError(LiteAgentError):
    """Raised when a session has a restore that was interrupted (its process died between
    changing files and truncating the log); settle it with ``finish_restore`` or
    ``rollback_restore`` before using the session."""


class NoBranchError(LiteAgentError, ValueError):
    """Raised when there is no branch to bring back: the session has none (no restore took
    anything away, or it was brought back already), or not the one named."""


class RestoreRefusedError(LiteAgentError):
    """Raised when a restore (or an undo, a fork: ``operation``) would not be safe;
    ``problems`` lists ``(path, reason)`` for each file (path ``""`` for problems of the
    session as a whole). Nothing was changed."""

    def __init__(self, problems: list[tuple[str, str]], operation: str = "restore") -> None:
        self.problems = problems
        self.operation = operation
        lines = "\n".join(  # a name on one line, as the tools print it
            f"  {printed_name(path) if path else '(session)'}: {reason}"
            for path, reason in problems
        )
        super().__init__(f"{operation} refused, nothing was changed:\n{lines}")


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A point the session can be restored to: the user prompt at ``seq``.

    ``files`` are the workspace paths a restore to it would put back; ``unavailable_files``
    those it cannot (their snapshot is missing or was too large to keep). ``side_effects``
    counts the tool calls after it that a restore cannot undo (shell commands, tools that
    declare no paths; ``restore(..., dry_run=True)`` lists them).
    """

    seq: int
    prompt: str
    ts: float
    files: tuple[str, ...] = ()
    unavailable_files: tuple[str, ...] = ()
    side_effects: int = 0


class FilePlan(msgspec.Struct, frozen=True, kw_only=True):
    """One file to put back: its pre-image before the checkpoint (``target`` blob ref, ``None``
    when it did not exist; ``target_mode``: its permission bits, when recorded) and the hash
    the agent last left it with (``last_hash``)."""

    path: str
    target: str | None
    target_hash: str | None
    last_hash: str | None
    unavailable: str = ""  # why it cannot be put back ("" = it can)
    target_mode: int | None = None


def _damaged(blobs: BlobStore, ref: str) -> str:
    """Why the blob ``ref`` cannot be read back intact ("" when it can)."""
    try:
        blobs.get(ref)
    except LiteAgentError as e:
        return f"its snapshot cannot be read back intact: {e}"
    return ""


class _Change(msgspec.Struct, frozen=True, gc=False):
    """One recorded change of a file: what it held before (``pre``: a blob ref, ``None`` =
    absent; ``pre_hash``; ``pre_mode``: its permission bits, when recorded) and after
    (``post_hash``); ``truncated``: ``pre`` was not kept."""

    pre: str | None
    pre_hash: str | None
    post_hash: str | None
    truncated: bool = False
    pre_mode: int | None = None


def _changes_after(state: SessionState, seq: int) -> list[tuple[int, str, _Change]]:
    """Every change the library recorded to a file after the prompt at ``seq``, in log order:
    the file tools' snapshots, and the files a completed files-only restore (or undo) put
    back, which are changes of the agent's as much as a tool's write."""
    out: list[tuple[int, str, _Change]] = []
    for snap_seq, snap in state.snapshots:
        if snap_seq > seq:
            out.append(
                (
                    snap_seq,
                    snap.path,
                    _Change(
                        snap.pre_image, snap.pre_hash, snap.post_hash, snap.truncated, snap.pre_mode
                    ),
                )
            )
    for restore_seq, restore in state.file_restores:
        if restore_seq > seq:
            out.extend(
                (
                    restore_seq,
                    f.path,
                    _Change(f.backup, f.backup_hash, f.target_hash, pre_mode=f.backup_mode),
                )
                for f in restore.files
            )
    out.sort(key=lambda change: change[0])  # stable: a restore's files keep their order
    return out


def plan_files(
    state: SessionState, seq: int, blobs: BlobStore | None = None, *, verify: bool = False
) -> list[FilePlan]:
    """The files the library changed after the prompt at ``seq`` (by file tools, or by a
    files-only restore or undo), with what to put back: the content before the first of those
    changes, and the hash the last one left (what the file must still hold for the restore to
    be safe). ``verify`` reads every needed snapshot back (a restore does; listing checkpoints
    only checks that they exist).
    """
    first: dict[str, _Change] = {}
    last_hash: dict[str, str | None] = {}
    for _, path, change in _changes_after(state, seq):
        first.setdefault(path, change)
        last_hash[path] = change.post_hash
    plans = []
    for path, change in sorted(first.items()):
        reason = ""
        if change.truncated:
            reason = "its snapshot was not kept (the file was over the snapshot size cap)"
        elif change.pre is not None and blobs is not None and not blobs.has(change.pre):
            reason = f"its snapshot {change.pre} is missing from the blob store"
        elif change.pre is not None and blobs is not None and verify:
            reason = _damaged(blobs, change.pre)
        plans.append(
            FilePlan(
                path=path,
                target=change.pre,
                target_hash=change.pre_hash,
                last_hash=last_hash[path],
                unavailable=reason,
                target_mode=change.pre_mode,
            )
        )
    return plans


def created_folders(state: SessionState, seq: int) -> list[str]:
    """The folders the file tools created after the prompt at ``seq`` to hold new files
    (relative paths), deepest first: what a restore to that prompt removes when empty.

    Read in log order: a files-only restore (not an undo) to a prompt at ``to`` removed the
    folders made after ``to``, so a folder of that name found later is not the agent's."""
    made: dict[str, int] = {}  # folder -> the seq of the snapshot that made it
    changes: list[tuple[int, FileSnapshot | RestoreStarted]] = [
        *((at, snap) for at, snap in state.snapshots if at > seq),
        *((at, r) for at, r in state.file_restores if at > seq and r.undo_of is None),
    ]
    for at, change in sorted(changes, key=lambda c: c[0]):
        if isinstance(change, FileSnapshot):
            made.update(dict.fromkeys(change.created_folders, at))
        else:
            made = {folder: by for folder, by in made.items() if by < change.to_seq}
    return sorted(made, key=lambda folder: (-folder.count("/"), folder))


def checkpoints(
    state: SessionState, blobs: BlobStore | None = None, untracked: Sequence[int] = ()
) -> list[Checkpoint]:
    """Every checkpoint of the session, oldest first, with the files a restore would put back
    and the count of side effects after it (``untracked``: the sorted seqs of the untracked
    tool results).

    One pass over the recorded changes, newest first, for all the checkpoints (what
    :func:`plan_files` finds for one): a listing costs the changes plus what it lists, and each
    snapshot's presence in the blob store is looked up once."""
    changes = _changes_after(state, 0)
    first: dict[str, _Change] = {}
    order: list[str] = []  # the paths of first, sorted
    present: dict[str, bool] = {}
    left = len(changes)
    out: list[Checkpoint] = []
    for mark in reversed(state.checkpoints):
        while left and changes[left - 1][0] > mark.seq:
            left -= 1
            _, path, change = changes[left]
            if path not in first:
                bisect.insort(order, path)
            first[path] = change  # an earlier change of the path: the first after the mark
        files: list[str] = []
        unavailable: list[str] = []
        for path in order:
            change = first[path]
            missing = False
            if change.pre is not None and blobs is not None and not change.truncated:
                if change.pre not in present:
                    present[change.pre] = blobs.has(change.pre)
                missing = not present[change.pre]
            (unavailable if change.truncated or missing else files).append(path)
        out.append(
            Checkpoint(
                seq=mark.seq,
                prompt=mark.prompt,
                ts=mark.ts,
                files=tuple(files),
                unavailable_files=tuple(unavailable),
                side_effects=len(untracked) - bisect.bisect_right(untracked, mark.seq),
            )
        )
    out.reverse()
    return out


def _open_regular(path: str | os.PathLike[str]) -> int | None:
    """A descriptor of the regular file at ``path`` (symlinks followed), or None when there is
    none (it does not exist, it is a folder, a folder on its path is now a file, or it is a
    FIFO, socket or device). Opened without blocking, so a FIFO never hangs the caller; raises
    ``OSError`` for a file that exists but cannot be opened (``PermissionError``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class RegularFile(NamedTuple):
    """A regular file's content and its permission bits (``stat.S_IMODE``)."""

    data: bytes
    mode: int


def read_regular(path: str | os.PathLike[str], max_bytes: int | None = None) -> RegularFile | None:
    """The content (at most ``max_bytes + 1`` bytes when given) and mode of the regular file at
    ``path``, or None when there is no regular file there (see :func:`_open_regular`; a FIFO
    is never opened for a blocking read). Raises ``OSError`` when it cannot be read."""
    fd = _open_regular(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        return RegularFile(f.read() if max_bytes is None else f.read(max_bytes + 1), mode)


def current_hash(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 of the file's content now, or None when there is no regular file there (it
    does not exist, it is a folder, a folder on its path is now a file, or it is a FIFO,
    socket or device: never opened for a blocking read). Raises ``OSError`` when the file
    exists but cannot be read."""
    fd = _open_regular(path)
    if fd is None:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def reason(error: BaseException) -> str:
    """``error`` in the words a refusal or a failure shows a user: the system's reason for an
    ``OSError`` (``Permission denied``), a library error's own message, and the type with the
    message for anything else (a defect, which the type helps to find)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if isinstance(error, (OSError, LiteAgentError)):
        return str(error) or type(error).__name__
    return f"{type(error).__name__}: {error}"


def unreadable(error: OSError) -> str:
    """The refusal reason for a file that exists but cannot be read."""
    return f"it cannot be read: {reason(error)}"


def unsafe_path(workdir: Path, rel: str, removing: AbstractSet[str] = frozenset()) -> str:
    """Why ``rel`` is not a plain path inside the workspace now ("" when it is). ``removing``
    are the paths the same operation deletes first: a folder at ``rel`` holding only those
    (and folders) is emptied and removed, and a file on ``rel``'s path that is one of them
    is gone by the time ``rel`` is written."""
    if os.path.isabs(rel) or "\0" in rel:
        return "the path is not relative to the workspace"
    joined = os.path.normpath(os.path.join(workdir, rel))
    if not (joined == os.fspath(workdir) or joined.startswith(os.path.join(workdir, ""))):
        return "the path is outside the workspace"
    if os.path.realpath(joined) != joined:
        return "a symlink was swapped in on the path since the agent wrote it"
    try:
        mode: int | None = os.lstat(joined).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as e:
        return f"the path cannot be checked: {reason(e)}"
    if mode is not None and stat.S_ISDIR(mode):
        try:
            emptied = _emptied(workdir, joined, removing)
        except OSError:
            emptied = False
        if not emptied:
            return "the path is now a folder"
    elif mode is not None and not stat.S_ISREG(mode):
        return "the path is now a FIFO, socket or device, not a regular file"
    parent = os.path.dirname(joined)
    while len(parent) > len(str(workdir)):
        if os.path.lexists(parent) and not os.path.isdir(parent):
            above = os.path.relpath(parent, workdir)
            if above not in removing or not os.path.isfile(parent):
                return f"{above} on the path is now a file, not a folder"
        parent = os.path.dirname(parent)
    return ""


def _emptied(workdir: Path, folder: str, removing: AbstractSet[str]) -> bool:
    """Whether the operation's deletions empty the folder: it holds nothing but regular files
    in ``removing`` and folders, and it and every folder in it are on the path of one of
    those files (folders the agent's file tools made to put a file in). A folder no deleted
    path goes through, empty or not, is someone else's."""
    if not removing:
        return False
    on_paths: set[str] = set()
    for path in removing:
        folder_of = os.path.dirname(path)
        while folder_of and folder_of not in on_paths:
            on_paths.add(folder_of)
            folder_of = os.path.dirname(folder_of)
    for root, dirs, files in os.walk(folder, onerror=_raise):
        if os.path.relpath(root, workdir) not in on_paths:
            return False
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                return False
        for name in files:
            path = os.path.join(root, name)
            if os.path.relpath(path, workdir) not in removing or not (
                stat.S_ISREG(os.lstat(path).st_mode)
            ):
                return False
    return True


def _raise(error: OSError) -> None:
    raise error


def preflight(
    state: SessionState, seq: int, workdir: Path, plans: Iterable[FilePlan]
) -> list[tuple[str, str]]:
    """Everything that makes a file restore unsafe now; empty when it is safe."""
    plans = list(plans)
    removing = frozenset(p.path for p in plans if p.target is None)
    problems: list[tuple[str, str]] = []
    if state.open_tool_calls:
        problems.append(
            (
                "",
                "a tool call after the checkpoint has no result (it was cut in "
                f"half): {', '.join(state.open_tool_calls)}",
            )
        )
    for plan in plans:
        if plan.unavailable:
            problems.append(
                (
                    plan.path,
                    plan.unavailable + "; restore with files=False to "
                    "restore the conversation alone",
                )
            )
            continue
        unsafe = unsafe_path(workdir, plan.path, removing)
        if unsafe:
            problems.append((plan.path, unsafe))
            continue
        try:
            now = current_hash(workdir / plan.path)
        except OSError as e:
            problems.append((plan.path, unreadable(e)))
            continue
        if now != plan.last_hash:
            what = "deleted" if now is None else "changed"
            problems.append(
                (
                    plan.path,
                    f"it was {what} since the agent last wrote it (by the user, a shell "
                    "command, another session, or a tool call that was interrupted)",
                )
            )
    del seq
    return problems
