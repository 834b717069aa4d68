"""Provider-neutral conversation messages and their content blocks.

Blocks mirror the Anthropic Messages API shapes (text, tool_use, tool_result, thinking with its
signature, redacted_thinking, compaction). A field that can be absent in the API shape is
``msgspec.UNSET`` when absent, so a transcript converts to and from that shape without loss; keys
of an API block that liteagent does not model (``cache_control``, ``citations``, ...) are kept in
``extra``, and a block of a type liteagent does not model (``image``, ``document``, server tool
blocks) is kept whole as a :class:`RawBlock`.

**Values the log cannot store.** The log stores msgpack, which has no integer beyond 64 bits and
no string with a surrogate code point, while JSON (what a provider answers) has both. Such a
value is never dropped: a tool input holding one is kept as its exact JSON text in
:attr:`ToolUseBlock.input_json`, and any other block holding one as its exact JSON text in
:attr:`RawBlock.json`. The text is canonical (compact, ASCII, keys in order), so converting to the
API shape and back (:func:`liteagent.eventlog.message_from_dict`) gives the same block.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "Block",
    "CompactionBlock",
    "Message",
    "RawBlock",
    "RedactedThinkingBlock",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "merge_adjacent",
    "message_text",
]

Role: TypeAlias = Literal["user", "assistant"]
Extra: TypeAlias = dict[str, Any] | UnsetType


class _BlockBase(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True, gc=False):
    """Base of every content block; encoded with a ``type`` tag."""


class TextBlock(_BlockBase, tag="text", frozen=True):
    """Plain text from the user or the model."""

    text: str
    extra: Extra = UNSET


class ToolUseBlock(_BlockBase, tag="tool_use", frozen=True):
    """A tool call the model made: its id, the tool's name and the JSON input.

    ``input_json`` is set only when the input holds a value the log cannot store (an integer
    beyond 64 bits, a string with a surrogate code point): it is then the input's canonical JSON
    text (module docstring) and ``input`` is ``{}``. Such a call is not run; the tool gets an
    error result saying why.
    """

    id: str
    name: str
    input: dict[str, Any]
    extra: Extra = UNSET
    input_json: str | UnsetType = UNSET


class ToolResultBlock(_BlockBase, tag="tool_result", frozen=True):
    """The result of one tool call, answering the ``tool_use`` with ``tool_use_id``.

    ``content`` is a string or a tuple of blocks (text, images as :class:`RawBlock`).
    """

    tool_use_id: str
    content: str | tuple[Block, ...] | UnsetType = UNSET
    is_error: bool | UnsetType = UNSET
    extra: Extra = UNSET


class ThinkingBlock(_BlockBase, tag="thinking", frozen=True):
    """The model's extended thinking; ``signature`` must be sent back verbatim when present."""

    thinking: str
    signature: str | UnsetType = UNSET
    extra: Extra = UNSET


class RedactedThinkingBlock(_BlockBase, tag="redacted_thinking", frozen=True):
    """Thinking the provider returned encrypted; sent back verbatim."""

    data: str
    extra: Extra = UNSET


class CompactionBlock(_BlockBase, tag="compaction", frozen=True):
    """A provider-side compaction summary; sent back verbatim as the first block of later requests.

    ``content`` is ``None`` when the provider's compaction failed (the block is then a no-op).
    """

    content: str | UnsetType | None = UNSET
    encrypted_content: str | UnsetType | None = UNSET
    extra: Extra = UNSET


class RawBlock(_BlockBase, tag="raw", frozen=True):
    """A block of a type liteagent does not model, kept exactly as the API dict ``data``.

    ``json`` is set only for a block (of any type) holding a value the log cannot store (module
    docstring): it is then the whole block's canonical JSON text, and ``data`` is ``{"type":
    <its type>}`` (``{}`` when the type itself cannot be stored).
    """

    data: dict[str, Any]
    json: str | UnsetType = UNSET


Block: TypeAlias = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | CompactionBlock
    | RawBlock
)


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One conversation message: a role and its content blocks, in order.

    ``extra`` holds the message's keys other than ``role`` and ``content``; when one of them
    holds a value the log cannot store as it is (an integer beyond 64 bits, a string with a
    surrogate code point), they are kept instead as their canonical JSON text in ``extra_json``
    (and ``extra`` is unset). ``string_content`` is true for a message whose API shape gave
    ``content`` as a string (which the API reads as one text block): ``content`` is then that
    one text block, and converting back to the API shape gives the string again.
    """

    role: Role
    content: tuple[Block, ...]
    extra: Extra = UNSET
    string_content: bool = False
    extra_json: str | None = None


def message_text(content: tuple[Block, ...]) -> str:
    """Return the text blocks of ``content`` joined by newlines (other blocks are ignored)."""
    return "\n".join(b.text for b in content if type(b) is TextBlock)


def merge_adjacent(messages: Iterable[Message], into: list[Message] | None = None) -> list[Message]:
    """``messages`` with every run of consecutive messages of one role joined into one message:
    their blocks in order, and no ``extra`` (a message left alone is the same object). This is
    how the conversation of a log is grouped (:func:`~liteagent.eventlog.conversation`): each
    tool result is an entry of its own, and the results of one step form one user message.

    With ``into`` (messages already grouped), ``messages`` are added to it in place — the first
    one joins its last message when the roles match — and ``into`` is returned: an incremental
    view appends one message at a time and sees whether it joined by the length of ``into``.
    """
    out = [] if into is None else into
    for m in messages:
        if out and out[-1].role == m.role:
            out[-1] = Message(m.role, out[-1].content + m.content)
        else:
            out.append(m)
    return out
