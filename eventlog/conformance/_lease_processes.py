"""Real OS processes for the lease tests: a second process trying a held lease, and a holder
killed with SIGKILL (through the conformance suite's forkserver)."""

from __future__ import annotations

import errno
import os
import signal
import time
from typing import Any

from .._errors import SessionLeasedError
from .._lease import LeaseInfo
from ._processes import mp_context
from ._util import Factory

__all__ = ["run_holder_killed", "run_racers", "run_second_process"]

_TIMEOUT = 60.0


def _try_acquire(factory: Factory, session_id: str, out: Any) -> None:
    cp = factory()
    try:
        try:
            lease = cp.acquire_lease(session_id)
        except SessionLeasedError as e:
            holder = e.holder
            out.put(("refused", holder.owner if holder else None, holder.pid if holder else None))
            return
        lease.release()
        out.put(("granted", lease.owner, os.getpid()))
    finally:
        cp.close()


def run_second_process(factory: Factory, session_id: str) -> tuple[str, str | None, int | None]:
    """Try the lease from another process; return ``("refused", holder owner, holder pid)``
    or ``("granted", owner, pid)``."""
    ctx = mp_context()
    out = ctx.Queue()
    proc = ctx.Process(target=_try_acquire, args=(factory, session_id, out))
    proc.start()
    try:
        result: tuple[str, str | None, int | None] = out.get(timeout=_TIMEOUT)
    finally:
        proc.join(_TIMEOUT)
    return result


def _hold_forever(factory: Factory, session_id: str, out: Any) -> None:
    cp = factory()
    lease = cp.acquire_lease(session_id)
    out.put(tuple(lease.info))
    signal.pause()  # until SIGKILL


def run_holder_killed(factory: Factory, session_id: str) -> LeaseInfo:
    """Start a process that takes the lease and holds it, kill it with SIGKILL once it holds
    it, wait for it to be gone; return the lease it held."""
    ctx = mp_context()
    out = ctx.Queue()
    proc = ctx.Process(target=_hold_forever, args=(factory, session_id, out))
    proc.start()
    try:
        info = LeaseInfo(*out.get(timeout=_TIMEOUT))
    finally:
        if proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(_TIMEOUT)
    assert -signal.SIGKILL == proc.exitcode
    return info


def _race(
    factory: Factory, session_id: str, marker: str, plan: tuple[int, float], out: Any
) -> None:
    """As racer ``n`` (``plan``: ``n`` and ``seconds``), take, hold and release the lease over
    and over for ``seconds``, deleting the session
    now and then (under the lease and without it); while holding it, own ``marker`` (made with
    ``O_EXCL``: finding it made means another process holds the lease too)."""
    n, seconds = plan
    cp = factory()
    taken = overlaps = 0
    try:
        stop = time.monotonic() + seconds
        i = 0
        while time.monotonic() < stop:
            i += 1
            try:
                lease = cp.acquire_lease(session_id, owner=f"racer-{n}")
            except SessionLeasedError:
                if (i + n) % 3 == 0:
                    cp.delete(session_id)  # without the lease
                continue
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
                overlaps += 1
            else:
                os.close(fd)
                taken += 1
                if i % 2 == 0:
                    cp.delete(session_id)  # under the lease
                time.sleep(0.0005)
                os.unlink(marker)
            lease.release()
    finally:
        cp.close()
    out.put((taken, overlaps))


def run_racers(
    factory: Factory, session_id: str, marker: str, processes: int = 3, seconds: float = 1.5
) -> list[tuple[int, int]]:
    """Run ``processes`` processes racing for ``session_id``'s lease while deleting the
    session (see :func:`_race`); return each one's ``(leases taken, overlaps found)``."""
    ctx = mp_context()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(factory, session_id, marker, (n, seconds), out))
        for n in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        results: list[tuple[int, int]] = [out.get(timeout=_TIMEOUT) for _ in procs]
    finally:
        for proc in procs:
            proc.join(_TIMEOUT)
    return results
