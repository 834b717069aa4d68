"""The ModelProvider contract: one required streaming call, optional declared capabilities.

A provider turns a :class:`ModelRequest` into a stream of live :data:`StreamEvent` values that
ends with exactly one :class:`ResponseComplete` carrying the whole assistant message (as the
persisted :class:`~liteagent.eventlog.AssistantMessage` event). Live deltas are for display only;
the final message is what is stored. Optional capabilities are declared in
:attr:`ModelProvider.capabilities`; using one that is not declared raises
:class:`CapabilityNotSupportedError`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias

import msgspec

from liteagent.eventlog import AssistantMessage, CancelToken, Message

from ._errors import CapabilityNotSupportedError, ProviderStreamError

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "TOKEN_COUNTING",
    "AppliedEdit",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "ContextEdit",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ResponseComplete",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSchema",
    "ToolUseStart",
]

TOKEN_COUNTING: Final = "token_counting"  # noqa: S105 -- a capability name, not a secret
CLEAR_TOOL_USES: Final = "clear_tool_uses"
CLEAR_THINKING: Final = "clear_thinking"
COMPACT: Final = "compact"


class ToolSchema(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the model may call: its name, description and JSON Schema for the input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class _EditBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the native context edits a provider may apply server-side."""


class ClearToolUses(_EditBase, tag="clear_tool_uses", frozen=True):
    """Clear old tool results (and optionally inputs) once the prompt passes ``trigger_tokens``,
    keeping the newest ``keep_tool_uses``; ``None`` fields take the provider's defaults."""

    trigger_tokens: int | None = None
    keep_tool_uses: int | None = None
    clear_at_least_tokens: int | None = None
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False


class ClearThinking(_EditBase, tag="clear_thinking", frozen=True):
    """Clear thinking blocks of older turns, keeping the last ``keep_turns`` (``"all"``: keep
    every one)."""

    keep_turns: int | Literal["all"] = 1


class Compact(_EditBase, tag="compact", frozen=True):
    """Let the provider summarize the conversation once the prompt passes ``trigger_tokens``."""

    trigger_tokens: int | None = None
    pause_after_compaction: bool = False
    instructions: str | None = None


ContextEdit: TypeAlias = ClearToolUses | ClearThinking | Compact

_EDIT_CAPABILITY: dict[type[Any], str] = {
    ClearToolUses: CLEAR_TOOL_USES,
    ClearThinking: CLEAR_THINKING,
    Compact: COMPACT,
}


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One call to the model: the projected conversation and everything sent with it.

    ``cache`` asks the provider to cache the stable prefix (system prompt, tools and all but the
    newest turn) where it supports prompt caching. ``thinking_budget`` enables extended thinking
    with that many tokens. ``context_edits`` are native, server-side edits; each needs the
    matching capability.
    """

    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[ToolSchema, ...] = ()
    max_tokens: int = 4096
    context_edits: tuple[ContextEdit, ...] = ()
    thinking_budget: int | None = None
    stop_sequences: tuple[str, ...] = ()
    cache: bool = True


class AppliedEdit(msgspec.Struct, frozen=True, kw_only=True):
    """What the provider reports it cleared or compacted for one edit of the request."""

    type: str
    cleared_tool_uses: int | None = None
    cleared_thinking_turns: int | None = None
    cleared_input_tokens: int | None = None


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A complete response: the assistant message (blocks, usage, stop reason, model), the
    edits the provider applied, and its request id."""

    message: AssistantMessage
    applied_edits: tuple[AppliedEdit, ...] = ()
    request_id: str | None = None


class TextDelta(msgspec.Struct, frozen=True):
    """More text for the content block at ``index``."""

    index: int
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True):
    """More thinking for the content block at ``index``."""

    index: int
    thinking: str


class ToolUseStart(msgspec.Struct, frozen=True):
    """The model started calling tool ``name`` (call ``id``) in the block at ``index``."""

    index: int
    id: str
    name: str


class ToolInputDelta(msgspec.Struct, frozen=True):
    """A fragment of the JSON input of the tool call at ``index`` (not valid JSON alone)."""

    index: int
    partial_json: str


class ResponseComplete(msgspec.Struct, frozen=True):
    """The last event of every successful stream."""

    response: ModelResponse


StreamEvent: TypeAlias = (
    TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta | ResponseComplete
)


class ModelProvider(abc.ABC):
    """A model behind one streaming call.

    :meth:`stream` yields live events and ends with exactly one :class:`ResponseComplete`. It
    raises :class:`~liteagent.providers.ProviderError` subclasses for failures and
    :class:`~liteagent.eventlog.OperationCancelledError` when ``cancel`` fires; in both cases no
    response is produced. Providers are safe to use from several threads at once.
    """

    #: The optional capabilities this provider has (``TOKEN_COUNTING``, ``CLEAR_TOOL_USES``,
    #: ``CLEAR_THINKING``, ``COMPACT``).
    capabilities: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        """A short name for messages and logs."""
        return type(self).__name__

    @abc.abstractmethod
    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Stream the response to ``request``."""

    def complete(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> ModelResponse:
        """Run :meth:`stream` to the end and return the response."""
        response: ModelResponse | None = None
        for event in self.stream(request, cancel=cancel):
            if isinstance(event, ResponseComplete):
                response = event.response
        if response is None:
            raise ProviderStreamError(f"{self.name} ended a stream without a response")
        return response

    def count_tokens(self, request: ModelRequest) -> int:  # noqa: ARG002 -- the default refuses
        """Return the provider's count of the request's input tokens (capability
        ``TOKEN_COUNTING``)."""
        raise CapabilityNotSupportedError(self.name, TOKEN_COUNTING)

    def supports(self, capability: str) -> bool:
        """Whether the provider declares ``capability``."""
        return capability in self.capabilities

    def check_request(self, request: ModelRequest) -> None:
        """Raise :class:`CapabilityNotSupportedError` when ``request`` uses a native context
        edit this provider does not declare."""
        for edit in request.context_edits:
            capability = _EDIT_CAPABILITY[type(edit)]
            if capability not in self.capabilities:
                raise CapabilityNotSupportedError(self.name, capability)

    def close(self) -> None:  # noqa: B027 -- an optional hook; most providers hold nothing
        """Release connections; the default does nothing."""

    def __enter__(self) -> ModelProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
