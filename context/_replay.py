"""Replay verification: re-project every recorded request from the log and compare hashes.

A session records, per model call, a :class:`~liteagent.eventlog.types.ModelRequestRecord` with the
hash of the exact request (:func:`~._viewhash.view_hash`) and ``request_digest``, the hash of
its non-message part, and, when the ContextEngine projected it, a
:class:`~liteagent.eventlog.types.ContextStatus` (just before it, in the same append) with the
settings and the budget it projected with. :func:`verify_replay` folds the log once and, at
each record, projects the view again from the state before it — with an engine for those
settings, or as the raw folded conversation (:class:`~._view.ConversationView`, what the
session sent) when there is no status — and recomputes the hash. A record without a request
digest cannot be checked: its check fails, with :data:`NO_DIGEST` as the problem.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from liteagent.eventlog import SessionState, StoredEvent
from liteagent.eventlog._fold import apply_all
from liteagent.eventlog.types import ContextSettings, ContextStatus, ModelRequestRecord

from ._engine import ContextEngine
from ._engine_options import ContextBudgetError
from ._view import ConversationView
from ._viewhash import combine_view_hash

__all__ = ["NO_DIGEST", "ReplayCheck", "ReplayReport", "verify_replay"]

NO_DIGEST = (
    "the record holds no request digest, so the request cannot be recomputed from the log "
    "(every model_request record liteagent writes holds one)"
)
"""The problem of a check whose record holds no ``request_digest``."""


class ReplayCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request checked: its seq, the recorded and recomputed hashes (``computed``
    is ``None`` when it could not be recomputed, with the reason in ``problem``), and the
    recomputed view's token estimate (``None`` for a raw request: its system prompt and tools,
    which the estimate includes, are not in the log)."""

    seq: int
    recorded: str
    computed: str | None
    level: str = "raw"
    problem: str = ""
    tokens: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the recomputed hash is the recorded one."""
        return self.computed == self.recorded


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every recorded request of a log, checked."""

    checks: tuple[ReplayCheck, ...]

    @property
    def ok(self) -> bool:
        """Whether every request was recomputed to its recorded hash."""
        return all(c.ok for c in self.checks)

    @property
    def mismatches(self) -> tuple[ReplayCheck, ...]:
        """The requests that did not verify."""
        return tuple(c for c in self.checks if not c.ok)


def verify_replay(events: Iterable[StoredEvent]) -> ReplayReport:
    """Check every recorded request of ``events`` (a whole log, in order); see the module
    docstring. O(events + views)."""
    state = SessionState()
    engines: dict[ContextSettings, ContextEngine] = {}
    raw = ConversationView()
    status: ContextStatus | None = None
    checks: list[ReplayCheck] = []
    batch: list[StoredEvent] = []
    for event in events:
        body = event.body
        if isinstance(body, ContextStatus):
            state = apply_all(state, batch)
            batch = []
            status = body
        elif isinstance(body, ModelRequestRecord):
            state = apply_all(state, batch)
            batch = []
            checks.append(_check(event.seq, body, status, state=state, engines=engines, raw=raw))
            status = None
        batch.append(event)
    return ReplayReport(checks=tuple(checks))


def _check(
    seq: int,
    record: ModelRequestRecord,
    status: ContextStatus | None,
    *,
    state: SessionState,
    engines: dict[ContextSettings, ContextEngine],
    raw: ConversationView,
) -> ReplayCheck:
    if record.request_digest is None:
        return ReplayCheck(
            seq=seq,
            recorded=record.view_hash,
            computed=None,
            problem=NO_DIGEST,
        )
    if status is None or status.settings is None:
        raw.update(state)
        digest = raw.messages_digest()
        return ReplayCheck(
            seq=seq,
            recorded=record.view_hash,
            computed=combine_view_hash(record.request_digest, digest),
        )
    engine = engines.get(status.settings)
    if engine is None:
        engine = engines[status.settings] = ContextEngine(status.settings)
    try:
        view = engine.project(state, budget=status.budget)
    except ContextBudgetError as e:
        return ReplayCheck(
            seq=seq, recorded=record.view_hash, computed=None, level=status.level, problem=str(e)
        )
    return ReplayCheck(
        seq=seq,
        recorded=record.view_hash,
        computed=combine_view_hash(record.request_digest, view.digest),
        level=view.level,
        tokens=view.tokens_after,
    )
