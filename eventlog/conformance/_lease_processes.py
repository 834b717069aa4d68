"""Real OS processes for the lease tests: a second process trying a held lease, and a holder
killed with SIGKILL (through the conformance suite's forkserver)."""

from __future__ import annotations

import os
import signal
from typing import Any

from .._errors import SessionLeasedError
from .._lease import LeaseInfo
from ._processes import mp_context
from ._util import Factory

__all__ = ["run_holder_killed", "run_second_process"]

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
