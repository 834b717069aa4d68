"""Conversations as plain text, for a summarizing model: one line group per message.

Each message renders as lines ``<role>: <text>``, ``<role> called tool <name> (id <id>) with
input <JSON>``, ``tool result for <id>: <content>`` (``tool error for ...`` when the result is
an error) and ``<role> (earlier summary): <text>`` for a provider compaction block. Thinking and
redacted thinking are left out (private reasoning, often encrypted); a block liteagent does not
model renders as ``<role>: [<type> block]``. Text is never shortened here: callers cut it to
fit (:func:`cut_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from liteagent.eventlog.types import (
    Block,
    CompactionBlock,
    Message,
    RawBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

from ._tokens import BYTES_PER_TOKEN

__all__ = ["cut_text", "render_message", "render_turn", "text_tokens"]

_JSON = msgspec.json.Encoder()


def text_tokens(text: str) -> int:
    """The estimated tokens of ``text`` alone (UTF-8 bytes / 3, rounded up), as
    :func:`~liteagent.context.estimate_tokens` counts a text block's body."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def _result_text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    if block.content is UNSET:
        return ""
    return "\n".join(_inner(b) for b in block.content)


def _inner(block: Block) -> str:
    if type(block) is TextBlock:
        return block.text
    if type(block) is RawBlock:
        return f"[{block.data.get('type', 'raw')} block]"
    return f"[{type(block).__struct_config__.tag} block]"


def _render_block(role: str, block: Block) -> str | None:
    t = type(block)
    if t is TextBlock:
        return f"{role}: {block.text}"  # type: ignore[union-attr]
    if t is ToolUseBlock:
        use: ToolUseBlock = block  # type: ignore[assignment]
        given = (
            use.input_json if isinstance(use.input_json, str) else _JSON.encode(use.input).decode()
        )
        return f"{role} called tool {use.name} (id {use.id}) with input {given}"
    if t is ToolResultBlock:
        result: ToolResultBlock = block  # type: ignore[assignment]
        label = "tool error" if result.is_error is True else "tool result"
        return f"{label} for {result.tool_use_id}: {_result_text(result)}"
    if t is CompactionBlock:
        content = block.content  # type: ignore[union-attr]
        return f"{role} (earlier summary): {content}" if isinstance(content, str) else None
    if t is RawBlock:
        return f"{role}: [{block.data.get('type', 'raw')} block]"  # type: ignore[union-attr]
    return None  # thinking and redacted thinking


def render_message(message: Message) -> str:
    """``message`` as plain text lines (see the module docstring); "" when nothing renders."""
    lines = (_render_block(message.role, b) for b in message.content)
    return "\n".join(line for line in lines if line is not None)


def render_turn(turn: Sequence[Message]) -> list[str]:
    """The non-empty renderings of a turn's messages, in order."""
    return [text for text in (render_message(m) for m in turn) if text]


def cut_text(text: str, max_tokens: int) -> tuple[str, str]:
    """Split ``text`` into a head of at most ``max(1, max_tokens)`` estimated tokens (but at
    least one character) and the rest; ``head + rest == text``."""
    budget = max(1, max_tokens) * BYTES_PER_TOKEN
    if text.isascii():
        count = budget
    else:
        count = size = 0
        for ch in text:
            size += len(ch.encode("utf-8", "surrogatepass"))
            if size > budget:
                break
            count += 1
    count = max(1, count)
    return text[:count], text[count:]
