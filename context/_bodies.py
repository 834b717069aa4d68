"""Tool-result bodies: their size, their text, and rewriting them in place.

The *body* of a :class:`~liteagent.eventlog.types.ToolResultBlock` is its ``content``: a string,
a tuple of blocks (text, images as raw blocks), or ``UNSET`` (no body). Sizes are UTF-8 bytes:
a string counts its encoded length; a tuple counts the encoded text of its text blocks plus the
JSON of any other block; ``UNSET`` counts 0.

A body that a pass already replaced (a spill marker, starting with
:data:`~._spill.SPILL_PREFIX`, or a cleared placeholder, starting with :data:`CLEARED_PREFIX`) is
*compacted*; passes leave compacted bodies alone, so running a pass twice changes nothing the
second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import msgspec
from msgspec import UNSET

from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Block, Message, TextBlock, ToolResultBlock

from ._archive import archive_ref
from ._spill import SPILL_PREFIX

__all__ = [
    "CLEARED_PREFIX",
    "body_bytes",
    "body_text",
    "cleared_marker",
    "is_compacted",
    "replace_bodies",
    "spilled_text",
    "tool_results",
]

CLEARED_PREFIX = "[liteagent:cleared "
_JSON = msgspec.json.Encoder()


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def body_bytes(content: str | tuple[Block, ...] | msgspec.UnsetType) -> int:
    """The size of a tool-result body in bytes (see the module docstring)."""
    if isinstance(content, str):
        return _utf8_len(content)
    if content is UNSET:
        return 0
    return sum(_utf8_len(b.text) if type(b) is TextBlock else len(_JSON.encode(b)) for b in content)


def body_text(content: str | tuple[Block, ...] | msgspec.UnsetType) -> str | None:
    """The text a body is spilled as: the string itself, or a tuple's text blocks joined by
    newlines. ``None`` when the body has no text form that keeps everything: ``UNSET``, or a
    tuple holding a non-text block (an image cannot be read back as text)."""
    if isinstance(content, str):
        return content
    if content is UNSET or any(type(b) is not TextBlock for b in content):
        return None
    return "\n".join(b.text for b in content if type(b) is TextBlock)


def spilled_text(messages: Iterable[Message], ref: str) -> str | None:
    """The text form (:func:`body_text`) of the first tool-result body of ``messages`` whose
    reference is ``ref`` (:func:`~._archive.archive_ref` of that text: the key a
    content-addressed spill store gives it), or ``None``. The reference is computed from each
    body, never read from a marker's text, so only the bodies of ``messages`` can be found."""
    for message in messages:
        for block in message.content:
            if type(block) is ToolResultBlock:
                text = body_text(block.content)
                if text is not None and archive_ref(text) == ref:
                    return text
    return None


def is_compacted(content: str | tuple[Block, ...] | msgspec.UnsetType) -> bool:
    """Whether a body is already a spill marker or a cleared placeholder."""
    return isinstance(content, str) and content.startswith((SPILL_PREFIX, CLEARED_PREFIX))


def cleared_marker(tool_use_id: str, size: int) -> str:
    """The placeholder left where a tool result's body of ``size`` bytes was cleared."""
    return f"{CLEARED_PREFIX}{tool_use_id}: {size} bytes of tool output removed to save context]"


def tool_results(messages: Sequence[Message]) -> Iterator[tuple[int, int, ToolResultBlock]]:
    """Every tool result of ``messages`` as ``(message index, block index, block)``, in
    conversation order."""
    for i, message in enumerate(messages):
        for j, block in enumerate(message.content):
            if type(block) is ToolResultBlock:
                yield i, j, block


def replace_bodies(
    messages: Sequence[Message], bodies: Mapping[tuple[int, int], str]
) -> list[Message]:
    """A copy of ``messages`` where the tool result at each ``(message, block)`` index of
    ``bodies`` has that string as its content; its id, ``is_error`` and ``extra`` are kept, and
    every other message is the same object as before."""
    out = list(messages)
    by_message: dict[int, list[tuple[int, str]]] = {}
    for (i, j), text in bodies.items():
        by_message.setdefault(i, []).append((j, text))
    for i, changes in by_message.items():
        content = list(out[i].content)
        for j, text in changes:
            block = content[j]
            if type(block) is not ToolResultBlock:
                raise InvalidArgumentError(f"message {i} block {j} is not a tool result")
            content[j] = msgspec.structs.replace(block, content=text)
        out[i] = msgspec.structs.replace(out[i], content=tuple(content))
    return out
