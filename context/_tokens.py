"""A fast, conservative token estimate for messages (no tokenizer, no network).

``estimate_tokens`` counts UTF-8 bytes of every string a message carries (texts, thinking,
tool inputs as JSON, tool results) and divides by 3, plus a small overhead per block and per
message. Claude's tokenizer averages about 3.5 to 4.5 bytes per token on English prose and code, so
the estimate is meant to be *high*: budgets computed with it leave headroom. Non-Latin scripts
(3 bytes per character in UTF-8) come out near one token per character. The bound measured on
the recorded trajectories is documented in ``bench/RESULTS.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec
from msgspec import UNSET

from liteagent.eventlog.errors import ContextLimitError
from liteagent.eventlog.types import (
    Block,
    CompactionBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSchema,
    ToolUseBlock,
)

__all__ = [
    "BYTES_PER_TOKEN",
    "estimate_block_tokens",
    "estimate_tokens",
    "fit_after_overflow",
    "request_overhead_tokens",
]

BYTES_PER_TOKEN = 3
_BLOCK_OVERHEAD = 4
_MESSAGE_OVERHEAD = 4
_JSON = msgspec.json.Encoder()


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass")) if not text.isascii() else len(text)


def _block_bytes(block: Block) -> int:
    if isinstance(block, TextBlock):
        return _size(block.text)
    if isinstance(block, ToolResultBlock):
        if isinstance(block.content, str):
            return _size(block.content)
        if block.content is UNSET:
            return 0
        return sum(_block_bytes(c) for c in block.content)
    if isinstance(block, ToolUseBlock):
        if isinstance(block.input_json, str):  # an input kept as its JSON text (ASCII)
            return _size(block.name) + len(block.input_json)
        return _size(block.name) + len(_JSON.encode(block.input))
    if isinstance(block, ThinkingBlock):
        return _size(block.thinking)
    if isinstance(block, RedactedThinkingBlock):
        return len(block.data)
    if isinstance(block, CompactionBlock):
        return _size(block.content) if isinstance(block.content, str) else 0
    if isinstance(block.json, str):  # a RawBlock kept as its JSON text (ASCII)
        return len(block.json)
    return len(_JSON.encode(block.data))  # a RawBlock


def estimate_block_tokens(block: Block) -> int:
    """The estimated tokens of one block."""
    return -(-_block_bytes(block) // BYTES_PER_TOKEN) + _BLOCK_OVERHEAD


def estimate_tokens(messages: Iterable[Message] | Sequence[Message]) -> int:
    """The estimated input tokens of ``messages`` (high by design; see the module docstring)."""
    total = 0
    for m in messages:
        total += _MESSAGE_OVERHEAD
        for block in m.content:
            total += -(-_block_bytes(block) // BYTES_PER_TOKEN) + _BLOCK_OVERHEAD
    return total


def request_overhead_tokens(system: str | None, tools: Sequence[ToolSchema]) -> int:
    """The estimated tokens a request spends besides its messages: the system prompt and the
    tool schemas (names, descriptions and JSON Schemas), at the same bytes per token."""
    return -(-len((system or "").encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN) + sum(
        -(-len((t.name + t.description).encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)
        + len(_JSON.encode(t.input_schema)) // BYTES_PER_TOKEN
        for t in tools
    )


_HEADROOM = 0.9


def fit_after_overflow(total: int, error: ContextLimitError, max_tokens: int) -> int | None:
    """The estimated tokens a request of ``total`` estimated tokens should shrink to after the
    provider reported ``error``: ``total`` scaled by the reported ratio to 90 % of the window
    less the output reserve ``max_tokens``; ``None`` when the error lacks the numbers, or when
    the reported window is no larger than the output reserve (there is nothing to scale to, and
    a size of zero or less would refuse every retry)."""
    if not (error.tokens and error.maximum):
        return None
    room = _HEADROOM * error.maximum - max_tokens
    if room <= 0:
        return None
    return int(total * room / error.tokens)
