"""A planner backed by the provider's own compaction (``compact``; Anthropic's
``compact_20260112`` edit with ``pause_after_compaction``).

The ContextEngine's *project* level asks a planner to summarize what the select level left out.
When no planner is configured and the provider declares ``compact``, the session uses this one:
it sends the left-out messages with a ``Compact`` edit that pauses after compacting, and takes
the summary from the ``compaction`` block the provider answers with. The summary is then recorded
like any planner's (a compaction record), so the views stay projections of the log and replay
still verifies; the provider's block itself is never sent back.

The provider compacts only above its trigger (50,000 input tokens at the least, per its docs), so
a short left-out part comes back without a summary: that is a planner failure, and the session
falls back to the selected view.
"""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog import CancelToken
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError
from liteagent.eventlog.types import (
    Compact,
    CompactionBlock,
    Message,
    ModelRequest,
    TextBlock,
    ToolSchema,
)

from ._llm import SummarizerModel

__all__ = ["NativeCompactionError", "provider_compaction_planner"]

_ASK = "Summarize the conversation above so the work can continue from the summary alone."


class NativeCompactionError(LiteAgentError, RuntimeError):
    """Raised when the provider answered without a compaction summary (below its trigger, or it
    failed)."""


class _ProviderCompactionPlanner:
    def __init__(
        self,
        model: SummarizerModel,
        model_name: str,
        *,
        trigger_tokens: int,
        max_tokens: int,
        instructions: str | None,
        tools: tuple[ToolSchema, ...],
    ) -> None:
        self.model, self.model_name = model, model_name
        self.trigger_tokens, self.max_tokens = trigger_tokens, max_tokens
        self.instructions = instructions
        self.tools = tools

    def __repr__(self) -> str:
        return (
            f"provider_compaction_planner(model_name={self.model_name!r}, "
            f"trigger_tokens={self.trigger_tokens})"
        )

    def __call__(self, messages: Sequence[Message], *, cancel: CancelToken) -> str:
        request = ModelRequest(
            model=self.model_name,
            messages=_framed(messages),
            tools=self.tools,  # the API refuses tool_use and tool_result blocks without them
            max_tokens=self.max_tokens,
            context_edits=(
                Compact(
                    trigger_tokens=self.trigger_tokens,
                    pause_after_compaction=True,
                    instructions=self.instructions,
                ),
            ),
            cache=False,
        )
        response = self.model.complete(request, cancel=cancel)
        for block in response.message.content:
            if type(block) is CompactionBlock and isinstance(block.content, str) and block.content:
                return block.content
        raise NativeCompactionError(
            "the provider answered without a compaction summary "
            f"(stop_reason {response.message.stop_reason!r}; below its trigger?)"
        )


def _framed(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` as a valid request: starting with a user message and ending with the ask."""
    out = list(messages)
    if not out or out[0].role != "user":
        out.insert(0, Message("user", (TextBlock("(earlier conversation)"),)))
    if out[-1].role == "user":
        out[-1] = Message("user", (*out[-1].content, TextBlock(_ASK)), out[-1].extra)
    else:
        out.append(Message("user", (TextBlock(_ASK),)))
    return tuple(out)


def provider_compaction_planner(
    model: SummarizerModel,
    model_name: str,
    *,
    trigger_tokens: int = 50_000,
    max_tokens: int = 4096,
    instructions: str | None = None,
    tools: Sequence[ToolSchema] = (),
) -> _ProviderCompactionPlanner:
    """A :class:`~liteagent.context.Planner` that lets ``model`` (a provider declaring
    ``compact``) write the summary (see the module docstring). ``tools``: the schemas of the
    session's tools, sent with the request as with the session's own (the Messages API refuses
    a request holding ``tool_use`` or ``tool_result`` blocks that defines no tools)."""
    if not callable(getattr(model, "complete", None)):
        raise InvalidArgumentError(f"model must have complete(request), got {type(model).__name__}")
    given: object = tools
    if not isinstance(given, (list, tuple)) or not all(isinstance(t, ToolSchema) for t in given):
        raise InvalidArgumentError(
            f"tools must be a list or tuple of ToolSchema, got {shown(given)}"
        )
    for name, value in (("trigger_tokens", trigger_tokens), ("max_tokens", max_tokens)):
        if type(value) is not int or value < 1:
            raise InvalidArgumentError(f"{name} must be an int >= 1, got {shown(value)}")
    return _ProviderCompactionPlanner(
        model,
        model_name,
        trigger_tokens=trigger_tokens,
        max_tokens=max_tokens,
        instructions=instructions,
        tools=tuple(tools),
    )
