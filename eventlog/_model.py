"""Model calls as data: a request, its streamed events and its response (provider-neutral).

These are vocabulary, like the messages they carry: the context layer builds requests, the
providers turn them into API calls, the log records what was sent. The provider contract itself
(:class:`liteagent.providers.ModelProvider`) lives in ``liteagent.providers``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from ._events import AssistantMessage
from ._messages import Message

__all__ = [
    "AppliedEdit",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "ContextEdit",
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
