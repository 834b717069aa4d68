"""Lossless conversion between liteagent messages and the Anthropic Messages API JSON shape.

This is the interchange format users import and export transcripts in::

    {"role": "user" | "assistant", "content": [block, ...]}

``messages_from_dicts(messages_to_dicts(ms)) == ms`` for every list of messages that converts
(one that would not come back equal is refused with :class:`InvalidMessageError`), and
``messages_to_dicts(messages_from_dicts(ds)) == ds`` for every list of JSON message dicts whose
``content`` is a list. A string ``content`` (which the API treats as one text block) becomes one
text block. Values are copied in both directions, so neither side can mutate the other's data;
only JSON values are accepted (tuples are taken as lists).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack can store


def _copy(value: Any, where: str) -> Any:
    """Return a deep copy of a JSON value; anything else raises :class:`InvalidMessageError`.

    JSON values are dicts with str keys, lists (tuples are copied as lists), str, int (within
    msgpack's 64-bit range), float, bool and None.
    """
    try:
        return _json_copy(value, where)
    except RecursionError as e:
        raise InvalidMessageError(f"{where}: nested too deeply") from e


def _json_copy(value: Any, where: str) -> Any:
    t = type(value)
    if t is str or t is bool or t is float or value is None:
        return value
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidMessageError(f"{where}: not plain JSON data (an integer beyond 64 bits)")
        return value
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidMessageError(
                    f"{where}: not plain JSON data (a {type(k).__name__} key {k!r})"
                )
            out[k] = _json_copy(v, where)
        return out
    if t is list or t is tuple:
        return [_json_copy(v, where) for v in value]
    raise InvalidMessageError(f"{where}: not plain JSON data (a {t.__name__})")


def _extra_out(extra: Any, modelled: frozenset[str], where: str) -> dict[str, Any]:
    if extra is UNSET:
        return {}
    if not isinstance(extra, dict) or not extra:
        raise InvalidMessageError(f"{where}: extra must be UNSET or a non-empty dict")
    clash = modelled.intersection(extra)
    if clash:
        raise InvalidMessageError(f"{where}: extra repeats modelled keys {sorted(clash)}")
    copied: dict[str, Any] = _copy(extra, where)
    return copied


# ---------------------------------------------------------------------------------------------
# to dicts


def _block_to_dict(block: Block, where: str) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text, **_extra_out(block.extra, _TEXT, where)}
    if isinstance(block, ToolUseBlock):
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": _copy(block.input, where),
            **_extra_out(block.extra, _KNOWN_KEYS["tool_use"], where),
        }
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if isinstance(block.content, str):
            out["content"] = block.content
        elif block.content is not UNSET:
            out["content"] = [_block_to_dict(b, f"{where} content") for b in block.content]
        if block.is_error is not UNSET:
            out["is_error"] = block.is_error
        out.update(_extra_out(block.extra, _KNOWN_KEYS["tool_result"], where))
        return out
    if isinstance(block, ThinkingBlock):
        out = {"type": "thinking", "thinking": block.thinking}
        if block.signature is not UNSET:
            out["signature"] = block.signature
        out.update(_extra_out(block.extra, _KNOWN_KEYS["thinking"], where))
        return out
    if isinstance(block, RedactedThinkingBlock):
        return {
            "type": "redacted_thinking",
            "data": block.data,
            **_extra_out(block.extra, _KNOWN_KEYS["redacted_thinking"], where),
        }
    if isinstance(block, CompactionBlock):
        out = {"type": "compaction"}
        if block.content is not UNSET:
            out["content"] = block.content
        if block.encrypted_content is not UNSET:
            out["encrypted_content"] = block.encrypted_content
        out.update(_extra_out(block.extra, _KNOWN_KEYS["compaction"], where))
        return out
    if isinstance(block, RawBlock):
        kind = block.data.get("type") if isinstance(block.data, dict) else None
        if type(kind) is not str or kind in _KNOWN_KEYS:
            raise InvalidMessageError(
                f"{where}: a RawBlock needs a str 'type' that liteagent does not model, "
                f"got {kind!r}"
            )
        copied: dict[str, Any] = _copy(block.data, where)
        return copied
    raise InvalidMessageError(f"not a content block: {type(block).__name__}")


def message_to_dict(message: Message, *, where: str = "message") -> dict[str, Any]:
    """Return ``message`` in the Anthropic Messages API shape (a fresh dict).

    Raises :class:`InvalidMessageError` for a message that would not convert back to itself:
    an ``extra`` that is empty or repeats a modelled key, a :class:`RawBlock` of a modelled
    type, a value that is not JSON.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
    if message.role not in ("user", "assistant"):
        raise InvalidMessageError(f"{where}: role must be 'user' or 'assistant'")
    out: dict[str, Any] = {
        "role": message.role,
        "content": [
            _block_to_dict(b, f"{where} content[{i}]") for i, b in enumerate(message.content)
        ],
    }
    out.update(_extra_out(message.extra, _MESSAGE_KEYS, where))
    return out


def messages_to_dicts(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Return ``messages`` in the Anthropic Messages API shape, one fresh dict per message."""
    return [message_to_dict(m, where=f"message {i}") for i, m in enumerate(messages)]


# ---------------------------------------------------------------------------------------------
# from dicts

_MESSAGE_KEYS = frozenset({"role", "content"})
_KNOWN_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "compaction": frozenset({"type", "content", "encrypted_content"}),
}
_TEXT = _KNOWN_KEYS["text"]


def _req(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise InvalidMessageError(f"{where}: missing required field {key!r}")
    value = d[key]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
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


def messages_from_dicts(dicts: Iterable[Any]) -> list[Message]:
    """Return the messages for a list of Anthropic-shaped message dicts.

    Raises :class:`InvalidMessageError` naming the index of the first bad message.
    """
    if isinstance(dicts, (str, bytes, Mapping)) or not isinstance(dicts, Iterable):
        raise InvalidMessageError(
            f"expected a list of message dicts, got {type(dicts).__name__}"
        )
    return [message_from_dict(d, where=f"message {i}") for i, d in enumerate(dicts)]
