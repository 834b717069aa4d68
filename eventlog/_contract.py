"""The Checkpointer contract: one append-only event log per session, with optimistic concurrency.

Every backend subclasses :class:`Checkpointer`, which validates arguments identically for all of
them (so every backend raises the same errors for the same bad input, before any I/O) and
encodes events before any lock is taken; backends implement the ``_``-prefixed primitives.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from ._errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CheckpointerError,
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    InvalidEventError,
    LiteAgentError,
)
from ._eventcodec import DECODERS, encode_body
from ._events import Event, OpaqueEvent, StoredEvent
from ._follow import DEFAULT_MAX_STALENESS, Follower
from ._ids import validate_session_id
from ._lease import Lease, LeaseInfo, check_lease_args, check_lease_held, lease_clock
from ._logger import get_logger
from ._numbers import plain_number
from ._shown import shown

if TYPE_CHECKING:
    from ._blobs import BlobStore

__all__ = [
    "DAMAGE_PROBLEMS",
    "INFORMATIONAL_PROBLEMS",
    "KEPT_IN_CHILD",
    "MAX_SEQ",
    "Checkpointer",
    "EncodedEvent",
    "IntegrityProblem",
    "IntegrityReport",
    "Lease",
    "LeaseInfo",
    "Position",
    "RepairReport",
    "SessionInfo",
    "check_position",
    "decode_stored",
    "integrity_report",
    "open_checkpointers",
]

_decoder_for = DECODERS.get
_log = get_logger("liteagent.eventlog")
_OPEN: weakref.WeakSet[Checkpointer] = weakref.WeakSet()  # for a forked child to let go of
KEPT_IN_CHILD: list[object] = []
"""What a forked child keeps referenced for good: its copies of its parents' connections
(SQLite's, PostgreSQL's), which it must neither use nor close."""


def open_checkpointers() -> list[Checkpointer]:
    """Every checkpointer of this process not yet garbage-collected (closed ones too)."""
    return list(_OPEN)


def _forget_in_child() -> None:
    for cp in open_checkpointers():
        # One whose construction failed halfway (still referenced by its traceback) has
        # nothing of the parent's to let go of; a fork hook must never raise.
        with contextlib.suppress(Exception):
            cp._forget_in_child()


os.register_at_fork(after_in_child=_forget_in_child)

MAX_SEQ = (1 << 63) - 1
"""The largest seq (and head) any backend stores: a signed 64-bit integer."""


class SessionInfo(NamedTuple):
    """A stored session: its id and the time of its last write (Unix seconds)."""

    id: str
    mtime: float


class Position(NamedTuple):
    """Where a session's history stands: its ``head`` seq and its ``generation``.

    The generation changes on every truncate and on delete-and-recreate and is never reused, so a
    ``(head, generation)`` pair is a compare-and-set token that cannot suffer ABA. An empty or
    unknown session is at ``Position(0, 0)``.
    """

    head: int
    generation: int


class IntegrityProblem(msgspec.Struct, frozen=True, gc=False):
    """One finding of :meth:`Checkpointer.check_integrity`.

    ``kind`` is one of ``"torn_tail"`` (an unfinished last write, cut on the next write),
    ``"corrupt"`` (damage that is not a torn tail), ``"codec"`` (bytes the codec or event decoder
    refuses), ``"gap"`` (seqs not contiguous), ``"unknown_kind"`` (events of a newer writer; not an
    error), ``"leftover"`` (a temp file of an interrupted truncate; not an error),
    ``"newer_format"`` (a log written in a newer format: neither read nor changed) or
    ``"database"`` (SQLite's own integrity check failed).
    """

    kind: str
    detail: str
    session_id: str | None = None
    seq: int | None = None


class IntegrityReport(msgspec.Struct, frozen=True, gc=False):
    """The result of an integrity check: ``ok`` is false when any problem needs attention."""

    ok: bool
    detail: str
    problems: tuple[IntegrityProblem, ...] = ()


class RepairReport(msgspec.Struct, frozen=True, gc=False):
    """What :meth:`Checkpointer.repair` did to one session.

    ``kept_head`` is the last seq kept (the readable prefix is ``1..kept_head``). ``lost`` lists
    the seqs that were stored after it and could not be kept, as inclusive ``(first, last)``
    ranges; ``last`` is ``None`` when the damage hides how far the log went. ``quarantine``
    names where the damaged remainder was moved (never deleted), ``None`` when nothing was
    moved. ``generation`` is the session's generation afterwards (a repair that changed
    anything bumps it). ``repaired`` is false when there was nothing to repair.
    """

    session_id: str
    repaired: bool
    kept_head: int
    generation: int
    lost: tuple[tuple[int, int | None], ...] = ()
    quarantine: str | None = None
    detail: str = ""


class EncodedEvent(NamedTuple):
    """An event ready to store: its kind and body bytes."""

    kind: str
    body: bytes


_UNKNOWN = -1  # the generation a session had when its damage was found could not be read

DAMAGE_PROBLEMS = frozenset({"corrupt", "gap"})
"""Findings that make a session refuse writes until it is repaired (a ``codec`` finding is
not damage: the bytes are intact, and the codec given may be the wrong one)."""

INFORMATIONAL_PROBLEMS = frozenset({"unknown_kind", "leftover"})
"""Findings that do not make a store unhealthy: events of a newer writer (kept as they are) and
the temp file of a truncate that was killed (removed by the session's next writer)."""


def integrity_report(
    problems: builtins.list[IntegrityProblem], sessions: int, events: int
) -> IntegrityReport:
    """Summarize an integrity check: ok unless a problem is more than informational."""
    detail = f"{sessions} sessions, {events} events checked"
    if problems:
        detail += "; " + "; ".join(f"{p.session_id}: {p.kind}: {p.detail}" for p in problems)
    serious = [p for p in problems if p.kind not in INFORMATIONAL_PROBLEMS]
    return IntegrityReport(not serious, detail, tuple(problems))


def check_position(
    session_id: str,
    head: int,
    generation: int,
    expected_head: int | None,
    expected_generation: int | None,
) -> None:
    """Raise :class:`CheckpointConflictError` when the expectations do not match the position."""
    if expected_head is not None and expected_head != head:
        raise CheckpointConflictError(session_id, expected_head, head)
    if expected_generation is not None and expected_generation != generation:
        raise CheckpointConflictError(
            session_id,
            Position(head if expected_head is None else expected_head, expected_generation),
            Position(head, generation),
            "the generation changed: the history was truncated or deleted and recreated",
        )


def decode_stored(
    session_id: str, seq: int, ts: float, kind: str, body: bytes | memoryview | msgspec.Raw
) -> StoredEvent:
    """Decode one stored event (every backend's reads come through here): an unknown ``kind``
    gives an :class:`OpaqueEvent` holding the bytes; bytes that are not a valid ``kind`` event
    give :class:`CodecError` naming the session and seq."""
    decoder = _decoder_for(kind)
    if decoder is None:
        return StoredEvent(seq, ts, kind, OpaqueEvent(kind, bytes(body)))
    try:
        return StoredEvent(seq, ts, kind, decoder.decode(body))
    except (msgspec.DecodeError, RecursionError) as e:
        raise CodecError(f"cannot decode {kind} event: {e}", session_id=session_id, seq=seq) from e


def _check_optional_int(name: str, value: object) -> None:
    if value is not None and (type(value) is not int or not 0 <= value <= MAX_SEQ):
        raise InvalidArgumentError(
            f"{name} must be None or an int in 0..{MAX_SEQ}, got {shown(value)}"
        )


class Checkpointer(abc.ABC):
    """An append-only event log per session, shared safely by threads (and, for the file and
    SQLite backends, by processes).

    Contract, for every backend:

    - ``append`` is one atomic write: the events get seqs ``head+1..head+n``, never interleaved
      with another writer's; nothing of a failed append is visible.
    - ``expected_head`` / ``expected_generation`` make writes conditional: if either differs from
      the session's position, :class:`CheckpointConflictError` is raised and nothing is written.
    - ``read`` yields events in seq order, strictly after ``since_seq``. It never holds a read
      transaction or lock while the caller iterates, and never yields events of two histories:
      if the session is truncated or deleted while it iterates, it raises
      :class:`CheckpointConflictError` (at the latest before it would finish).
    - an empty or unknown session has head 0 and is at ``Position(0, 0)``; reading it yields
      nothing; deleting it does nothing.
    - a closed checkpointer raises :class:`CheckpointerClosedError` on every call.
    - session ids are validated before any I/O (:class:`InvalidSessionIdError`).
    - once a read, a scan or a write of this object has found damage in a session
      (:class:`CorruptLogError`), every later ``append`` and ``truncate`` of that session is
      refused with :class:`CorruptLogError` until :meth:`repair` salvages it: nothing is ever
      acknowledged onto a log that cannot be read back.
    - a session's lease (:meth:`acquire_lease`) has at most one live holder across every
      process sharing the store; acquiring never blocks, is not reentrant, and a holder that
      dies (SIGKILL included) frees it. ``close()`` releases every lease it holds. Deleting a
      session leaves its lease as it is.

    A backend subclasses this class and implements the ``_``-prefixed hooks below (``_append``,
    ``_read``, ``_position``, ...): the public methods validate every argument, encode the events
    and keep the damage and lease bookkeeping, then call one hook. The hooks, what each may
    assume and what it must raise are documented in :mod:`liteagent.eventlog.backend`, with the
    helpers they use; ``examples/session_files_backend.py`` is a complete backend built on them.
    """

    def __init__(self) -> None:
        self._closed = False
        # session -> (why writes are refused, its generation when that was found)
        self._damaged: dict[str, tuple[str, int | None]] = {}
        self._damaged_lock = threading.Lock()
        self._leases: set[Lease] = set()
        self._leases_lock = threading.Lock()
        self._deleted_under: set[Lease] = set()  # held leases whose session was deleted
        _OPEN.add(self)

    def _forget_in_child(self) -> None:
        """In a forked child: the leases held here are the parent's. Each is marked released
        and lost in the child, so that nothing the child does (a ``release()``, ``close()``, a
        ``with`` block ending) gives the parent's lease up, and a write under it is refused;
        then the backend's :meth:`_forked` hook runs."""
        self._leases_lock = threading.Lock()  # a parent thread may have held it at the fork
        for lease in self._leases:
            lease._forget_in_child()
        self._leases = set()
        self._deleted_under = set()
        self._forked()

    def _forked(self) -> None:  # noqa: B027 -- a hook; nothing by default
        """In a forked child, after :meth:`_forget_in_child`: let go of what is the parent's
        (locks, connections, lease bookkeeping) without closing or releasing any of it."""

    # -- public API ---------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        events: Iterable[Event | OpaqueEvent],
        expected_head: int | None = None,
        *,
        expected_generation: int | None = None,
        ts: float | None = None,
        lease: Lease | None = None,
    ) -> int:
        """Append ``events`` atomically and return the new head.

        Every event of the batch is stamped with ``ts`` (Unix seconds; default: now), so a
        caller that applies its own events to a live state can use the same time. An empty
        batch writes nothing and returns the head (after checking expectations).

        With ``lease`` (a lease of this session taken from this checkpointer), the append is
        written only while that lease is still held, checked atomically with the write: a lease
        released, or expired and taken by another holder meanwhile, raises
        :class:`LeaseLostError` and nothing is written (fencing).
        """
        self._check_open()
        sid = validate_session_id(session_id)
        _check_optional_int("expected_head", expected_head)
        _check_optional_int("expected_generation", expected_generation)
        self._check_lease_arg(sid, lease)
        given: object = events
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise InvalidEventError(f"events must be an iterable of events, got {shown(given)}")
        batch = [EncodedEvent(*encode_body(e)) for e in events]
        if ts is None:
            ts = time.time()
        elif type(ts) is not float or not math.isfinite(ts):
            raise InvalidArgumentError(f"ts must be a finite float (Unix seconds), got {shown(ts)}")
        self._refuse_damaged(sid)
        try:
            if lease is not None:
                return self._append_leased(
                    sid, batch, ts, expected_head, expected_generation, lease=lease
                )
            return self._append(sid, batch, ts, expected_head, expected_generation)
        except CorruptLogError as e:
            self._mark_damaged(sid, e)
            raise

    def read(self, session_id: str, since_seq: int = 0) -> Iterator[StoredEvent]:
        """Return an iterator over the events with ``seq > since_seq``, in seq order."""
        self._check_open()
        sid = validate_session_id(session_id)
        if type(since_seq) is not int or not 0 <= since_seq <= MAX_SEQ:
            raise InvalidArgumentError(
                f"since_seq must be an int in 0..{MAX_SEQ}, got {shown(since_seq)}"
            )
        return self._watched(sid, self._read(sid, since_seq))

    def follow(
        self,
        session_id: str,
        since: int = 0,
        *,
        expected_generation: int | None = None,
        max_staleness: float | None = None,
    ) -> Follower:
        """Follow the session live: a :class:`~liteagent.eventlog.Follower` that yields every
        event with ``seq > since`` in seq order, exactly once, as writers of any process (any
        host, on a shared store) commit them; iterate it (blocking or ``async for``) or call
        its ``get(timeout)``; ``close()`` ends it.

        When the session's history is replaced (a truncate, a delete), the follower raises
        :class:`CheckpointConflictError` instead of yielding anything of the new history:
        re-read the session and follow again from its head. ``expected_generation`` (the
        generation of the history ``since`` refers to) makes that check start at once; by
        default the first history found is followed. ``max_staleness`` (seconds, default
        2.0) bounds how long an event can wait when a backend's change hint is lost.
        """
        self._check_open()
        sid = validate_session_id(session_id)
        if type(since) is not int or not 0 <= since <= MAX_SEQ:
            raise InvalidArgumentError(f"since must be an int in 0..{MAX_SEQ}, got {shown(since)}")
        _check_optional_int("expected_generation", expected_generation)
        staleness = DEFAULT_MAX_STALENESS if max_staleness is None else plain_number(max_staleness)
        if staleness is None or not 0 < staleness <= 3600:  # NaN fails it; no float() of a huge int
            raise InvalidArgumentError(
                "max_staleness must be a number of seconds in (0, 3600], "
                f"got {shown(max_staleness)}"
            )
        return Follower(self, sid, since, expected_generation, float(staleness))

    def _watched(self, session_id: str, events: Iterator[StoredEvent]) -> Iterator[StoredEvent]:
        """``events``, remembering the session as damaged if reading it finds damage."""
        try:
            yield from events
        except CorruptLogError as e:
            self._mark_damaged(session_id, e)
            raise

    # -- damage -----------------------------------------------------------------------------------

    def damaged(self, session_id: str) -> str | None:
        """Why this object refuses writes to ``session_id`` (damage it found), or ``None``."""
        self._check_open()
        return self._still_damaged(validate_session_id(session_id))

    def _mark_damaged(self, session_id: str, error: CorruptLogError | str) -> None:
        """Refuse further writes to ``session_id`` until it is repaired (here, or by another
        process or checkpointer: a repair, like a delete or a truncate, gives the session a new
        generation)."""
        detail = error if isinstance(error, str) else str(error)
        with self._damaged_lock:
            if session_id in self._damaged:
                return
        try:
            generation: int | None = self._position(session_id).generation
        except CorruptLogError:
            generation = None  # the position itself meets the damage
        except LiteAgentError:
            generation = _UNKNOWN  # cannot tell a repair elsewhere: only repair() here lifts it
        with self._damaged_lock:
            self._damaged.setdefault(session_id, (detail, generation))

    def _still_damaged(self, session_id: str) -> str | None:
        """Why writes to ``session_id`` are refused, or None: none was found, or it was
        repaired elsewhere since: its position reads with a new generation (or reads at all,
        when the damage was in the way of the position itself). Writes check what they build
        on in any case; this refusal only stops them early."""
        with self._damaged_lock:
            found = self._damaged.get(session_id)
        if found is None:
            return None
        detail, generation = found
        if generation == _UNKNOWN:
            return detail
        try:
            now = self._position(session_id).generation
        except LiteAgentError:
            return detail
        if now == generation:
            return detail
        with self._damaged_lock:
            if self._damaged.get(session_id) == found:
                del self._damaged[session_id]
        return None

    def _refuse_damaged(self, session_id: str) -> None:
        detail = self._still_damaged(session_id)
        if detail is not None:
            raise CorruptLogError(
                session_id,
                None,
                f"writes are refused since damage was found ({detail}); "
                "repair it with repair() or `lite-agent doctor --repair`",
            )

    def repair(self, session_id: str) -> RepairReport:
        """Salvage a damaged session: keep its readable prefix, move the damaged remainder
        aside (never deleted), give it a new generation, and report exactly which seqs were
        lost. A healthy session is left as it is (``repaired`` false). Afterwards the session
        accepts writes again."""
        self._check_open()
        sid = validate_session_id(session_id)
        report = self._repair(sid)
        with self._damaged_lock:
            self._damaged.pop(sid, None)
        return report

    # -- leases -----------------------------------------------------------------------------------

    def acquire_lease(
        self, session_id: str, *, owner: str | None = None, ttl: float = 30.0
    ) -> Lease:
        """Take the lease of ``session_id`` for this caller, without blocking; raise
        :class:`SessionLeasedError` when another live holder has it (from another process, or
        another acquire in this one). ``owner`` defaults to ``"<hostname>:<pid>:<random hex>"``;
        ``ttl`` (seconds) is how long a lease lives without renewal on backends whose leases
        expire (the checkpointer renews its held leases itself). Release it with
        ``lease.release()`` or a ``with`` block."""
        self._check_open()
        sid = validate_session_id(session_id)
        owner, ttl = check_lease_args(owner, ttl)
        since = lease_clock()
        lease = self._acquire_lease(sid, owner, ttl)
        if lease.info.expires_at is not None:
            lease._expires(ttl, since)  # the lease's bookkeeping for check_lease_fresh
        with self._leases_lock:
            self._leases.add(lease)
            closed = self._closed
        if closed:  # closed while it was being acquired: give it back
            lease.release()
            self._check_open()
        return lease

    def lease_holder(self, session_id: str) -> LeaseInfo | None:
        """Who holds the lease of ``session_id`` now; ``None`` when nobody does."""
        self._check_open()
        return self._lease_holder(validate_session_id(session_id))

    def _check_lease_arg(self, session_id: str, lease: object) -> None:
        """Refuse a ``lease=`` that is not a lease of ``session_id`` from this checkpointer."""
        if lease is None:
            return
        if not isinstance(lease, Lease) or lease.checkpointer is not self:
            raise InvalidArgumentError(
                f"lease must be None or a Lease taken from this checkpointer, got {shown(lease)}"
            )
        if lease.session_id != session_id:
            raise InvalidArgumentError(
                f"the lease is on session {lease.session_id!r}, not {session_id!r}"
            )
        if lease.released or lease.lost:  # never valid again: refused before any I/O
            check_lease_held(lease)

    def _forget_lease(self, lease: Lease) -> None:
        """Release ``lease`` in the backend (called once, by :meth:`Lease.release`)."""
        with self._leases_lock:
            self._leases.discard(lease)
            deleted = lease in self._deleted_under
            self._deleted_under.discard(lease)
        self._release_lease(lease)
        if deleted and not self._closed:
            self._drop_lease_quietly(lease.session_id)

    def head(self, session_id: str) -> int:
        """Return the session's last seq; 0 for an empty or unknown session."""
        return self.position(session_id).head

    def position(self, session_id: str) -> Position:
        """Return the session's ``(head, generation)``; ``(0, 0)`` for an unknown session.

        The head is one a read can reach: a backend that finds damage on the way raises
        :class:`CorruptLogError` (and the session refuses writes until it is repaired)."""
        self._check_open()
        sid = validate_session_id(session_id)
        try:
            return self._position(sid)
        except CorruptLogError as e:
            self._mark_damaged(sid, e)
            raise

    def list(self) -> builtins.list[SessionInfo]:
        """Return every stored session, most recently written first (ties by id)."""
        self._check_open()
        infos = self._list()
        infos.sort(key=lambda i: (-i.mtime, i.id))
        return infos

    def delete(self, session_id: str, *, lease: Lease | None = None) -> None:
        """Remove the session's events and record; a no-op for an unknown session. A damaged
        session can be deleted too (a session created afterwards starts clean). ``lease``
        fences the delete as it fences :meth:`append`: a lease lost meanwhile raises
        :class:`LeaseLostError` and nothing is deleted."""
        self._check_open()
        sid = validate_session_id(session_id)
        self._check_lease_arg(sid, lease)
        if lease is not None:
            self._delete_leased(sid, lease=lease)
        else:
            self._delete(sid)
        with self._damaged_lock:
            self._damaged.pop(sid, None)
        with self._leases_lock:
            held = [lease for lease in self._leases if lease.session_id == sid]
            self._deleted_under.update(held)
        if not held:  # a lease held here keeps its record until it is released
            self._drop_lease_quietly(sid)

    def _drop_lease_quietly(self, session_id: str) -> None:
        """Remove the lease record of a deleted session (so that creating and deleting
        sessions leaves nothing behind); a failure only leaves the record, which is logged."""
        try:
            self._drop_lease(session_id)
        except (LiteAgentError, OSError) as e:
            _log.warning("eventlog.lease_record_kept", session_id=session_id, error=str(e))

    def truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None = None,
        *,
        expected_generation: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        """Drop every event with ``seq > to_seq`` atomically and return the new head (``to_seq``).

        Every truncate of an existing session gives it a new generation. ``to_seq`` must be in
        ``0..head`` (else :class:`TruncateRangeError`, after the conflict checks). ``lease``
        fences the truncate as it fences :meth:`append`.
        """
        self._check_open()
        sid = validate_session_id(session_id)
        if type(to_seq) is not int or abs(to_seq) > MAX_SEQ:
            raise InvalidArgumentError(f"to_seq must be an int, got {shown(to_seq)}")
        _check_optional_int("expected_head", expected_head)
        _check_optional_int("expected_generation", expected_generation)
        self._check_lease_arg(sid, lease)
        self._refuse_damaged(sid)
        try:
            if lease is not None:
                return self._truncate_leased(
                    sid, to_seq, expected_head, expected_generation, lease=lease
                )
            return self._truncate(sid, to_seq, expected_head, expected_generation)
        except CorruptLogError as e:
            self._mark_damaged(sid, e)
            raise

    def check_integrity(self) -> IntegrityReport:
        """Check every stored session and report what is damaged; repairs nothing."""
        self._check_open()
        report = self._check_integrity()
        for p in report.problems:
            if p.session_id is not None and p.kind in DAMAGE_PROBLEMS:
                self._mark_damaged(p.session_id, f"{p.kind}: {p.detail}")
        return report

    @property
    def blobs(self) -> BlobStore:
        """The blob store that lives beside this checkpointer's logs."""
        self._check_open()
        return self._blobs()

    def close(self) -> None:
        """Release every lease and resource; afterwards every call raises
        CheckpointerClosedError."""
        if not self._closed:
            self._closed = True
            with self._leases_lock:
                held = list(self._leases)
            for lease in held:
                lease.release()
            self._close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"{type(self).__name__} is closed")

    # -- backend primitives -------------------------------------------------------------------

    @abc.abstractmethod
    def _append(
        self,
        session_id: str,
        batch: builtins.list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        """Check the position (:func:`check_position`) and store ``batch`` at ``head+1..``
        atomically with ``ts``; return the new head. An empty batch stores nothing."""

    @abc.abstractmethod
    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        """Yield the events after ``since_seq`` in seq order (:func:`decode_stored`), holding
        no lock while the caller iterates; conflict if the history is replaced meanwhile."""

    @abc.abstractmethod
    def _position(self, session_id: str) -> Position:
        """The session's ``(head, generation)``; ``Position(0, 0)`` when it is unknown."""

    @abc.abstractmethod
    def _list(self) -> builtins.list[SessionInfo]:
        """Every stored session, in any order (the caller sorts)."""

    @abc.abstractmethod
    def _delete(self, session_id: str) -> None:
        """Remove the session's events and record (its lease stays); unknown: do nothing."""

    @abc.abstractmethod
    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        """Check the position, then the range (:class:`TruncateRangeError`); drop the seqs
        after ``to_seq`` atomically and give an existing session a new generation."""

    @abc.abstractmethod
    def _check_integrity(self) -> IntegrityReport:
        """Check every stored session; build the report with :func:`integrity_report`."""

    def _repair(self, session_id: str) -> RepairReport:  # noqa: ARG002 -- a hook
        """Salvage ``session_id`` (see :meth:`repair`); backends that can be damaged override."""
        raise CheckpointerError(f"{type(self).__name__} cannot repair sessions")

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:  # noqa: ARG002
        """Take the lease or raise :class:`SessionLeasedError`; backends override."""
        raise CheckpointerError(f"{type(self).__name__} has no session leases")

    def _check_held(self, lease: Lease) -> None:
        """Raise :class:`LeaseLostError` unless ``lease`` is still held (as far as this object
        knows: enough for leases that cannot be taken over while their holder lives); see
        :func:`liteagent.eventlog.backend.check_lease_held`."""
        check_lease_held(lease)

    def _append_leased(
        self,
        session_id: str,
        batch: builtins.list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        """An append fenced by ``lease``; backends whose leases expire override this to check
        the lease inside the write (the default checks it just before)."""
        self._check_held(lease)
        return self._append(session_id, batch, ts, expected_head, expected_generation)

    def _truncate_leased(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
        *,
        lease: Lease,
    ) -> int:
        """A truncate fenced by ``lease`` (as :meth:`_append_leased`)."""
        self._check_held(lease)
        return self._truncate(session_id, to_seq, expected_head, expected_generation)

    def _delete_leased(self, session_id: str, *, lease: Lease) -> None:
        """A delete fenced by ``lease`` (as :meth:`_append_leased`)."""
        self._check_held(lease)
        self._delete(session_id)

    def _release_lease(self, lease: Lease) -> None:  # noqa: B027 -- a hook; nothing by default
        """Give ``lease`` up (called once per lease, also after close); backends override."""

    def _drop_lease(self, session_id: str) -> None:  # noqa: B027 -- a hook; nothing by default
        """``session_id`` was deleted: remove its lease record (a file, a row) if nobody holds
        the lease, so that a store whose sessions come and go does not keep a record for each
        session it ever had; a record whose lease is held stays. Called after a delete that no
        lease of this object covered, and after the release of a lease held across a delete.
        The session's next lease then starts a new record, whose tokens should start above
        the old ones (the built-in backends start them at the time in microseconds)."""

    def _lease_records(self) -> builtins.list[str]:
        """The session ids that have a lease record (a file, a row), held or not; for
        :func:`collect_garbage`, which drops the records of sessions that do not exist (left
        by a holder killed before its session's first write). None by default."""
        return []

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:  # noqa: ARG002
        """The current holder or ``None``; backends override."""
        raise CheckpointerError(f"{type(self).__name__} has no session leases")

    def _follow_wait(
        self,
        session_id: str,  # noqa: ARG002 -- a hook
        position: Position,  # noqa: ARG002
        wake: threading.Event,
        timeout: float,
    ) -> None:
        """Block until the session may have moved from ``position``, ``wake`` is set, or
        ``timeout`` seconds pass (a follower then reads the position again). The default polls:
        it returns after at most 0.1 s; backends override it with a cheaper change signal."""
        wake.wait(min(timeout, 0.1))

    @abc.abstractmethod
    def _blobs(self) -> BlobStore:
        """The blob store beside the logs (the same object on every call)."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the backend's resources; called once, after every lease was released."""
