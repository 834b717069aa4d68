"""Fork: a new session whose log is another's events before one of its checkpoints.

The new session's first write is one append: the original's events before the checkpoint (the
same seqs, kinds and bodies; their blobs are shared, and touched first so that a garbage
collection running meanwhile keeps them), a :class:`Forked` record, and, for each background
task open at the checkpoint, a failed end and a notice (its result goes to the original only).
The original is not written. The fork shares the workspace unless given another folder (a
copy of the workspace): then the files the agent's file tools changed since the checkpoint are
put back there first, with a restore's preflight, and put back as they were when the new
session cannot be written; a crash leaves at worst that folder partly restored and no session
(forking again puts the rest back).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from liteagent.eventlog import Checkpointer, SessionState, StoredEvent, fold
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import Forked, RestoreFile

from ._background import lost_records
from ._branches import touch_refs
from ._restore_files import RestoreFailedError, apply_files, backup_files
from ._restore_plan import RestoreRefusedError, plan_files, preflight, reason

__all__ = ["fork_session"]


def fork_session(
    checkpointer: Checkpointer,
    session_id: str,
    events: Sequence[StoredEvent],
    state: SessionState,
    *,
    seq: int,
    new_id: str,
    workdir: Path | None,
) -> str:
    """Fork ``session_id`` (its log ``events``, folded to ``state``) before its checkpoint
    ``seq`` into the new session ``new_id``; with ``workdir``, put the checkpoint's files back
    there first (refused, naming each file, when one is not as the agent last left it), and
    as they were again when the new session cannot be written."""
    blobs = checkpointer.blobs
    records: list[RestoreFile] = []
    if workdir is not None:
        plans = plan_files(state, seq, blobs, verify=True)
        problems = preflight(state, seq, workdir, plans)
        if problems:
            raise RestoreRefusedError(problems, "fork")
        records = backup_files(workdir, plans, blobs)
        apply_files(workdir, records, blobs, to_target=True)
    prefix = [e for e in events if e.seq < seq]
    bodies = [e.body for e in prefix]
    record = Forked(
        origin=session_id, at_seq=seq, workdir=None if workdir is None else str(workdir)
    )
    # The background tasks open at the checkpoint report to the original session only.
    elsewhere = lost_records(
        list(fold(prefix).background_open), f"it reports to session {session_id!r} only"
    )
    try:
        touch_refs(blobs, bodies)
        checkpointer.append(new_id, [*bodies, record, *elsewhere], expected_head=0)
    except LiteAgentError as e:
        if workdir is not None:
            try:
                apply_files(workdir, records, blobs, to_target=False)
            except RestoreFailedError as back:
                raise RestoreFailedError(
                    f"the new session {new_id} could not be written ({reason(e)}), and {back}"
                ) from e
        raise
    return new_id
