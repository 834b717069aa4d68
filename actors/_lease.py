"""Holding a session's lease for the whole of a turn, a restore or a compaction.

The checkpointer's lease keeps a second process (or a second agent on the same store) from
starting work on a session that is running elsewhere: it is taken before anything is appended,
and a session that is leased elsewhere is refused with :class:`AgentBusyError`, nothing written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from liteagent.eventlog import Checkpointer, Lease, LeaseInfo
from liteagent.eventlog.errors import SessionLeasedError

from ._errors import AgentBusyError

__all__ = ["describe_holder", "session_lease"]


def describe_holder(holder: LeaseInfo | None) -> str:
    """How an error names the holder of a lease."""
    if holder is None:
        return "another holder"
    return f"{holder.owner} (pid {holder.pid} on {holder.host})"


@contextmanager
def session_lease(checkpointer: Checkpointer, session_id: str, purpose: str) -> Iterator[Lease]:
    """Hold ``session_id``'s lease while the block runs (for ``purpose``, e.g. "a turn").

    Raises :class:`AgentBusyError` (with the :class:`SessionLeasedError` as its cause) when
    another process or agent holds it.
    """
    try:
        lease = checkpointer.acquire_lease(session_id)
    except SessionLeasedError as e:
        raise AgentBusyError(
            f"session {session_id!r} is running elsewhere: {describe_holder(e.holder)} holds "
            f"its lease, so {purpose} cannot start"
        ) from e
    try:
        yield lease
    finally:
        lease.release()
