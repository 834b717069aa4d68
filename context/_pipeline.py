"""Running passes in order, measuring each."""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog import CancelToken
from liteagent.eventlog.types import Message

from ._contract import CompactResult, Pass, PassReport
from ._tokens import estimate_tokens

__all__ = ["run_pipeline"]


def run_pipeline(
    messages: Sequence[Message], passes: Sequence[Pass], *, cancel: CancelToken | None = None
) -> CompactResult:
    """Apply ``passes`` in order; report each one's effect on the estimated tokens. With
    ``cancel``, raise :class:`~liteagent.eventlog.errors.OperationCancelledError` before a pass
    once it fired."""
    current = list(messages)
    before = tokens = estimate_tokens(current)
    reports = []
    for p in passes:
        if cancel is not None:
            cancel.raise_if_cancelled()
        result, detail = p(current)
        after = estimate_tokens(result)
        changed = result != current
        reports.append(
            PassReport(
                name=p.name,
                changed=changed,
                tokens_before=tokens,
                tokens_after=after,
                detail=detail,
            )
        )
        current, tokens = result, after
    return CompactResult(
        messages=tuple(current),
        changed=any(r.changed for r in reports),
        tokens_before=before,
        tokens_after=tokens,
        passes=tuple(reports),
    )
