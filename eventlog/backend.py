"""liteagent.eventlog.backend — what a third-party :class:`~liteagent.eventlog.Checkpointer` needs.

A backend is a subclass of ``liteagent.eventlog.Checkpointer`` that implements the ``_``-prefixed
hooks below. The hooks are the documented, stable extension points (underscored so that they
stay out of the user's API: a user calls ``append``, the base class calls ``_append``); this
module adds the helpers a hook uses (``blob_ref`` among them: it is exported here only). The
types the hooks take and return are the user-facing ones, imported from ``liteagent.eventlog``
(``Checkpointer``, ``Position``, ``SessionInfo``, ``StoredEvent``, ``IntegrityProblem``,
``IntegrityReport``, ``RepairReport``, ``Lease``, ``LeaseInfo``, ``BlobStore``, ``BlobInfo``),
and the errors they raise are those of ``liteagent.eventlog.errors``.
``examples/session_files_backend.py`` is a complete backend that imports nothing else;
``tests/test_backend_example.py`` runs the conformance suite against it.

What the base class does before a hook runs
-------------------------------------------
Every public method first raises :class:`CheckpointerClosedError` on a closed checkpointer and
validates its arguments, before any hook and so before any I/O: session ids (``str``, matching
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``, as :func:`~liteagent.eventlog.validate_session_id`
checks), ``since_seq`` and ``expected_head``/``expected_generation`` (``None`` or
an ``int`` in ``0..MAX_SEQ``), ``to_seq`` (an ``int``; its range against the head is the
hook's to check), ``ts`` (a finite float), lease owners and ttls, ``lease=`` arguments (a
:class:`Lease` of that session taken from this checkpointer). ``append`` encodes the events
into a ``list`` of :class:`EncodedEvent` (``kind``, msgpack ``body`` checked to decode back),
so a hook never sees an invalid event. The base class also remembers damage: a
:class:`CorruptLogError` raised by ``_append``, ``_truncate``, ``_position`` or ``_read`` (and a
``corrupt``/``gap`` problem reported by ``_check_integrity``) makes this object refuse writes to
that session until ``repair()`` or ``delete()`` (here, or elsewhere: a new generation seen by
``_position`` lifts it); a hook never checks for that itself. ``list()``
sorts what ``_list`` returns.

The hooks
---------
Required (abstract):

``_append(session_id, batch, ts, expected_head, expected_generation) -> int``
    Atomically: read the session's position, call :func:`check_position` (it raises
    :class:`CheckpointConflictError`), then store the batch at seqs ``head+1..head+n``, each
    event stamped ``ts``, set the session's mtime to ``ts`` and return the new head. Nothing of
    a failed append may be visible, and two appends never interleave, across every thread and
    process sharing the store. An empty batch stores nothing, creates no session and returns
    the head (after the check). The first event of a session gives it a generation never used
    before in the store, also not by a deleted session of the same id.
``_read(session_id, since_seq) -> Iterator[StoredEvent]``
    A generator (it runs only when iterated) yielding the events with ``seq > since_seq`` in
    seq order, each built with :func:`decode_stored`. Hold no lock or transaction while the
    caller iterates (read in pages). If the session is truncated or deleted meanwhile (its
    generation changes), raise :class:`CheckpointConflictError` at the latest before the
    iterator would finish: never yield events of two histories. An unknown session yields
    nothing. Raise :class:`CheckpointerClosedError` once ``self.closed`` is true.
``_position(session_id) -> Position``
    ``Position(head, generation)``; ``Position(0, 0)`` for an unknown session. A session
    truncated to 0 still exists: head 0 and its (non-zero) generation.
``_list() -> list[SessionInfo]``
    Every existing session (created by a non-empty append, until it is deleted; truncated to 0
    included) with the time of its last write, in any order.
``_delete(session_id) -> None``
    Remove the session's events and record; an unknown session is a no-op. The session's lease
    is left as it is; a session created again under the id starts at seq 1 with a new
    generation.
``_truncate(session_id, to_seq, expected_head, expected_generation) -> int``
    Atomically: :func:`check_position` first, then the range (``0 <= to_seq <= head``, else
    :class:`TruncateRangeError`), then drop every seq above ``to_seq`` and give the session a
    new, never used generation (on every truncate of an existing session, even one that drops
    nothing), set its mtime to now and return ``to_seq``. ``truncate(unknown, 0)`` returns 0
    and creates nothing.
``_check_integrity() -> IntegrityReport``
    Check every stored session; collect :class:`IntegrityProblem` findings (their ``kind`` is
    documented there) and return :func:`integrity_report` of them. Repair nothing.
``_blobs() -> BlobStore``
    The content-addressed blob store beside the logs, the same object on every call:
    :class:`FileBlobStore` or :class:`MemoryBlobStore`, or a ``BlobStore`` subclass of your own
    built with ``blob_ref``, :func:`parse_blob_ref`, :func:`check_blob_data` and
    :func:`verify_blob` (and, for garbage collection, :func:`check_blob_refs` and
    :func:`check_written_before`, which ``touch`` and ``delete_blobs`` run on their arguments
    before anything else).
``_close() -> None``
    Release the backend's resources. Called once, after the base class released every lease.

Optional (the default in brackets):

``_repair(session_id) -> RepairReport``  [raise :class:`CheckpointerError`: no repair]
    Keep the readable prefix, move the damaged remainder aside (never delete it), give the
    session a new generation and report the lost seqs; a healthy session is left as it is
    (``repaired`` false).
``_acquire_lease(session_id, owner, ttl) -> Lease``  [raise CheckpointerError: no leases]
    Take the session's lease without blocking and return
    ``Lease(self, session_id, LeaseInfo(owner, pid, host, token, expires_at))``, or raise
    :class:`SessionLeasedError` naming the holder when anyone holds it, this process and this
    object included (leases are not reentrant). At most one live holder across every process
    sharing the store; a holder that dies (SIGKILL included) must free it, by the kernel
    (``flock``) or by expiry after ``ttl`` seconds (then ``expires_at`` is set and the backend
    renews its held leases itself, calling :func:`note_lease_renewed` with the
    :func:`lease_clock` time at which each successful renewal's write began: the holder's side
    effects no write fences, a tool call or a file a restore puts back, stop when a lease has
    gone unrenewed for longer than its ttl). ``token`` increases on every acquisition of the
    session's lease, across processes and releases. The base class registers the lease, so
    ``close()`` releases it.
``_release_lease(lease) -> None``  [do nothing]
    Give the lease up; called exactly once per lease, by ``lease.release()`` or ``close()``,
    possibly after ``_close()`` when a close raced an acquire.
``_lease_holder(session_id) -> LeaseInfo | None``  [raise CheckpointerError: no leases]
    The live holder, ``None`` when nobody holds the lease (a dead holder holds nothing).
``_drop_lease(session_id) -> None``  [do nothing: lease records stay]
    The session was deleted: remove its lease record (a file, a row) unless a live holder has
    it, so that a store whose sessions come and go does not keep one record per session it
    ever had. Called after a ``delete`` that no lease of this object covered, and after the
    release of a lease held across a ``delete``; an error it raises is logged, not raised.
    The next acquire starts a new record, with tokens above the old ones (the built-in
    backends start them at the time in microseconds); if it can race the removal (an ``flock``
    taken on a file unlinked meanwhile), the acquire must check that it locked the record
    still in place.
``_forked() -> None``  [do nothing]
    In a forked child, after the base class marked every lease held here released and lost
    (the leases are the parent's): let go of the parent's locks, connections and lease
    bookkeeping without closing or releasing any of them.
``_lease_records() -> list[str]``  [none]
    The session ids that have a lease record, held or not. :func:`collect_garbage` calls
    ``_drop_lease`` for those whose session does not exist: the records a holder killed before
    its session's first write leaves behind.
``_follow_wait(session_id, position, wake, timeout) -> None``  [wait 0.1 s: polling]
    The live tail's wait (:meth:`Checkpointer.follow`): block until the session may have moved
    from ``position``, ``wake`` (a ``threading.Event``) is set, or ``timeout`` seconds pass;
    return early on a cheaper change signal of your store (a notification, a file's size). A
    hint is only a hint: the follower reads the position again after every return, so
    returning too early costs a read and never an event.
``_append_leased(..., *, lease)`` / ``_truncate_leased(..., *, lease)`` /
``_delete_leased(session_id, *, lease)``  [``check_lease_held`` then ``_append`` /
``_truncate`` / ``_delete``]
    A write fenced by ``lease`` (``append(..., lease=)``, ``delete(..., lease=)``): refuse it with
    :class:`LeaseLostError` when the lease is no longer held. The default checks
    :func:`check_lease_held` just before the write, which is exact for leases that cannot be
    taken over while their holder lives (an ``flock``). A backend whose leases expire overrides
    all three to check the holder inside the write's own transaction, calls
    :func:`mark_lease_lost` when another holder took the lease, and raises
    :class:`LeaseLostError`.

The blob store's garbage-collection hooks
-----------------------------------------
``liteagent.eventlog.collect_garbage`` (``agent.collect_garbage()``, ``lite-agent gc``) needs
nothing more from the checkpointer than the contract: it reads every session (branch sessions,
which keep what restores took away, are sessions too) for the blob references in their
events. From the blob store it needs a *write time* per blob and these methods of
:class:`BlobStore`; :class:`FileBlobStore` and :class:`MemoryBlobStore` have them, and a store of
your own implements them (without ``list_blobs`` and ``delete_blobs`` everything else works, but
collecting raises :class:`BlobCollectionUnsupportedError`):

``put(data)``
    Also for content already stored: set its write time to now (a writer that puts a blob an
    event will reference must keep it from a collection that started before).
``touch(refs) -> list[str]``
    Set the write time of each stored ref to now; return the refs that are not stored.
    Restores, undos and forks touch the blobs of the events they copy before appending.
``list_blobs() -> Iterator[BlobInfo]``
    Every stored blob: ``BlobInfo(ref, written, size)``.
``delete_blobs(refs, *, written_before) -> list[str]``
    Delete each blob whose write time is still before ``written_before``, checked atomically
    with its removal: a ``put`` or ``touch`` racing the delete either comes first (and the blob
    stays) or finds it gone and stores it again. Return the refs deleted. (The SQLite store does
    it in one transaction per 100 refs; the file store renames the file aside, checks its mtime,
    and unlinks it or links it back.)
``remove_leftovers(*, written_before) -> int``, ``interrupted_deletes() -> list[str]``,
``restore_interrupted_deletes() -> int``
    Optional (default: nothing to do): temp files of interrupted puts, and blobs a deletion
    killed half way left set aside (``lite-agent doctor`` reports them, ``--repair`` puts them
    back); a store whose deletes are atomic has none.

``BlobCollectionTests`` (in ``CheckpointerConformance``) tests each hook and a collection in one
process; ``DurableBlobCollectionTests`` (in ``DurableConformance``) races a collection against a
real process's appends and SIGKILLs collections half way.

Errors: translate the storage's own exceptions at one boundary, with ``raise ... from e``:
damaged stored data is :class:`CorruptLogError` (never silently skipped), an operating-system
failure :class:`StorageIOError`; everything a backend raises derives from ``LiteAgentError``.

Running the conformance suite
-----------------------------
``liteagent.eventlog.conformance`` (the ``test`` extra: pytest, hypothesis) holds the tests as
base classes; a test file subclasses them and implements ``checkpointer_factory(path)``,
returning a picklable zero-argument callable that opens the store kept under the empty folder
``path`` (the same store on every call)::

    import functools
    from liteagent.eventlog.conformance import (
        CheckpointerConformance, CrashConformance, DurableConformance)
    from my_backend import my_checkpointer

    class TestMyCheckpointer(CheckpointerConformance, DurableConformance, CrashConformance):
        def checkpointer_factory(self, path):
            return functools.partial(my_checkpointer, path)

``CheckpointerConformance`` is the contract in one process (leases included) and a hypothesis
state machine against a model; ``DurableConformance`` (a store that outlives the object: other
instances and real processes, racing writers, a SIGKILLed lease holder) and
``CrashConformance`` (writers SIGKILLed mid-write) apply to stores shared across processes;
``CorruptionConformance`` damages a closed store through a ``damage(path, session_id, rng)``
hook you write for your format. The process tests unpickle the factory in child processes, so
its module must be importable by name when the first of them starts (installed, or on
``sys.path`` from the start of the test run).
"""

from liteagent.eventlog._blobs import BLOB_REF_PATTERN, blob_ref

from ._blobref import check_blob_refs, check_written_before
from ._blobs import FileBlobStore, MemoryBlobStore, check_blob_data, parse_blob_ref, verify_blob
from ._contract import (
    DAMAGE_PROBLEMS,
    INFORMATIONAL_PROBLEMS,
    MAX_SEQ,
    EncodedEvent,
    check_position,
    decode_stored,
    integrity_report,
)
from ._lease import check_lease_held, lease_clock, mark_lease_lost, note_lease_renewed

__all__ = [
    "BLOB_REF_PATTERN",
    "DAMAGE_PROBLEMS",
    "INFORMATIONAL_PROBLEMS",
    "MAX_SEQ",
    "EncodedEvent",
    "FileBlobStore",
    "MemoryBlobStore",
    "blob_ref",
    "check_blob_data",
    "check_blob_refs",
    "check_lease_held",
    "check_position",
    "check_written_before",
    "decode_stored",
    "integrity_report",
    "lease_clock",
    "mark_lease_lost",
    "note_lease_renewed",
    "parse_blob_ref",
    "verify_blob",
]
