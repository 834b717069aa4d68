"""Reading one session for an integrity check while other writers go on.

A read with every check (a backend's ``_read``) finds what is damaged in a session. An integrity
check runs beside live writers: a session appended to meanwhile simply reads further, and one
truncated or deleted meanwhile makes the read raise :class:`CheckpointConflictError`. Neither is
damage, so neither may be reported as such (a ``corrupt`` or ``gap`` finding makes the
checkpointer refuse writes to the session).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ._contract import IntegrityProblem
from ._errors import CheckpointConflictError, CodecError, CorruptLogError
from ._events import OpaqueEvent, StoredEvent

__all__ = ["check_read", "unknown_kinds"]

_ATTEMPTS = 3  # reads of a session whose history keeps being replaced, before it is skipped


def check_read(
    read: Callable[[str], Iterator[StoredEvent]],
    session_id: str,
    problems: list[IntegrityProblem],
) -> int:
    """Read ``session_id`` whole with ``read``, append what is wrong to ``problems`` and return
    the number of events read. A history replaced while it is read is read again; one that is
    replaced on every attempt is left out (it is being written, not damaged)."""
    for _ in range(_ATTEMPTS):
        unknown: set[str] = set()
        count = 0
        try:
            for count, ev in enumerate(read(session_id), start=1):  # noqa: B007 -- count is kept
                if isinstance(ev.body, OpaqueEvent):
                    unknown.add(ev.kind)
        except CheckpointConflictError:
            continue
        except CorruptLogError as e:
            problems.append(IntegrityProblem("corrupt", e.detail, session_id, e.seq))
            return count
        except CodecError as e:
            problems.append(IntegrityProblem("codec", str(e), session_id, e.seq))
            return count
        if unknown:
            problems.append(unknown_kinds(session_id, unknown))
        return count
    return 0


def unknown_kinds(session_id: str, kinds: set[str]) -> IntegrityProblem:
    """The ``unknown_kind`` finding of a session holding events of ``kinds``."""
    return IntegrityProblem(
        "unknown_kind",
        f"events of kinds this version does not know (kept as-is): {sorted(kinds)}",
        session_id,
    )
