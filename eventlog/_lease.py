"""Session leases: who may run a turn, a restore or a compaction on a session right now.

A lease is taken with :meth:`Checkpointer.acquire_lease` before anything is appended and held
for the whole operation, so a second process (or a second agent object in this process) cannot
start work on a session that is running elsewhere. It never blocks: a taken lease raises
:class:`SessionLeasedError` at once. Leases are not reentrant: a second acquire of a held lease
fails even in the process that holds it.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from ._errors import InvalidArgumentError, LeaseLostError
from ._numbers import plain_number
from ._shown import shown

if TYPE_CHECKING:
    from ._contract import Checkpointer

__all__ = [
    "MAX_TOKEN",
    "MAX_TTL",
    "Lease",
    "LeaseInfo",
    "check_lease_args",
    "check_lease_fresh",
    "check_lease_held",
    "default_owner",
    "first_token",
    "lease_clock",
    "live_expiry",
    "mark_lease_lost",
    "next_token",
    "note_lease_renewed",
    "run_renewer",
]

MAX_TTL = 86_400.0
"""The longest lease time-to-live accepted (seconds)."""

_CLOCK_SLACK_S = 3_600.0  # how far ahead another host's clock may be


def lease_clock() -> float:
    """Seconds on the clock a holder times its own lease with: it counts while the process is
    stopped and while the machine sleeps (``CLOCK_BOOTTIME`` where there is one), and never
    jumps with the wall clock."""
    return time.clock_gettime(_CLOCK)


_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def first_token() -> int:
    """The fencing token of a session's first lease record: the time in microseconds. A
    record goes when its session is not there any more (deleted, or never written), and the
    next lease starts a new one; starting from the clock keeps its tokens above every token
    of the records before (each acquisition adds one, and acquisitions are more than a
    microsecond apart)."""
    return time.time_ns() // 1000


#: Tokens stay below this, so every store keeps them as a 64-bit integer.
MAX_TOKEN = 2**63 - 2


def next_token(previous: object) -> int:
    """The token of the next lease after one with ``previous``: one more, or
    :func:`first_token` when ``previous`` is no token (no record, or a damaged one: not an int
    in ``0..MAX_TOKEN``). A holder whose token a damaged record lost is fenced out all the
    same: tokens are compared for equality, and the new one differs."""
    if type(previous) is int and 0 <= previous < MAX_TOKEN:
        return previous + 1
    return first_token()


def live_expiry(expires_at: float, now: float) -> bool:
    """Whether a stored lease expiry still holds at ``now``: later than now, and no further
    ahead than a holder can set one (``MAX_TTL``, plus an hour of clock skew between hosts).
    An expiry beyond that, or NaN, is damage: the lease is free rather than held forever."""
    return now < expires_at <= now + MAX_TTL + _CLOCK_SLACK_S


def run_renewer(
    wake: threading.Event, period: Callable[[], float | None], renew: Callable[[], None]
) -> None:
    """The loop of a backend's lease renewer thread: ``renew()`` every ``period()`` seconds,
    counted from the start of the last renewal, until ``period()`` returns None (nothing held,
    or stopped). ``wake`` set (a lease taken with a shorter ttl, a stop) makes it look at the
    period again at once: it shortens the wait, and never restarts it, so a holder that keeps
    taking other leases still renews the ones it holds in time."""
    last = time.monotonic()
    while (every := period()) is not None:
        left = last + every - time.monotonic()
        if left > 0:
            if wake.wait(left):
                wake.clear()
            continue
        last = time.monotonic()
        renew()


_MAX_OWNER = 256


class LeaseInfo(NamedTuple):
    """Who holds a session's lease.

    ``token`` increases on every acquisition of that session's lease (a fencing token);
    ``expires_at`` (Unix seconds) is ``None`` where the lease lives exactly as long as its
    holder's process (the file and memory backends).
    """

    owner: str
    pid: int
    host: str
    token: int
    expires_at: float | None


def default_owner() -> str:
    """``<hostname>:<pid>:<random hex>``: unique to one acquisition."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def check_lease_args(owner: object, ttl: object) -> tuple[str, float]:
    """Validate ``acquire_lease``'s arguments; return the owner (defaulted) and the ttl."""
    if owner is None:
        owner = default_owner()
    elif type(owner) is not str or not owner or len(owner) > _MAX_OWNER or not owner.isprintable():
        raise InvalidArgumentError(
            f"owner must be None or a printable str of 1-{_MAX_OWNER} characters, "
            f"got {shown(owner)}"
        )
    seconds = plain_number(ttl)
    if seconds is None or not 0 < seconds <= MAX_TTL:  # NaN fails it; no float() of a huge int
        raise InvalidArgumentError(
            f"ttl must be a number of seconds in (0, {MAX_TTL}], got {shown(ttl)}"
        )
    return owner, float(seconds)


class Lease:
    """A held lease on one session; release it with :meth:`release` or a ``with`` block.

    ``lost`` becomes true when the backend found the lease taken over by another holder (a
    lease that expired before it was renewed); the holder must then stop writing.
    """

    def __init__(self, checkpointer: Checkpointer, session_id: str, info: LeaseInfo) -> None:
        self._checkpointer = checkpointer
        self._session_id = session_id
        self._info = info
        self._lock = threading.Lock()
        self._released = False
        self._lost = False
        self._ttl: float | None = None  # set for leases that expire (see _expires)
        self._renewed = 0.0  # lease_clock() when the write that last set its expiry began

    def _expires(self, ttl: float, since: float) -> None:
        """This lease expires ``ttl`` seconds after each renewal; the write that took it began
        at ``since`` (:func:`lease_clock`)."""
        self._ttl = ttl
        self._renewed = since

    @property
    def checkpointer(self) -> Checkpointer:
        """The checkpointer this lease was taken from."""
        return self._checkpointer

    @property
    def session_id(self) -> str:
        """The leased session."""
        return self._session_id

    @property
    def info(self) -> LeaseInfo:
        """This lease as :meth:`Checkpointer.lease_holder` reports it."""
        return self._info

    @property
    def owner(self) -> str:
        """The owner string given to (or made by) ``acquire_lease``."""
        return self._info.owner

    @property
    def token(self) -> int:
        """The fencing token of this acquisition."""
        return self._info.token

    @property
    def lost(self) -> bool:
        """Whether the backend found this lease taken over by another holder."""
        return self._lost

    @property
    def released(self) -> bool:
        """Whether :meth:`release` ran (or the checkpointer was closed)."""
        return self._released

    def release(self) -> None:
        """Give the lease up; idempotent."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._checkpointer._forget_lease(self)

    def _forget_in_child(self) -> None:
        """In a forked child: this lease is the parent's; here it is released (nothing to
        give up) and lost (writes under it are refused)."""
        self._lock = threading.Lock()
        self._released = True
        self._lost = True

    def _mark_lost(self) -> None:
        """Called by a backend that found the lease taken over (through
        :func:`liteagent.eventlog.backend.mark_lease_lost`)."""
        self._lost = True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
        return f"<Lease {self._session_id!r} token={self._info.token} {state}>"


def check_lease_held(lease: Lease) -> None:
    """Raise :class:`LeaseLostError` unless ``lease`` is still held as far as this process
    knows: not released, and not marked lost by its backend (:func:`mark_lease_lost`). That
    is the whole check for leases that cannot be taken over while their holder lives; a
    backend whose leases expire checks its store too, inside the write."""
    if lease.released:
        raise LeaseLostError(lease.session_id, None, "was released")
    if lease.lost:
        raise LeaseLostError(lease.session_id, None, "was taken by another holder")


def check_lease_fresh(lease: Lease) -> None:
    """:func:`check_lease_held`, and for a lease that expires also that its holder renewed it
    within its ttl, so that nobody can have taken it since: the check before a side effect no
    write fences (a tool call, a file a restore puts back). A process that was stopped (or
    whose renewals failed) for longer than the ttl may have lost the lease without knowing:
    :class:`LeaseLostError`, although the lease may still be its own (a fenced write under
    it still succeeds then, and renewal goes on)."""
    check_lease_held(lease)
    ttl = lease._ttl  # the lease's own bookkeeping, kept for this check
    if ttl is None:
        return
    quiet = lease_clock() - lease._renewed
    if quiet > ttl:
        raise LeaseLostError(
            lease.session_id,
            None,
            f"may have been taken: it was last renewed {quiet:.1f} s ago, beyond its ttl of "
            f"{ttl:g} s (this process was stopped, or could not renew it)",
        )


def note_lease_renewed(lease: Lease, since: float) -> None:
    """Record a renewal of ``lease`` by a write that began at ``since``
    (:func:`lease_clock`), for :func:`check_lease_fresh`."""
    lease._renewed = max(lease._renewed, since)


def mark_lease_lost(lease: Lease) -> None:
    """Record that the backend found ``lease`` taken over by another holder (it expired before
    it was renewed): ``lease.lost`` becomes true and every later write under it is refused."""
    lease._mark_lost()  # the hook Lease keeps for backends
