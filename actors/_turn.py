"""The turn loop of one session, run on its SessionActor's thread.

project the view → stream the model → append the assistant message → run the tools → append
their results with their file snapshots in one atomic append → repeat until the model ends the
turn or ``max_turns``. Every append is conditional on the session's position, so if another
process advanced the log, the append raises ``CheckpointConflictError`` and nothing is
overwritten. A provider error or a cancellation appends a turn-aborted record plus synthetic
"interrupted" results for dangling tool calls, so the next ``send`` can continue the session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pykka
import structlog

from liteagent.context import (
    ContextBudgetError,
    ContextOptions,
    ContextView,
    combine_view_hash,
    estimate_tokens,
    message_digest,
    messages_digest,
    request_digest,
    request_overhead_tokens,
)
from liteagent.eventlog import (
    CancelToken,
    CheckpointConflictError,
    Checkpointer,
    ContextEdit,
    Event,
    ModelRequestRecord,
    OperationCancelledError,
    SessionStarted,
    SessionState,
    StoredEvent,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnAborted,
    Usage,
    UserPrompt,
    apply_all,
    fold,
    kind_of,
    message_text,
)
from liteagent.eventlog import Message as ConvMessage
from liteagent.providers import (
    ContextOverflowError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ResponseComplete,
    ToolSchema,
)
from liteagent.tools import BackgroundStarter, Tool, ToolContext, ToolOutput

from ._context import LogArchiveReader, SessionContext
from ._envelope import ask
from ._hub import EventHub, LiveEvent
from ._live import ToolCallFinished, ToolCallStarted, TurnFailed, TurnFinished
from ._restore_plan import InterruptedRestoreError
from ._snapshots import PostHashes, PreImage, PreImages, snapshot_event
from ._view import ConversationView

__all__ = ["Middleware", "SessionConfig", "SessionCore", "TurnResult"]

_log = structlog.get_logger("liteagent.session")
_SNAPSHOT_TIMEOUT = 120.0


class Middleware(Protocol):
    """Model-call middleware: either hook may be absent (checked with ``getattr``).

    - ``before_model(request, state) -> ModelRequest`` rewrites the request;
    - ``wrap_model_call(request, call) -> ModelResponse`` wraps the call (retry, trim, ...).
    """


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``send`` produced: the final text, the new messages, usage and stop reason."""

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


class SessionCore:
    """One session's folded state and its turn loop (used only from its actor's thread)."""

    def __init__(self, session_id: str, config: SessionConfig) -> None:
        self.session_id = session_id
        self.config = config
        self.log = _log.bind(session_id=session_id)
        self.state = SessionState()
        self.generation = 0
        self.loaded = False
        self.view = ConversationView()
        self.context: SessionContext | None = None
        self._tool_schemas = tuple(
            ToolSchema(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in config.tools)
        self._reset_context()

    def _reset_context(self) -> None:
        c = self.config
        if c.context is not None:
            self.context = SessionContext(c.context, provider=c.provider,
                                          max_tokens=c.max_tokens, system=c.system_prompt,
                                          tools=self._tool_schemas, model_name=c.model_name)

    # -- the log ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Fold the session's log (resuming after a restart, a passivation or a conflict)."""
        cp = self.config.checkpointer
        head, generation = cp.position(self.session_id)
        state = fold(cp.read(self.session_id))
        if state.head != head:  # appended meanwhile: read on to a consistent position
            head, generation = cp.position(self.session_id)
            state = fold(cp.read(self.session_id, state.head), state)
        self.state, self.generation, self.loaded = state, generation, True
        self.view.reset()
        self._reset_context()

    def append(self, events: Sequence[Event]) -> None:
        """Append ``events`` atomically at the session's known position and apply them."""
        cp = self.config.checkpointer
        expected_generation = self.generation if self.state.head else None
        ts = time.time()
        try:
            head = cp.append(
                self.session_id,
                events,
                expected_head=self.state.head,
                expected_generation=expected_generation,
                ts=ts,
            )
        except CheckpointConflictError:
            self.loaded = False  # another writer advanced the log: refold before the next turn
            raise
        first = head - len(events) + 1
        new = [
            StoredEvent(seq, ts, kind_of(e), e)
            for seq, e in zip(range(first, head + 1), events, strict=True)
        ]
        self.state = apply_all(self.state, new)
        if not self.generation:
            self.generation = cp.position(self.session_id).generation

    # -- a turn ---------------------------------------------------------------------------------

    def send(
        self, text: str, cancel: CancelToken, start_background: BackgroundStarter | None
    ) -> TurnResult:
        """Run one user prompt to the end of the model's turn."""
        if not self.loaded:
            self.load()
        if self.state.pending_restore is not None:
            raise InterruptedRestoreError(
                f"session {self.session_id!r} has an interrupted restore (started at seq "
                f"{self.state.pending_restore[0]}): call finish_restore() or rollback_restore()")
        cancel.raise_if_cancelled()
        first_entry = len(self.state.entries)
        before: list[Event] = []
        if self.state.head == 0:
            before.append(SessionStarted(workdir=str(self.config.workdir),
                                         model=self.config.model_name,
                                         system_prompt=self.config.system_prompt))
        if self.state.open_tool_calls:  # a turn cut short (crash, kill): close its calls
            before.extend(self._interrupted("the previous turn was interrupted"))
        self.append([*before, UserPrompt(content=(TextBlock(text),))])
        usage = Usage()
        stop_reason: str | None = None
        try:
            for _ in range(self.config.max_turns):
                cancel.raise_if_cancelled()
                response = self._model_turn(cancel)
                message = response.message
                usage = usage + message.usage
                stop_reason = message.stop_reason
                calls = [b for b in message.content if type(b) is ToolUseBlock]
                if not calls:
                    break
                self._run_tools(calls, cancel, start_background)
            else:
                stop_reason = "max_turns"
        except (ProviderError, OperationCancelledError, ContextBudgetError) as e:
            self._abort(e)
            raise
        self.config.hub.publish(LiveEvent(self.session_id, TurnFinished(stop_reason)))
        new = conversation_since(self.state, first_entry)
        last_text = next(
            (message_text(m.content) for m in reversed(new) if m.role == "assistant"), ""
        )
        return TurnResult(session_id=self.session_id, text=last_text, messages=tuple(new),
                          usage=usage, stop_reason=stop_reason)

    def _request(self, budget: int | None = None) -> tuple[ModelRequest, ContextView | None]:
        """The request to send now: the engine's view of the log (with ``budget``, when given),
        or the raw folded conversation when context management is off."""
        view: ContextView | None = None
        edits: tuple[ContextEdit, ...] = ()
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

    def _model_turn(self, cancel: CancelToken) -> ModelResponse:
        request, view = self._request()
        level: str | None = None
        notes: list[str] = []
        if view is not None and self.context is not None:
            compaction, note = self.context.plan(view, self.state, cancel)
            notes += [note] if note else []
            if compaction is not None:
                self.append([compaction])
                request, view = self._request()
                level = "project"
        sent: list[ModelRequest] = []
        try:
            response = self._call(request, sent, cancel)
        except ContextOverflowError as e:
            budget = (None if view is None or self.context is None
                      else self.context.recover_budget(view, e, self.config.max_tokens))
            if budget is None or view is None:
                raise
            try:
                retry, smaller = self._request(budget)
            except ContextBudgetError:
                raise e from None  # nothing left to cut: the provider's error stands
            if smaller is None or smaller.digest == view.digest:
                raise
            notes.append(f"recover: the provider reported a context overflow ({e}); "
                         f"projected again within {budget} tokens")
            request, view = retry, smaller
            level = "recover"
            response = self._call(request, sent, cancel)
        self._record(sent[-1] if sent else request, view, level, notes, response)
        return response

    def _record(self, final: ModelRequest, view: ContextView | None, level: str | None,
                notes: Sequence[str], response: ModelResponse) -> None:
        """Append what the model was shown (and why) with its answer, in one append."""
        events: list[Event] = []
        if view is not None and self.context is not None:
            events.append(self.context.status(view, level, notes))
            digest = (view.digest if final.messages is view.messages
                      else messages_digest(message_digest(m) for m in final.messages))
            estimate = view.tokens_after
        elif final.messages is self.view.sync(self.state):  # unchanged by middleware: cached
            digest = self.view.messages_digest()
            estimate = self.view.total_tokens + request_overhead_tokens(final.system, final.tools)
        else:
            digest = messages_digest(message_digest(m) for m in final.messages)
            estimate = (estimate_tokens(final.messages)
                        + request_overhead_tokens(final.system, final.tools))
        head = request_digest(final)
        edits = tuple(
            f"{e.type}: {e.cleared_tool_uses or 0} tool use(s), "
            f"{e.cleared_thinking_turns or 0} thinking turn(s), "
            f"{e.cleared_input_tokens or 0} input tokens" for e in response.applied_edits)
        events.append(ModelRequestRecord(
            view_hash=combine_view_hash(head, digest), token_estimate=estimate,
            model=final.model, request_digest=head, native_edits=edits))
        events.append(response.message)
        self.append(events)

    def _call(self, request: ModelRequest, sent: list[ModelRequest],
              cancel: CancelToken) -> ModelResponse:
        """Run the middleware and the model call for ``request``."""
        for mw in self.config.middleware:
            hook = getattr(mw, "before_model", None)
            if hook is not None:
                request = hook(request, self.state)

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
        for mw in reversed(self.config.middleware):
            wrap = getattr(mw, "wrap_model_call", None)
            if wrap is not None:
                chain = _bind(wrap, chain)
        return chain(request)

    def _run_tools(
        self,
        calls: Sequence[ToolUseBlock],
        cancel: CancelToken,
        start_background: BackgroundStarter | None,
    ) -> None:
        events: list[Event] = []
        results: list[Event] = []
        by_name = {t.name: t for t in self.config.tools}
        blobs = self.config.checkpointer.blobs
        reader = LogArchiveReader(lambda: self.state, blobs)
        for i, call in enumerate(calls):
            if cancel.cancelled:
                results.extend(_interrupted_results(calls[i:], cancel.reason or "cancelled"))
                break
            ctx = ToolContext(self.config.workdir, self.session_id, call.id, cancel,
                              start_background, archive=reader)
            self.config.hub.publish(LiveEvent(self.session_id, ToolCallStarted(call.id,
                                                                                call.name)))
            output, snaps = self._run_one(by_name.get(call.name), call, ctx)
            events.extend(snaps)
            results.append(ToolResult(
                block=ToolResultBlock(call.id, output.content, is_error=output.is_error),
                tool_name=call.name,
            ))
            self.config.hub.publish(LiveEvent(
                self.session_id, ToolCallFinished(call.id, call.name, output.is_error)))
        archived: list[Event] = []
        if self.context is not None:
            archived.extend(self.context.archive(
                [r for r in results if isinstance(r, ToolResult)], blobs))
        self.append([*events, *results, *archived])
        cancel.raise_if_cancelled()

    def _run_one(
        self, tool: Tool | None, call: ToolUseBlock, ctx: ToolContext
    ) -> tuple[ToolOutput, list[Event]]:
        if tool is None:
            return ToolOutput(f"unknown tool {call.name!r}", is_error=True), []
        try:
            paths = [str(p) for p in tool.changed_paths(call.input, ctx)]
        except Exception as e:  # noqa: BLE001 -- a bad input is the model's error to read
            return ToolOutput(f"{type(e).__name__}: {e}", is_error=True), []
        pre: list[PreImage] = []
        if paths and self.config.snapshot_ref is not None:
            pre = ask(self.config.snapshot_ref, PreImages(tuple(paths)),
                      timeout=_SNAPSHOT_TIMEOUT)
        try:
            output = tool.run(call.input, ctx)
        except Exception as e:  # noqa: BLE001 -- a failing tool is a result, not a crash
            self.log.warning("tool.failed", tool=call.name, error=repr(e))
            output = ToolOutput(f"the tool failed: {type(e).__name__}: {e}", is_error=True)
        snaps: list[Event] = []
        if pre and self.config.snapshot_ref is not None:
            post = ask(self.config.snapshot_ref, PostHashes(tuple(paths)),
                       timeout=_SNAPSHOT_TIMEOUT)
            snaps = [snapshot_event(p, h, call.id, self.config.workdir)
                     for p, h in zip(pre, post, strict=True)]
        return output, snaps

    def _interrupted(self, reason: str) -> list[Event]:
        calls = [ToolUseBlock(c, "", {}) for c in self.state.open_tool_calls]
        return [*_interrupted_results(calls, reason), TurnAborted(reason=reason)]

    def _abort(self, error: BaseException) -> None:
        reason = f"{type(error).__name__}: {error}"
        self.config.hub.publish(LiveEvent(self.session_id, TurnFailed(reason)))
        try:
            events = self._interrupted(reason)
            if not self.state.open_tool_calls:
                events = [TurnAborted(reason=reason)]
            self.append(events)
        except Exception as e:  # noqa: BLE001 -- the original error is what the caller sees
            self.log.warning("turn.abort_not_recorded", error=repr(e))
            self.loaded = False


def _interrupted_results(calls: Sequence[ToolUseBlock], reason: str) -> list[Event]:
    return [
        ToolResult(block=ToolResultBlock(c.id, f"interrupted: {reason}", is_error=True),
                   tool_name=c.name or None)
        for c in calls
    ]


def _bind(
    wrap: Callable[[ModelRequest, Callable[[ModelRequest], ModelResponse]], ModelResponse],
    call: Callable[[ModelRequest], ModelResponse],
) -> Callable[[ModelRequest], ModelResponse]:
    return lambda req: wrap(req, call)


def conversation_since(state: SessionState, first_entry: int) -> list[ConvMessage]:
    """The messages the entries from ``first_entry`` on contribute (not merged across the
    boundary)."""
    out: list[ConvMessage] = []
    for entry in state.entries[first_entry:]:
        m = entry.message
        if out and out[-1].role == m.role:
            out[-1] = ConvMessage(m.role, out[-1].content + m.content)
        else:
            out.append(m)
    return out

