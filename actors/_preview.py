"""A restore's preview (``restore(..., dry_run=True)``): what it would do, changing nothing.

The files it would put back (each with its size now and after, and a line diff summary for
text), the files it would refuse and why (the same preflight a restore runs), how many events
it would take out of the log, and the ledger of side effects after the checkpoint that it
cannot undo (:mod:`._ledger`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

import msgspec

from liteagent.eventlog import BlobStore, SessionState, StoredEvent
from liteagent.eventlog.errors import LiteAgentError

from ._ledger import SideEffect, side_effects
from ._restore_plan import FilePlan, plan_files, preflight, read_regular, unsafe_path

__all__ = ["FileChange", "RestorePreview", "preview_restore"]

_DIFF_MAX_BYTES = 1 << 20  # larger files get sizes only


class FileChange(msgspec.Struct, frozen=True, kw_only=True):
    """One file a restore would put back: ``action`` ``"overwrite"``, ``"create"``,
    ``"delete"``, ``"none"`` (it is already as it would be put) or ``"unavailable"`` (its
    snapshot was not kept or cannot be read: the restore refuses it), its size ``now`` and
    ``after`` in bytes (``None``: no file), and for text the lines the restore would add and
    remove (``None`` for binary files, files over 1 MiB, and files that are refused)."""

    path: str
    action: str
    size_now: int | None
    size_after: int | None
    added_lines: int | None = None
    removed_lines: int | None = None
    binary: bool = False


class RestorePreview(msgspec.Struct, frozen=True, kw_only=True):
    """What ``restore(session_id, seq, files=, conversation=)`` would do now; nothing was
    changed. ``refused`` lists ``(path, reason)`` for what would make it refuse (path ``""``
    for the session as a whole), as :class:`RestoreRefusedError` would; ``changes`` the files
    it would put back; ``events_removed`` how many events it would take out of the log (kept as
    a branch that ``undo_restore`` brings back); ``side_effects`` what ran after the
    checkpoint that no restore undoes."""

    session_id: str
    seq: int
    files: bool
    conversation: bool
    events_removed: int
    changes: tuple[FileChange, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    side_effects: tuple[SideEffect, ...] = ()

    @property
    def would_refuse(self) -> bool:
        """Whether the restore would refuse (see ``refused``)."""
        return bool(self.refused)


def _read(workdir: Path, rel: str) -> bytes | None:
    """The file's content now; None when it is absent, not a regular file, cannot be read, or
    its path is not safe (a symlink swapped in: what it points to is never read)."""
    if unsafe_path(workdir, rel):
        return None
    try:
        now = read_regular(workdir / rel)
    except OSError:
        return None
    return None if now is None else now.data


def _lines(data: bytes) -> list[str] | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _change(workdir: Path, plan: FilePlan, blobs: BlobStore, refused: bool) -> FileChange:
    now = _read(workdir, plan.path)
    after: bytes | None = None
    if plan.target is not None and not plan.unavailable:
        try:
            after = blobs.get(plan.target)
        except LiteAgentError:
            after = None
    missing_target = plan.target is not None and after is None
    if plan.unavailable:
        action = "unavailable"
    elif missing_target:
        action = "overwrite" if now is not None else "create"
    elif now is None and after is None:
        action = "none"
    elif now is None:
        action = "create"
    elif after is None:
        action = "delete"
    else:
        action = "none" if now == after else "overwrite"
    change = FileChange(
        path=plan.path,
        action=action,
        size_now=None if now is None else len(now),
        size_after=None if after is None else len(after),
    )
    if refused or missing_target or max(len(now or b""), len(after or b"")) > _DIFF_MAX_BYTES:
        return change
    old, new = _lines(now or b""), _lines(after or b"")
    if old is None or new is None:
        return msgspec.structs.replace(change, binary=True)
    added = removed = 0
    for line in difflib.unified_diff(old, new, lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return msgspec.structs.replace(change, added_lines=added, removed_lines=removed)


def preview_restore(
    session_id: str,
    state: SessionState,
    events: Sequence[StoredEvent],
    seq: int,
    *,
    files: bool,
    conversation: bool,
    workdir: Path,
    blobs: BlobStore,
) -> RestorePreview:
    """The preview of a restore of ``session_id`` (log ``events``, folded to ``state``) to
    its checkpoint ``seq``."""
    plans = plan_files(state, seq, blobs, verify=True) if files else []
    problems = preflight(state, seq, workdir, plans) if files else []
    refused_paths = {path for path, _ in problems}
    return RestorePreview(
        session_id=session_id,
        seq=seq,
        files=files,
        conversation=conversation,
        events_removed=state.head - (seq - 1) if conversation else 0,
        changes=tuple(_change(workdir, p, blobs, p.path in refused_paths) for p in plans),
        refused=tuple(problems),
        side_effects=tuple(side_effects(events, seq)),
    )
