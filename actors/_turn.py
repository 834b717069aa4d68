"""The turn loop of one session, run on its SessionActor's thread.

project the view → stream the model → append the assistant message → run the tools → append
their results with their file snapshots in one atomic append → repeat until the model ends the
turn or ``max_turns``. Every append is conditional on the session's position, so if another
process advanced the log, the append raises ``CheckpointConflictError`` and nothing is
overwritten.

A turn never leaves the session unusable. Whatever stops it — a provider error, a cancellation,
the budget, a failing tool, middleware, planner or store, any exception at all — is recorded as
a turn-aborted event (with synthetic "interrupted" results for dangling tool calls) whose notice
closes the turn in the conversation, so the next prompt starts a turn of its own, and the log
still folds. The caller gets a :class:`~liteagent.eventlog.errors.LiteAgentError`: liteagent's own
errors as they are, anything else as :class:`TurnFailedError` with the original as its cause.
What the model returned is stored losslessly even when it holds values the log cannot store
natively (see :func:`liteagent.eventlog.message_from_dict`); such a tool call is not run and
gets an error result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pykka

from liteagent.context import (
    ContextBudgetError,
    ContextOptions,
    ContextView,
    estimate_tokens,
    request_digest,
)
from liteagent.context._tokens import request_overhead_tokens
from liteagent.context._view import ConversationView
from liteagent.context._viewhash import combine_view_hash, message_digest, messages_digest
from liteagent.eventlog import CancelToken, Checkpointer, SessionState
from liteagent.eventlog._lease import check_lease_fresh
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog._messages import merge_adjacent, message_text
from liteagent.eventlog.errors import (
    CodecError,
    InvalidArgumentError,
    LiteAgentError,
    OperationCancelledError,
)
from liteagent.eventlog.types import (
    AssistantMessage,
    Compaction,
    ContextEdit,
    Event,
    ModelRequestRecord,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnAborted,
    Usage,
    UserPrompt,
)
from liteagent.eventlog.types import Message as ConvMessage
from liteagent.providers import ContextOverflowError, ModelProvider
from liteagent.providers._contract import ModelRequest, ModelResponse, ResponseComplete, ToolSchema
from liteagent.tools import Tool, ToolContext, ToolOutput
from liteagent.tools._contract import BackgroundStarter

from ._background import started as background_started
from ._context import LogArchiveReader, SessionContext
from ._gate import held
from ._hub import EventHub, LiveEvent
from ._live import ToolCallFinished, ToolCallStarted, TurnFailed, TurnFinished
from ._restore_plan import InterruptedRestoreError
from ._turn_log import SessionLog
from ._turn_tools import (
    answerable,
    describe_error,
    interrupted_results,
    run_one,
    safe_text,
    storable_reply,
    takes_cancel,
)

__all__ = ["LiteAgentResult", "Middleware", "SessionConfig", "SessionCore", "TurnFailedError"]

_log = get_logger("liteagent.session")


class TurnFailedError(LiteAgentError):
    """Raised when a turn stopped on an exception that is not one of liteagent's own (from a
    provider, a tool wrapper, middleware, a planner, ...): the original exception is its
    ``__cause__``. The log records the aborted turn, and the next ``send`` continues."""


class Middleware(Protocol):
    """Model-call middleware: either hook may be absent (checked with ``getattr``).

    - ``before_model(request, state) -> ModelRequest`` rewrites the request (it also gets the
      turn's ``cancel=`` token when it takes that keyword);
    - ``wrap_model_call(request, call) -> ModelResponse`` wraps the call (retry, trim, ...).
    """


class LiteAgentResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``send`` returns: ``text`` (the model's last text), the new ``messages``, ``usage``,
    ``stop_reason`` and the ``session_id``."""

    session_id: str
    text: str
    messages: tuple[ConvMessage, ...]
    usage: Usage
    stop_reason: str | None


@dataclass
class SessionConfig:
    """Everything a session needs besides its id (shared by the sessions of one agent)."""

    checkpointer: Checkpointer
    provider: ModelProvider
    model_name: str
    workdir: Path
    tools: Sequence[Tool] = ()
    system_prompt: str | None = None
    max_turns: int = 50
    max_tokens: int = 8192
    middleware: Sequence[Any] = ()
    hub: EventHub = field(default_factory=EventHub)
    snapshot_ref: pykka.ActorRef[Any] | None = None
    context: ContextOptions | None = None
    # called on the session's thread when a send ends, with the log's (head, generation) as
    # this session last wrote or read it (None when it must fold the log again first)
    on_turn_end: Callable[[str, tuple[int, int] | None], None] | None = None
    _schemas: tuple[ToolSchema, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def tool_schemas(self) -> tuple[ToolSchema, ...]:
        """The tools' schemas as requests carry them, built once for every session (a
        ``FunctionTool`` copies its schema on each read, which costs more than a short turn's
        fold)."""
        schemas = self._schemas
        if schemas is None:
            schemas = self._schemas = tuple(
                ToolSchema(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in self.tools
            )
        return schemas


class SessionCore(SessionLog):
    """One session's folded state and its turn loop (used only from its actor's thread)."""

    def __init__(self, session_id: str, config: SessionConfig) -> None:
        super().__init__(session_id, config.checkpointer, _log.bind(session_id=session_id))
        self.config = config
        self.view = ConversationView()
        self.context: SessionContext | None = None
        self._tool_schemas = config.tool_schemas()
        self._before: list[tuple[Callable[..., ModelRequest], bool]] = []
        self._ids: tuple[int, int, set[str]] = (0, 0, set())  # see _tool_ids
        self._wraps: list[Callable[..., ModelResponse]] = []
        for mw in config.middleware:
            hook = getattr(mw, "before_model", None)
            if hook is not None:
                self._before.append((hook, takes_cancel(hook)))
            wrap = getattr(mw, "wrap_model_call", None)
            if wrap is not None:
                self._wraps.append(wrap)
        self._reset_context()

    def _reset_context(self) -> None:
        c = self.config
        if c.context is not None:
            self.context = SessionContext(
                c.context,
                provider=c.provider,
                max_tokens=c.max_tokens,
                system=c.system_prompt,
                tools=self._tool_schemas,
                model_name=c.model_name,
            )

    def append(self, events: Sequence[Event]) -> None:
        """Append ``events`` (see :meth:`SessionLog.append`); with the engine on, a compaction
        whose first prompt alone is over the budget is refused first
        (:meth:`SessionContext.check_compaction`: it would fail every later request)."""
        if self.context is not None:
            for event in events:
                if type(event) is Compaction:
                    self.context.check_compaction(event)
        super().append(events)

    def load(self) -> None:
        """Fold the session's log (resuming after a restart, a passivation or a conflict) and
        start the views over."""
        super().load()
        self.view.reset()
        self._reset_context()
        if self.context is not None:
            self.context.resume(self.state)

    # -- a turn ---------------------------------------------------------------------------------

    def send(
        self, text: str, cancel: CancelToken, start_background: BackgroundStarter | None
    ) -> LiteAgentResult:
        """Run one user prompt to the end of the model's turn (module docstring).

        Raises before anything is written: :class:`InvalidArgumentError` for a prompt that is
        not a str holding non-whitespace text (or that holds a surrogate code point),
        :class:`InterruptedRestoreError`, :class:`OperationCancelledError` when ``cancel``
        already fired, and :class:`ContextBudgetError` for a first prompt that could never fit
        the context budget."""
        if type(text) is not str or not text.strip():
            raise InvalidArgumentError("a prompt must be a str with non-whitespace text")
        if safe_text(text) != text:
            raise InvalidArgumentError("the prompt holds a surrogate code point (not text)")
        try:
            first_entry = self._start(text, cancel)
        except LiteAgentError:
            raise
        except BaseException as e:  # the turn did not start: nothing of it was written
            raise TurnFailedError(f"the turn could not start: {describe_error(e)}") from e
        try:
            return self._turn(first_entry, cancel, start_background)
        except BaseException as e:
            self._abort(e)
            if isinstance(e, LiteAgentError):
                raise
            raise TurnFailedError(f"the turn failed: {describe_error(e)}") from e

    def _start(self, text: str, cancel: CancelToken) -> int:
        """Append the prompt (after what closes a turn a crash cut short); return the index of
        its conversation entry. When the append fails after writing after all, the turn it
        started is closed with an abort record before the error is raised."""
        with held():  # the CPU gate (see _gate.py): the fold and the checks
            if not self.loaded:
                self.load()
            if self.state.pending_restore is not None:
                raise InterruptedRestoreError(
                    f"session {self.session_id!r} has an interrupted restore (started at seq "
                    f"{self.state.pending_restore[0]}): call finish_restore() or "
                    "rollback_restore()"
                )
            cancel.raise_if_cancelled()
            prompt = UserPrompt(content=(TextBlock(text),))
            if self.context is not None:
                self.context.check_first_prompt(self.state, ConvMessage("user", prompt.content))
            before: list[Event] = []
            if self.state.head == 0:
                before.append(
                    SessionStarted(
                        workdir=str(self.config.workdir),
                        model=self.config.model_name,
                        system_prompt=self.config.system_prompt,
                    )
                )
            before.extend(self.interrupted_turn())  # a turn cut short (crash, kill)
            before.extend(self.lost_background())  # tasks whose process is gone
        try:
            self.append([*before, prompt])
        except BaseException as e:
            if self.failed_with(prompt):
                self._abort(e, started=False)
            raise
        return len(self.state.entries) - 1  # the prompt's entry

    def _turn(
        self, first_entry: int, cancel: CancelToken, start_background: BackgroundStarter | None
    ) -> LiteAgentResult:
        usage = Usage()
        stop_reason: str | None = None
        for _ in range(self.config.max_turns):
            cancel.raise_if_cancelled()
            message = self._model_turn(cancel)
            usage = usage + message.usage
            stop_reason = message.stop_reason
            calls = [b for b in message.content if type(b) is ToolUseBlock]
            if not calls:
                break
            self._run_tools(calls, cancel, start_background)
        else:
            stop_reason = "max_turns"
        new = conversation_since(self.state, first_entry)
        last_text = next(
            (message_text(m.content) for m in reversed(new) if m.role == "assistant"), ""
        )
        if self.state.turn_open:  # stopped by max_turns with tool results unanswered
            self.append(
                [
                    TurnAborted(
                        reason="max_turns",
                        notice=f"[liteagent: the turn stopped after "
                        f"max_turns={self.config.max_turns} "
                        "model calls]",
                    )
                ]
            )
        self.config.hub.publish(LiveEvent(self.session_id, TurnFinished(stop_reason)))
        return LiteAgentResult(
            session_id=self.session_id,
            text=last_text,
            messages=tuple(new),
            usage=usage,
            stop_reason=stop_reason,
        )

    def settings_budget(self) -> int:
        """The configured budget of the engine's views (0 with the engine off)."""
        return 0 if self.context is None else self.context.settings.budget_tokens

    def _request(self, budget: int | None = None) -> tuple[ModelRequest, ContextView | None]:
        """The request to send now: the engine's view of the log (with ``budget``, when given),
        or the raw folded conversation when context management is off."""
        view: ContextView | None = None
        edits: tuple[ContextEdit, ...] = ()
        with held():
            if self.context is not None:
                view = self.context.project(self.state, budget)
                messages = view.messages
                edits = self.context.edits(view)
            else:
                messages = self.view.sync(self.state)
        request = ModelRequest(
            model=self.config.model_name,
            messages=messages,
            system=self.config.system_prompt,
            tools=self._tool_schemas,
            max_tokens=self.config.max_tokens,
            context_edits=edits,
        )
        return request, view

    def _model_turn(self, cancel: CancelToken) -> AssistantMessage:
        """One model call; returns the assistant message as it was recorded. The projections
        and what is recorded are built holding the CPU gate; the planner, the model call and
        the appends run outside it."""
        request, view = self._request()
        level: str | None = None
        notes: list[str] = []
        if view is not None and view.budget < self.settings_budget():
            notes.append(
                f"recover: projected within {view.budget} tokens, the budget an earlier "
                "context overflow left"
            )
        if view is not None and self.context is not None:
            compaction, note = self.context.plan(view, self.state, cancel)
            notes += [note] if note else []
            if compaction is not None:
                try:
                    self.append([compaction])
                except CodecError as e:  # a summary holding what the log cannot store
                    notes.append(
                        f"project: the summary could not be stored ({e}); kept the selected view"
                    )
                else:
                    request, view = self._request()
                    level = "project"
        sent: list[ModelRequest] = []
        try:
            response = self._call(request, sent, cancel)
        except ContextOverflowError as e:
            budget = (
                None
                if view is None or self.context is None
                else self.context.recover_budget(view, e, self.config.max_tokens)
            )
            if budget is None or view is None:
                raise
            try:
                retry, smaller = self._request(budget)
            except ContextBudgetError:
                raise e from None  # nothing left to cut: the provider's error stands
            if smaller is None or (
                smaller.digest == view.digest and retry.context_edits == request.context_edits
            ):  # the same request again (a smaller one may differ in its edits alone)
                raise
            notes.append(
                f"recover: the provider reported a context overflow ({e}); "
                f"projected again within {budget} tokens"
            )
            request, view = retry, smaller
            level = "recover"
            response = self._call(request, sent, cancel)
        if view is not None and self.context is not None:
            self.context.answered(view)
        return self._record(sent[-1] if sent else request, view, level, notes, response)

    def _record(
        self,
        final: ModelRequest,
        view: ContextView | None,
        level: str | None,
        notes: Sequence[str],
        response: ModelResponse,
    ) -> AssistantMessage:
        """Append what the model was shown (and why) with its answer, in one append; return the
        answer as recorded (its storable form when it held values the log cannot store)."""
        with held():
            events = self._request_record(final, view, level, notes, response)
            seen = self._tool_ids()
            message = answerable(response.message, seen, self.state.head)  # (adds its ids)
        try:
            self.append([*events, message])
        except CodecError:
            stored = storable_reply(message)  # the same answer, in the form the log can hold
            mine = {b.id for b in message.content if type(b) is ToolUseBlock}
            stored = answerable(stored, seen - mine, self.state.head)
            if stored == message:
                raise
            self.log.warning("turn.reply_stored_losslessly")
            self.append([*events, stored])
            message = stored
        return message

    def _tool_ids(self) -> set[str]:
        """The ids of every tool call in the conversation (kept up to date as it grows; made
        again when the log was cut back or replaced)."""
        entries = self.state.entries
        upto, last, ids = self._ids
        if upto > len(entries) or (upto and entries[upto - 1].seq != last):
            upto, ids = 0, set()
        for i in range(upto, len(entries)):
            for b in entries[i].message.content:
                if type(b) is ToolUseBlock:
                    ids.add(b.id)
        self._ids = (len(entries), entries[-1].seq if len(entries) else 0, ids)
        return ids

    def _request_record(
        self,
        final: ModelRequest,
        view: ContextView | None,
        level: str | None,
        notes: Sequence[str],
        response: ModelResponse,
    ) -> list[Event]:
        """What the model was shown (and why): the context status and the request record."""
        events: list[Event] = []
        if view is not None and self.context is not None:
            events.append(self.context.status(view, level, [safe_text(n) for n in notes]))
            digest = (
                view.digest
                if final.messages is view.messages
                else messages_digest(message_digest(m) for m in final.messages)
            )
            estimate = view.tokens_after
        elif final.messages is self.view.sync(self.state):  # unchanged by middleware: cached
            digest = self.view.messages_digest()
            estimate = self.view.total_tokens + request_overhead_tokens(final.system, final.tools)
        else:
            digest = messages_digest(message_digest(m) for m in final.messages)
            estimate = estimate_tokens(final.messages) + request_overhead_tokens(
                final.system, final.tools
            )
        head = request_digest(final)
        edits = tuple(
            safe_text(
                f"{e.type}: {e.cleared_tool_uses or 0} tool use(s), "
                f"{e.cleared_thinking_turns or 0} thinking turn(s), "
                f"{e.cleared_input_tokens or 0} input tokens"
            )
            for e in response.applied_edits
        )
        events.append(
            ModelRequestRecord(
                view_hash=combine_view_hash(head, digest),
                token_estimate=estimate,
                model=final.model,
                request_digest=head,
                native_edits=edits,
            )
        )
        return events

    def _call(
        self, request: ModelRequest, sent: list[ModelRequest], cancel: CancelToken
    ) -> ModelResponse:
        """Run the middleware and the model call for ``request``."""
        for hook, with_cancel in self._before:
            request = (
                hook(request, self.state, cancel=cancel)
                if with_cancel
                else hook(request, self.state)
            )

        def call(req: ModelRequest) -> ModelResponse:
            sent.append(req)
            response: ModelResponse | None = None
            for event in self.config.provider.stream(req, cancel=cancel):
                if isinstance(event, ResponseComplete):
                    response = event.response
                else:
                    self.config.hub.publish(LiveEvent(self.session_id, event))
            if response is None:
                raise OperationCancelledError("the model call ended without a response")
            return response

        chain: Callable[[ModelRequest], ModelResponse] = call
        for wrap in reversed(self._wraps):
            chain = _bind(wrap, chain)
        return chain(request)

    def _run_tools(
        self,
        calls: Sequence[ToolUseBlock],
        cancel: CancelToken,
        start_background: BackgroundStarter | None,
    ) -> None:
        events: list[Event] = []
        starts: list[Event] = []  # the background tasks the calls start
        results: list[Event] = []
        by_name = {t.name: t for t in self.config.tools}
        blobs = self.config.checkpointer.blobs
        reader = LogArchiveReader(lambda: self.state, blobs)
        for i, call in enumerate(calls):
            if cancel.cancelled:
                results.extend(interrupted_results(calls[i:], cancel.reason or "cancelled"))
                break
            if self.lease is not None:  # no tool runs once another may hold the session
                check_lease_fresh(self.lease)
            ctx = ToolContext(
                self.config.workdir,
                self.session_id,
                call.id,
                cancel,
                None if start_background is None else _recorded(start_background, call, starts),
                archive=reader,
            )
            self.config.hub.publish(LiveEvent(self.session_id, ToolCallStarted(call.id, call.name)))
            output, snaps, untracked = run_one(
                by_name.get(call.name),
                call,
                ctx,
                log=self.log,
                snapshot_ref=self.config.snapshot_ref,
                workdir=self.config.workdir,
            )
            events.extend(snaps)
            results.append(
                ToolResult(
                    block=ToolResultBlock(call.id, output.content, is_error=output.is_error),
                    tool_name=call.name,
                    untracked=untracked,
                )
            )
            self.config.hub.publish(
                LiveEvent(self.session_id, ToolCallFinished(call.id, call.name, output.is_error))
            )
        archived: list[Event] = []
        if self.context is not None:
            archived.extend(
                self.context.archive([r for r in results if isinstance(r, ToolResult)], blobs)
            )
        self.append([*events, *starts, *results, *archived])
        cancel.raise_if_cancelled()

    def _abort(self, error: BaseException, *, started: bool = True) -> None:
        """Publish the failure and record the aborted turn (see :meth:`SessionLog.record_abort`)."""
        reason = describe_error(error)
        try:
            self.config.hub.publish(LiveEvent(self.session_id, TurnFailed(reason)))
        except Exception as e:  # noqa: BLE001 -- the record matters more than the live event
            self.log.warning("turn.failed_not_published", error=repr(e))
        self.record_abort(error, reason, started=started)


def _recorded(
    start: BackgroundStarter, call: ToolUseBlock, starts: list[Event]
) -> BackgroundStarter:
    """``start``, noting in ``starts`` the record of each task it starts for ``call``."""

    def starter(description: str, work: Callable[[CancelToken], ToolOutput]) -> str:
        task_id = start(description, work)
        starts.append(background_started(task_id, call.id, description))
        return task_id

    return starter


def _bind(
    wrap: Callable[[ModelRequest, Callable[[ModelRequest], ModelResponse]], ModelResponse],
    call: Callable[[ModelRequest], ModelResponse],
) -> Callable[[ModelRequest], ModelResponse]:
    return lambda req: wrap(req, call)


def conversation_since(state: SessionState, first_entry: int) -> list[ConvMessage]:
    """The messages the entries from ``first_entry`` on contribute (not merged across the
    boundary)."""
    return merge_adjacent(entry.message for entry in state.entries[first_entry:])
