"""Garbage collection: remove the blobs no session or branch references, and old branches.

``collect_garbage(checkpointer, grace=...)`` works on every backend through the contract and
the blob store's hooks (see :mod:`._blobs`):

1. ``T0`` = now. Branch sessions are pruned first: those whose origin no longer exists, those
   an undo has brought back (another branch says so), and, with ``branch_retention``, those
   last written more than that long ago. A branch an interrupted restore still needs is kept.
2. Mark: every session the store lists after ``T0`` is read in full; every blob reference in
   any of its events (any ``sha256:<64 hex>`` in an event's stored body, of every kind, so
   events of a newer liteagent and references in text count too) is kept.
3. Sweep: the blobs not marked whose write time is before ``T0 - grace`` are deleted, each only
   if its write time is still before it at the moment of removal (``BlobStore.delete_blobs``);
   then the store's leftovers of interrupted writes older than that go.
4. Lease records (files, rows) of sessions that do not exist and whose lease nobody holds are
   removed: a holder killed before its session's first write leaves one behind (a release
   removes the record of a session it never wrote, and a delete its session's record).

Why it never removes a blob an acknowledged event references: every writer puts or touches a
blob before the append that references it (snapshots, archives and spills put it; restores,
undos and forks touch what they copy), and does so less than ``grace`` before that append. A
blob is deleted only when its last put or touch was before ``T0 - grace``; so every append
referencing it was acknowledged before ``T0``, in a session the listing after ``T0`` finds, and
the mark reads it there (or in the copy of it, made later and so with a later touch). The grace
must therefore exceed the longest time between a put and the append that references it (a
tool call's run, a compaction's summary): an hour by default. ``grace=0`` is safe only when no
other process or agent writes to the store.

Damage stops the collection before anything is deleted: the store's integrity check runs
first, and any finding but a torn tail or an informational one raises :class:`CorruptLogError`
(a damaged session's references are unknown, and rows a repair would bring back, such as
events whose session record is lost, are not listed at all). Events a repair moved to
quarantine are not read: their blobs can go.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import msgspec

from ._branches import branch_header, is_branch_session
from ._cancel import CancelToken
from ._contract import INFORMATIONAL_PROBLEMS, Checkpointer
from ._errors import CheckpointConflictError, CorruptLogError, InvalidArgumentError
from ._events import Event, OpaqueEvent
from ._fold import fold
from ._ids import is_session_id
from ._numbers import plain_number
from ._shown import shown

__all__ = ["GarbageReport", "blob_refs", "collect_garbage", "referenced_blobs"]

DEFAULT_GRACE = 3600.0
_REF = re.compile(rb"sha256:[0-9a-f]{64}")
_READ_ATTEMPTS = 5
_ENCODER = msgspec.msgpack.Encoder()


class GarbageReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`collect_garbage` did (with ``dry_run``: would do).

    ``sessions`` were read (branches included), ``referenced`` distinct blobs are referenced by
    them; ``deleted`` blobs (``freed_bytes`` of storage) were removed, ``young`` unreferenced
    ones were kept because they were written within the grace period; ``branches_deleted``
    names the branch sessions pruned; ``leftovers`` counts the temp files of interrupted
    writes removed; ``leases_dropped`` the lease records of sessions that do not exist.
    """

    sessions: int
    referenced: int
    deleted: int
    freed_bytes: int
    young: int
    branches_deleted: tuple[str, ...] = ()
    leftovers: int = 0
    leases_dropped: int = 0
    dry_run: bool = False


_MAX_SECONDS = 1e300  # beyond any clock: "never", while float() of it stays finite


def _check_seconds(name: str, value: object, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    seconds = plain_number(value)
    # a comparison, not isfinite(): an int beyond a float's range is no OverflowError
    if seconds is None or not 0 <= seconds <= _MAX_SECONDS:
        raise InvalidArgumentError(
            f"{name} must be {'None or ' if optional else ''}a number of seconds >= 0, "
            f"got {shown(value)}"
        )
    return float(seconds)


def blob_refs(bodies: Iterable[Event | OpaqueEvent]) -> set[str]:
    """Every blob reference in the stored form of the event ``bodies``."""
    refs: set[str] = set()
    for event in bodies:
        data = event.data if type(event) is OpaqueEvent else _ENCODER.encode(event)
        if b"sha256:" in data:
            refs.update(m.decode() for m in _REF.findall(data))
    return refs


def referenced_blobs(checkpointer: Checkpointer, session_id: str) -> set[str]:
    """Every blob reference in the events of ``session_id`` (read again if it is truncated
    while being read)."""
    attempt = 1
    while True:
        try:
            return blob_refs(e.body for e in checkpointer.read(session_id))
        except CheckpointConflictError:
            if attempt == _READ_ATTEMPTS:
                raise
            attempt += 1


def _prunable(
    checkpointer: Checkpointer, ids: list[str], mtimes: dict[str, float], retention: float | None
) -> list[str]:
    """The branch sessions to delete (see the module docstring, step 1)."""
    now = time.time()
    headers = {bid: branch_header(checkpointer, bid) for bid in ids}
    pending: dict[str, str | None] = {}
    needed: set[str] = set()  # the branches an interrupted undo brings back: kept too
    for header in headers.values():
        if header is not None and header.origin not in pending:
            state = fold(checkpointer.read(header.origin))
            if state.head == 0 and checkpointer.position(header.origin).generation == 0:
                pending[header.origin] = "gone"  # deleted (one restored to empty still exists)
            else:
                intent = state.pending_restore
                pending[header.origin] = None if intent is None else intent[1].branch
                if intent is not None and intent[1].undo_of is not None:
                    needed.add(intent[1].undo_of)
    consumed = {
        h.undo_of
        for bid, h in headers.items()
        if h is not None and h.undo_of is not None and pending.get(h.origin) != bid
    }
    out = []
    for bid, header in headers.items():
        if header is None or pending.get(header.origin) == bid or bid in needed:
            continue  # not a branch after all (left alone), or an interrupted operation's
        old = retention is not None and now - mtimes[bid] > retention
        if pending.get(header.origin) == "gone" or bid in consumed or old:
            out.append(bid)
    return out


def _orphan_leases(checkpointer: Checkpointer, *, dry_run: bool) -> int:
    """Remove (``dry_run``: count) the free lease records of sessions that do not exist
    (module docstring, step 4); a record that cannot be removed is logged and kept."""
    records = checkpointer._lease_records()
    if not records:
        return 0
    present = {info.id for info in checkpointer.list()}
    orphans = set()
    for sid in records:
        if sid in present or not is_session_id(sid):
            continue
        if checkpointer.position(sid) == (0, 0) and checkpointer.lease_holder(sid) is None:
            orphans.add(sid)
    if dry_run or not orphans:
        return len(orphans)
    for sid in sorted(orphans):
        checkpointer._drop_lease_quietly(sid)
    return len(orphans - set(checkpointer._lease_records()))


_HARMLESS = INFORMATIONAL_PROBLEMS | {"torn_tail"}  # never acknowledged, or not data


def _refuse_damage(checkpointer: Checkpointer) -> None:
    """Raise :class:`CorruptLogError` when the store's integrity check finds damage: events a
    repair would bring back (rows without their session record, a log cut below its header)
    may reference blobs that no listed session's read shows."""
    report = checkpointer.check_integrity()
    found = [p for p in report.problems if p.kind not in _HARMLESS]
    if found:
        first = found[0]
        raise CorruptLogError(
            first.session_id,
            first.seq,
            f"garbage collection refused, nothing deleted: {first.detail} ({len(found)} "
            "problem(s) in the store; repair it first, e.g. `lite-agent doctor --repair`)",
        )


def collect_garbage(
    checkpointer: Checkpointer,
    *,
    grace: float = DEFAULT_GRACE,
    branch_retention: float | None = None,
    dry_run: bool = False,
    cancel: CancelToken | None = None,
) -> GarbageReport:
    """Remove the blobs no session or branch of ``checkpointer`` references and that were
    written more than ``grace`` seconds ago, after pruning branch sessions (those of deleted
    sessions, those brought back, and with ``branch_retention`` seconds, those older than
    that); see the module docstring for why it is safe while other processes write.
    ``dry_run`` reports what it would remove and changes nothing. ``cancel`` stops it between
    steps (:class:`OperationCancelledError`); what was deleted stays deleted, and nothing
    referenced ever is. Raises :class:`BlobCollectionUnsupportedError` for a blob store
    without the hooks, and :class:`CorruptLogError` (or what reading a damaged session raises)
    when the store holds damage: nothing is deleted then.
    """
    if not isinstance(checkpointer, Checkpointer):
        raise InvalidArgumentError(
            f"checkpointer must be a Checkpointer, got {type(checkpointer).__name__}"
        )
    grace_s = _check_seconds("grace", grace)
    retention = _check_seconds("branch_retention", branch_retention, optional=True)
    if type(dry_run) is not bool:
        raise InvalidArgumentError(f"dry_run must be a bool, got {shown(dry_run)}")
    if cancel is not None and not isinstance(cancel, CancelToken):
        raise InvalidArgumentError(f"cancel must be None or a CancelToken, got {shown(cancel)}")
    token = cancel or CancelToken()
    assert grace_s is not None
    blobs = checkpointer.blobs
    _refuse_damage(checkpointer)
    token.raise_if_cancelled()
    t0 = time.time()
    cutoff = t0 - grace_s
    listed = checkpointer.list()
    mtimes = {info.id: info.mtime for info in listed}
    branches = _prunable(
        checkpointer, [i.id for i in listed if is_branch_session(i.id)], mtimes, retention
    )
    token.raise_if_cancelled()
    if not dry_run:
        for bid in branches:
            checkpointer.delete(bid)
    marked: set[str] = set()
    sessions = 0
    for info in checkpointer.list():
        if dry_run and info.id in branches:
            continue
        token.raise_if_cancelled()
        marked |= referenced_blobs(checkpointer, info.id)
        sessions += 1
    candidates = []
    young = freed = 0
    for blob in blobs.list_blobs():
        if blob.ref in marked:
            continue
        if blob.written < cutoff:
            candidates.append(blob)
        else:
            young += 1
    token.raise_if_cancelled()
    if dry_run:
        deleted = [b.ref for b in candidates]
        leftovers = 0
    else:
        deleted = blobs.delete_blobs([b.ref for b in candidates], written_before=cutoff)
        leftovers = blobs.remove_leftovers(written_before=cutoff)
    gone = set(deleted)
    freed = sum(b.size for b in candidates if b.ref in gone)
    token.raise_if_cancelled()
    leases = _orphan_leases(checkpointer, dry_run=dry_run)
    return GarbageReport(
        sessions=sessions,
        referenced=len(marked),
        deleted=len(deleted),
        freed_bytes=freed,
        young=young,
        branches_deleted=tuple(branches),
        leftovers=leftovers,
        leases_dropped=leases,
        dry_run=dry_run,
    )
