"""Lossless conversion between liteagent messages and the Anthropic Messages API JSON shape.

This is the interchange format users import and export transcripts in::

    {"role": "user" | "assistant", "content": [block, ...]}

``messages_from_dicts(messages_to_dicts(ms)) == ms`` for every list of messages, and
``messages_to_dicts(messages_from_dicts(ds)) == ds`` for every list of dicts whose ``content`` is a
list. A string ``content`` (which the API treats as one text block) becomes one text block.
Values are copied in both directions, so neither side can mutate the other's data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from ._errors import InvalidMessageError
from ._messages import (
    Block,
    CompactionBlock,
    Message,
    RawBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["message_from_dict", "message_to_dict", "messages_from_dicts", "messages_to_dicts"]

_COPY_ENC = msgspec.msgpack.Encoder()
_COPY_DEC = msgspec.msgpack.Decoder()


def _copy(value: Any, where: str) -> Any:
    """Deep-copy a JSON-like value (and check that it is plain data)."""
    try:
        return _COPY_DEC.decode(_COPY_ENC.encode(value))
    except (TypeError, OverflowError, msgspec.EncodeError, RecursionError) as e:
        raise InvalidMessageError(f"{where}: not plain JSON-like data ({e})") from e


def _extra_out(extra: Any) -> dict[str, Any]:
    return {} if extra is UNSET else dict(_copy(extra, "extra"))


# ---------------------------------------------------------------------------------------------
# to dicts


def _block_to_dict(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text, **_extra_out(block.extra)}
    if isinstance(block, ToolUseBlock):
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": _copy(block.input, "tool_use input"),
            **_extra_out(block.extra),
        }
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if isinstance(block.content, str):
            out["content"] = block.content
        elif block.content is not UNSET:
            out["content"] = [_block_to_dict(b) for b in block.content]
        if block.is_error is not UNSET:
            out["is_error"] = block.is_error
        out.update(_extra_out(block.extra))
        return out
    if isinstance(block, ThinkingBlock):
        out = {"type": "thinking", "thinking": block.thinking}
        if block.signature is not UNSET:
            out["signature"] = block.signature
        out.update(_extra_out(block.extra))
        return out
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data, **_extra_out(block.extra)}
    if isinstance(block, CompactionBlock):
        out = {"type": "compaction"}
        if block.content is not UNSET:
            out["content"] = block.content
        if block.encrypted_content is not UNSET:
            out["encrypted_content"] = block.encrypted_content
        out.update(_extra_out(block.extra))
        return out
    if isinstance(block, RawBlock):
        return dict(_copy(block.data, "raw block"))
    raise InvalidMessageError(f"not a content block: {type(block).__name__}")


def message_to_dict(message: Message) -> dict[str, Any]:
    """Return ``message`` in the Anthropic Messages API shape (a fresh dict)."""
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
    out: dict[str, Any] = {
        "role": message.role,
        "content": [_block_to_dict(b) for b in message.content],
    }
    out.update(_extra_out(message.extra))
    return out


def messages_to_dicts(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Return ``messages`` in the Anthropic Messages API shape, one fresh dict per message."""
    return [message_to_dict(m) for m in messages]


# ---------------------------------------------------------------------------------------------
# from dicts

_KNOWN_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "compaction": frozenset({"type", "content", "encrypted_content"}),
}


def _req(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise InvalidMessageError(f"{where}: missing required field {key!r}")
    value = d[key]
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        raise InvalidMessageError(
            f"{where}: field {key!r} must be {_type_name(typ)}, got {type(value).__name__}"
        )
    return value


def _opt(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        return UNSET
    return _req(d, key, typ, where)


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join("null" if t is type(None) else t.__name__ for t in typ)
    return typ.__name__


def _extra_in(d: Mapping[str, Any], kind: str, where: str) -> Any:
    rest = {k: v for k, v in d.items() if k not in _KNOWN_KEYS[kind]}
    return _copy(rest, where) if rest else UNSET


def _block_from_dict(d: Any, where: str) -> Block:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(f"{where}: a block must be an object, got {type(d).__name__}")
    kind = _req(d, "type", str, where)
    where = f"{where} ({kind})"
    if kind == "text":
        return TextBlock(_req(d, "text", str, where), extra=_extra_in(d, kind, where))
    if kind == "tool_use":
        return ToolUseBlock(
            _req(d, "id", str, where),
            _req(d, "name", str, where),
            _copy(_req(d, "input", dict, where), where),
            extra=_extra_in(d, kind, where),
        )
    if kind == "tool_result":
        content: Any = UNSET
        if "content" in d:
            raw = _req(d, "content", (str, list), where)
            content = (
                raw
                if isinstance(raw, str)
                else tuple(
                    _block_from_dict(b, f"{where} content[{i}]") for i, b in enumerate(raw)
                )
            )
        return ToolResultBlock(
            _req(d, "tool_use_id", str, where),
            content,
            _opt(d, "is_error", bool, where),
            extra=_extra_in(d, kind, where),
        )
    if kind == "thinking":
        return ThinkingBlock(
            _req(d, "thinking", str, where),
            _opt(d, "signature", str, where),
            extra=_extra_in(d, kind, where),
        )
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(_req(d, "data", str, where), extra=_extra_in(d, kind, where))
    if kind == "compaction":
        return CompactionBlock(
            _opt(d, "content", (str, type(None)), where),
            _opt(d, "encrypted_content", (str, type(None)), where),
            extra=_extra_in(d, kind, where),
        )
    return RawBlock(_copy(dict(d), where))


def message_from_dict(d: Any, *, where: str = "message") -> Message:
    """Return the :class:`Message` for one Anthropic-shaped message dict.

    Raises :class:`InvalidMessageError` naming the message, block and field that is wrong.
    """
    if not isinstance(d, Mapping):
        raise InvalidMessageError(f"{where}: a message must be an object, got {type(d).__name__}")
    role = _req(d, "role", str, where)
    if role not in ("user", "assistant"):
        raise InvalidMessageError(f"{where}: role must be 'user' or 'assistant', got {role!r}")
    raw = _req(d, "content", (str, list), where)
    if isinstance(raw, str):
        content: tuple[Block, ...] = (TextBlock(raw),)
    else:
        content = tuple(_block_from_dict(b, f"{where} content[{i}]") for i, b in enumerate(raw))
    rest = {k: v for k, v in d.items() if k not in ("role", "content")}
    return Message(role, content, extra=_copy(rest, where) if rest else UNSET)


def messages_from_dicts(dicts: Sequence[Any]) -> list[Message]:
    """Return the messages for a list of Anthropic-shaped message dicts.

    Raises :class:`InvalidMessageError` naming the index of the first bad message.
    """
    if isinstance(dicts, (str, bytes, Mapping)):
        raise InvalidMessageError(
            f"expected a list of message dicts, got {type(dicts).__name__}"
        )
    return [message_from_dict(d, where=f"message {i}") for i, d in enumerate(dicts)]
