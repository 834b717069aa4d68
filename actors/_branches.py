"""Branches: what a restore (or an undo) took away, kept so that it can be brought back.

A branch is a session of its own (see :mod:`liteagent.eventlog._branches`): a
:class:`BranchCreated` header, then the events the operation removed from its origin. The
header is a pure function of the origin's log and the operation's intent record
(:func:`branch_for`), so a restore interrupted before it wrote its branch writes the same one
when it is finished.

Bringing a branch back is the inverse of the operation that made it, and is itself kept as a
branch: after a restore (which removed events ``p..h``) an undo appends them again; after that
undo, its own branch (no events: it removed nothing) brings back the state after the restore.
A branch can be brought back only while its origin is exactly as the operation left it
(``head_after`` events whose digest is ``digest_after``): otherwise its events would not follow
on.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from liteagent.eventlog import BlobStore, Checkpointer, StoredEvent
from liteagent.eventlog._branches import branch_prefix, log_digest
from liteagent.eventlog._gc import blob_refs
from liteagent.eventlog.types import BranchCreated, RestoreFinished, RestoreStarted, UserPrompt

from ._restore_plan import NoBranchError

__all__ = ["Branch", "branch_for", "list_branches", "read_branch", "touch_refs", "write_branch"]


class Branch(msgspec.Struct, frozen=True, kw_only=True):
    """What ``undo_restore`` can bring back into session ``session_id``: the branch ``id``,
    made by a ``"restore"`` or an ``"undo"`` at ``created`` (Unix seconds).

    ``events`` is how many events it brings back (from seq ``at_seq`` on), ``prompts`` their
    user prompts; ``files`` the files it puts back as they were before that operation (none for
    a conversation-only restore). ``conversation`` is whether it changes the conversation.
    ``available`` is whether it can be brought back now; ``reason`` says why not (the session
    moved on since: it must be exactly as the operation left it).
    """

    id: str
    session_id: str
    made_by: str
    created: float
    at_seq: int
    events: int
    prompts: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    conversation: bool = True
    available: bool = False
    reason: str = ""


def branch_for(
    origin: str, events: Sequence[StoredEvent], intent_seq: int, intent: RestoreStarted
) -> tuple[BranchCreated, list[StoredEvent]]:
    """The branch an operation makes: its header and the events it removes, from the origin's
    log ``events`` (through the intent record at ``intent_seq``, at least) and the intent."""
    prefix = [e for e in events if e.seq < intent_seq]
    if intent.rollback_to is not None:  # an undo that appended: it removes nothing
        at_seq, removed, after = intent.rollback_to + 1, [], prefix
    elif intent.conversation:  # it removes to_seq.. (up to its intent)
        at_seq = intent.to_seq
        removed = [e for e in prefix if e.seq >= at_seq]
        after = [e for e in prefix if e.seq < at_seq]
    else:  # files only: the log keeps everything, and the intent and its completion
        at_seq, removed = intent.to_seq, []
        done = RestoreFinished(started_seq=intent_seq, outcome="completed")
        after = [
            *prefix,
            StoredEvent(intent_seq, 0.0, "restore_started", intent),
            StoredEvent(intent_seq + 1, 0.0, "restore_finished", done),
        ]
    header = BranchCreated(
        origin=origin,
        at_seq=at_seq,
        files=intent.files,
        conversation=intent.conversation,
        head_after=after[-1].seq if after else 0,
        digest_after=log_digest(after),
        made_by="restore" if intent.undo_of is None else "undo",
        undo_of=intent.undo_of,
    )
    return header, removed


def touch_refs(blobs: BlobStore, events: Sequence[object]) -> None:
    """Refresh the write time of every blob ``events`` (events or event bodies) reference, so
    that a garbage collection running meanwhile keeps them (see ``eventlog._gc``)."""
    bodies = [e.body if isinstance(e, StoredEvent) else e for e in events]
    refs = blob_refs(bodies)  # type: ignore[arg-type]
    if refs:
        blobs.touch(sorted(refs))


def write_branch(
    checkpointer: Checkpointer, branch_id: str, header: BranchCreated, removed: list[StoredEvent]
) -> None:
    """Store the branch session (one atomic append; a no-op when it exists already)."""
    if checkpointer.head(branch_id):
        return
    touch_refs(checkpointer.blobs, [header, *removed])
    checkpointer.append(branch_id, [header, *(e.body for e in removed)], expected_head=0)


def read_branch(checkpointer: Checkpointer, branch_id: str) -> tuple[BranchCreated, list[object]]:
    """The header and the event bodies of a branch session; raises :class:`NoBranchError`
    when there is no such branch (a garbage collection deleted it meanwhile)."""
    events = list(checkpointer.read(branch_id))
    if not events or not isinstance(events[0].body, BranchCreated):
        raise NoBranchError(f"there is no branch {branch_id!r}")
    return events[0].body, [e.body for e in events[1:]]


def list_branches(
    checkpointer: Checkpointer,
    session_id: str,
    events: Sequence[StoredEvent],
    pending: str | None,
) -> list[Branch]:
    """The branches of ``session_id`` (whose log is ``events``) that can be brought back now or
    later, oldest first; ``pending`` is the branch of its interrupted restore (not listed), and
    branches an undo already brought back are left out."""
    prefix = branch_prefix(session_id)
    ids = sorted(i.id for i in checkpointer.list() if i.id.startswith(prefix))
    found: list[tuple[str, BranchCreated, list[StoredEvent], float]] = []
    for bid in ids:
        if bid == pending:
            continue
        stored = list(checkpointer.read(bid))
        if not stored or not isinstance(stored[0].body, BranchCreated):
            continue
        header = stored[0].body
        if header.origin == session_id:
            found.append((bid, header, stored[1:], stored[0].ts))
    consumed = {h.undo_of for _, h, _, _ in found if h.undo_of is not None}
    head = events[-1].seq if events else 0
    digest: str | None = None
    out = []
    for bid, header, removed, ts in found:
        if bid in consumed:
            continue
        reason = ""
        if pending is not None:
            reason = "the session has an interrupted restore; finish or roll it back first"
        elif header.head_after != head:
            reason = (
                f"the session moved on since (it has {head} events, the {header.made_by} left "
                f"{header.head_after})"
            )
        else:
            if digest is None:
                digest = log_digest(events)
            if digest != header.digest_after:
                reason = "the session's history changed since (a later restore or repair)"
        out.append(
            Branch(
                id=bid,
                session_id=session_id,
                made_by=header.made_by,
                created=ts,
                at_seq=header.at_seq,
                events=len(removed),
                prompts=tuple(
                    e.body.text
                    for e in removed
                    if isinstance(e.body, UserPrompt) and e.body.origin == "user"
                ),
                files=tuple(f.path for f in header.files),
                conversation=header.conversation,
                available=not reason,
                reason=reason,
            )
        )
    return out
