"""check_read: reading one session for an integrity check beside writers that replace its
history (see eventlog/_checkread.py)."""

from __future__ import annotations

from collections.abc import Iterator

from liteagent.eventlog import IntegrityProblem, StoredEvent
from liteagent.eventlog._checkread import check_read
from liteagent.eventlog.errors import CheckpointConflictError


def test_a_history_replaced_on_every_read_is_left_out_not_reported() -> None:
    """A session whose history is replaced during each of the reads is skipped after a few
    tries: no finding, no events counted, and the read was tried more than once."""
    calls: list[str] = []

    def read(session_id: str) -> Iterator[StoredEvent]:
        calls.append(session_id)
        raise CheckpointConflictError(session_id, 1, 2, "truncated while it was being read")
        yield  # a generator, as a backend's read is

    problems: list[IntegrityProblem] = []
    assert 0 == check_read(read, "s", problems)
    assert [] == problems
    assert len(calls) > 1
