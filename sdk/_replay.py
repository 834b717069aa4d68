"""Recomputing what the model saw from a session's log, and checking it against the record.

Every model call appends a :class:`~liteagent.eventlog.types.ModelRequestRecord` holding
:func:`~liteagent.context.view_hash` of the request it sent and ``request_digest``, the hash of
the request without its messages. The messages are a pure function of the log before that
record (the folded conversation, with the latest compaction applied, as
:class:`~liteagent.context.ConversationView` projects it), so a record is checked on its
messages alone: the view hash is recombined from the recorded digest and the messages
re-projected from the log, whatever the configuration. A record without a request digest
cannot be checked: its check fails, and its ``problem`` says why.

The configuration the caller passes (the tool schemas and ``max_tokens`` are not in the log;
the CLI's are the defaults) rebuilds the whole request: for :func:`request_at`, and to tell
whether the record's request digest is that of this configuration (``request_matches``).

:func:`verify_session` uses the ContextEngine's :func:`~liteagent.context.verify_replay` (it
re-projects engine views with the recorded settings). :func:`request_at` likewise projects with
the engine when the record was engine-projected.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import msgspec

from liteagent.context import ContextEngine, request_digest, verify_replay
from liteagent.context._replay import NO_DIGEST
from liteagent.context._tokens import request_overhead_tokens
from liteagent.context._view import ConversationView
from liteagent.context._viewhash import combine_view_hash
from liteagent.eventlog import SessionState, StoredEvent, apply
from liteagent.eventlog.types import ContextStatus, ModelRequestRecord
from liteagent.providers._contract import ModelRequest, ToolSchema
from liteagent.tools import Tool

__all__ = [
    "RequestCheck",
    "ViewConfig",
    "iter_requests",
    "request_at",
    "verify_requests",
    "verify_session",
]


class ViewConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What a request holds besides the log: the tool schemas and ``max_tokens``. ``model``
    and ``system`` override the record's model and the session's system prompt when given."""

    tools: tuple[ToolSchema, ...] = ()
    max_tokens: int = 8192
    model: str | None = None
    system: str | None = None

    @staticmethod
    def of_tools(tools: Sequence[Tool], max_tokens: int = 8192) -> ViewConfig:
        """The configuration of an agent with ``tools`` (as the session actor builds it)."""
        return ViewConfig(
            tools=tuple(
                ToolSchema(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in tools
            ),
            max_tokens=max_tokens,
        )


class RequestCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request checked against the log: the record's ``seq``, the hash it recorded
    and the one recomputed (empty when it could not be: ``problem`` says why), and the token
    estimates of both."""

    seq: int
    recorded: str
    computed: str
    recorded_tokens: int
    computed_tokens: int
    messages: int
    request_matches: bool | None = None  # the record's request digest vs. the config's
    level: str = "raw"
    problem: str = ""

    @property
    def ok(self) -> bool:
        """Whether the recomputed hash is the recorded one."""
        return self.recorded == self.computed


def _request(
    state: SessionState, view: ConversationView, config: ViewConfig, model: str | None
) -> ModelRequest:
    system = config.system
    if system is None and state.started is not None:
        system = state.started.system_prompt
    name = config.model or model or (state.started.model if state.started else "")
    return ModelRequest(
        model=name,
        messages=view.sync(state),
        system=system,
        tools=config.tools,
        max_tokens=config.max_tokens,
    )


def iter_requests(
    events: Iterable[StoredEvent], config: ViewConfig
) -> Iterator[tuple[StoredEvent, ModelRequest, RequestCheck]]:
    """For every model-request record of ``events`` (a whole log, in order): the record, the
    request rebuilt from the log before it, and the check of its hash. O(events)."""
    state = SessionState()
    view = ConversationView()
    for event in events:
        body = event.body
        if isinstance(body, ModelRequestRecord):
            request = _request(state, view, config, body.model)
            head = body.request_digest
            computed, matches, problem = "", None, NO_DIGEST  # no digest: nothing to check
            if head is not None:
                computed = combine_view_hash(head, view.messages_digest())
                matches, problem = head == request_digest(request), ""
            yield (
                event,
                request,
                RequestCheck(
                    seq=event.seq,
                    recorded=body.view_hash,
                    computed=computed,
                    recorded_tokens=body.token_estimate,
                    computed_tokens=view.total_tokens
                    + request_overhead_tokens(request.system, request.tools),
                    messages=len(request.messages),
                    request_matches=matches,
                    problem=problem,
                ),
            )
        state = apply(state, event)


def verify_requests(events: Iterable[StoredEvent], config: ViewConfig) -> list[RequestCheck]:
    """Check every recorded request of ``events`` (see the module docstring)."""
    return [check for _, _, check in iter_requests(events, config)]


def request_at(
    events: Iterable[StoredEvent], seq: int, config: ViewConfig
) -> tuple[ModelRequest, ModelRequestRecord | None]:
    """The request the model saw at ``seq``: if the event at ``seq`` is a model-request record,
    the request rebuilt from the log before it (and that record) — projected by a ContextEngine
    with the recorded settings when a context status precedes it; otherwise the raw request a
    model call would have been sent with the log up to ``seq`` (and None)."""
    state = SessionState()
    view = ConversationView()
    status: ContextStatus | None = None
    for event in events:
        body = event.body
        if event.seq == seq and isinstance(body, ModelRequestRecord):
            request = _request(state, view, config, body.model)
            if status is not None and status.settings is not None:
                projected = ContextEngine(status.settings).project(state, budget=status.budget)
                request = msgspec.structs.replace(request, messages=projected.messages)
            return request, body
        if event.seq > seq:
            break
        if isinstance(body, ContextStatus):
            status = body
        elif isinstance(body, ModelRequestRecord):
            status = None
        state = apply(state, event)
    return _request(state, view, config, None), None


def verify_session(events: Sequence[StoredEvent], config: ViewConfig) -> list[RequestCheck]:
    """Check every recorded request with ``verify_replay``, with the counts and the request
    check of :func:`verify_requests` (``config``) beside each."""
    raw = {c.seq: c for c in verify_requests(events, config)}
    checks = []
    for c in verify_replay(events).checks:
        mine = raw[c.seq]
        checks.append(
            msgspec.structs.replace(
                mine,
                computed=c.computed or "",
                level=c.level,
                problem=c.problem,
                computed_tokens=mine.computed_tokens if c.tokens is None else c.tokens,
            )
        )
    return checks
