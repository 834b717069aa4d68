"""Lossless conversion between liteagent messages and the Anthropic Messages API JSON shape.

This is the interchange format users import and export transcripts in::

    {"role": "user" | "assistant", "content": "text" | [block, ...], ...}

``messages_to_dicts(messages_from_dicts(ds)) == ds`` for every list of JSON message dicts ``ds``
that converts: each message's keys besides ``role`` and ``content`` are kept
(:attr:`Message.extra`, or :attr:`Message.extra_json`, below), a string ``content`` stays a
string (:attr:`Message.string_content`), consecutive messages of one role stay separate
messages, and every block comes back equal (as JSON: the order of an object's keys is not
kept): blocks liteagent models keep their unknown keys
(``cache_control``, ``citations``, ...) in ``extra``, and blocks of other types (images,
documents, search results, server tool blocks, ...) are kept whole as a :class:`RawBlock`.
What does not convert raises :class:`InvalidMessageError` naming the message, block and field:
a shape the Messages API does not have (a missing or mistyped field of a modelled block, a role
other than user/assistant), and a string holding a surrogate pair as two code points (which no
JSON text can write: JSON reads an escaped pair as one character).
Conversely ``messages_from_dicts(messages_to_dicts(ms)) == ms`` for every list of messages the
log can store that converts (one that would not come back equal is refused with
:class:`InvalidMessageError`), where each message marked ``string_content`` holds one text block
(the mark only says how the content was written: a marked message whose content has changed
since converts with a list, as an unmarked one). Values are copied in both directions, so
neither side can mutate the other's data; only JSON values are accepted (tuples are taken as
lists).

Every message :func:`message_from_dict` returns can be stored in the log: a block holding a value
msgpack cannot store (an integer beyond 64 bits, a string with a surrogate code point) comes back
in its lossless form, a tool input as :attr:`ToolUseBlock.input_json` and any other block as
:attr:`RawBlock.json`, the value's canonical JSON text (compact, ASCII-only, keys in order; see
:mod:`liteagent.eventlog._messages`); the message's own other keys likewise as
:attr:`Message.extra_json`. :func:`message_to_dict` turns those forms back into the
exact values. So ``message_from_dict(message_to_dict(m))`` is the storable form of any message
``m`` whose values are JSON (and ``m`` itself when it can be stored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import UNSET

from ._errors import InvalidMessageError, LiteAgentError
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
from ._nesting import MAX_MESSAGE_NESTING, nests_deeper
from ._shown import shown

__all__ = [
    "canonical_json",
    "message_from_dict",
    "message_to_dict",
    "messages_from_dicts",
    "messages_to_dicts",
    "unstorable",
]

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack can store


def _copy(value: Any, where: str) -> Any:
    """Return a deep copy of a JSON value; anything else raises :class:`InvalidMessageError`.

    JSON values are dicts with str keys, lists (tuples are copied as lists), str, int, float,
    bool and None (see :func:`unstorable` for those the log cannot store as they are).
    """
    try:
        return _json_copy(value, where)
    except RecursionError as e:
        raise InvalidMessageError(f"{where}: nested too deeply") from e


def unstorable(value: Any) -> str | None:
    """Why the JSON ``value`` cannot be stored in the log as it is (``None``: it can): an
    integer beyond msgpack's 64 bits, or a string (or key) with a surrogate code point."""
    try:
        return _unstorable(value)
    except RecursionError:
        return "a value nested too deeply"


def _unstorable(value: Any) -> str | None:
    t = type(value)
    if t is str:
        return None if _encodable(value) else "a string with a surrogate code point"
    if t is int:
        return None if _INT_MIN <= value <= _INT_MAX else "an integer beyond 64 bits"
    if t is dict:
        for k, v in value.items():
            if type(k) is str and not _encodable(k):  # (a non-str key is refused as not JSON)
                return "a key with a surrogate code point"
            why = _unstorable(v)
            if why is not None:
                return why
    elif t is list:
        for v in value:
            why = _unstorable(v)
            if why is not None:
                return why
    return None


_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _paired(value: Any) -> bool:
    """Whether a string (or key) in the JSON ``value`` holds a surrogate pair as two code points
    (JSON text has no way to write it: an escaped pair is read back as one character)."""
    t = type(value)
    if t is str:
        return _PAIR.search(value) is not None
    if t is dict:
        return any(_paired(k) or _paired(v) for k, v in value.items())
    if t is list:
        return any(_paired(v) for v in value)
    return False


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_json(value: Any, *, where: str = "value") -> str:
    """The canonical JSON text of a JSON value: compact, ASCII-only (so a surrogate code point
    is an escape), keys in order, integers exact; ``json.loads`` of it gives ``value`` back.

    Raises :class:`InvalidMessageError` for a value Python will not write as JSON (an integer
    of more digits than ``sys.get_int_max_str_digits()`` allows, 4300 by default).
    """
    try:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=True)
    except ValueError as e:  # the int-to-str digit limit
        raise InvalidMessageError(f"{where}: cannot be written as JSON ({e})") from e


def _kept(text: Any, where: str, what: str) -> Any:
    """The value a lossless JSON form (``input_json``, ``RawBlock.json``) holds, checked to be
    what :func:`message_from_dict` would make of it (so the round trip gives the same block)."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError) as e:
        raise InvalidMessageError(f"{where}: {what} is not JSON text ({e})") from e
    if not isinstance(value, dict) or canonical_json(value) != text or unstorable(value) is None:
        raise InvalidMessageError(
            f"{where}: {what} must be the canonical JSON text of an object holding a value "
            "the log cannot store (as message_from_dict makes it)"
        )
    return value


def _json_copy(value: Any, where: str) -> Any:
    t = type(value)
    if t is str or t is bool or t is float or t is int or value is None:
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


def _typed(value: Any, typ: type | tuple[type, ...], where: str, name: str) -> Any:
    """``value`` (a field of a block or message), if it has its declared type (msgspec does not
    check the types of a struct built in Python); otherwise :class:`InvalidMessageError`."""
    if not isinstance(value, typ) or (isinstance(value, bool) and bool not in _types(typ)):
        raise InvalidMessageError(
            f"{where}: {name} must be {_type_name(typ)}, got {type(value).__name__}"
        )
    return value


def _types(typ: type | tuple[type, ...]) -> tuple[type, ...]:
    return typ if isinstance(typ, tuple) else (typ,)


_UNSET_TYPE = type(UNSET)


def _checked_fields(block: Block, where: str) -> None:
    """Refuse a block whose fields do not have their declared types."""
    if isinstance(block, TextBlock):
        _typed(block.text, str, where, "text")
    elif isinstance(block, ToolUseBlock):
        _typed(block.id, str, where, "id")
        _typed(block.name, str, where, "name")
        _typed(block.input, dict, where, "input")
        _typed(block.input_json, (str, _UNSET_TYPE), where, "input_json")
    elif isinstance(block, ToolResultBlock):
        _typed(block.tool_use_id, str, where, "tool_use_id")
        _typed(block.content, (str, tuple, _UNSET_TYPE), where, "content")
        _typed(block.is_error, (bool, _UNSET_TYPE), where, "is_error")
    elif isinstance(block, ThinkingBlock):
        _typed(block.thinking, str, where, "thinking")
        _typed(block.signature, (str, _UNSET_TYPE), where, "signature")
    elif isinstance(block, RedactedThinkingBlock):
        _typed(block.data, str, where, "data")
    elif isinstance(block, CompactionBlock):
        _typed(block.content, (str, type(None), _UNSET_TYPE), where, "content")
        _typed(block.encrypted_content, (str, type(None), _UNSET_TYPE), where, "encrypted_content")
    elif isinstance(block, RawBlock):
        _typed(block.data, dict, where, "data")
        _typed(block.json, (str, _UNSET_TYPE), where, "json")


def _block_to_dict(block: Block, where: str) -> dict[str, Any]:
    _checked_fields(block, where)
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text, **_extra_out(block.extra, _TEXT, where)}
    if isinstance(block, ToolUseBlock):
        if block.input_json is not UNSET:
            if block.input != {}:
                raise InvalidMessageError(f"{where}: a tool_use with input_json has input {{}}")
            value = _kept(block.input_json, where, "input_json")
        else:
            value = _copy(block.input, where)
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": value,
            **_extra_out(block.extra, _KNOWN_KEYS["tool_use"], where),
        }
    if isinstance(block, ToolResultBlock):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if isinstance(block.content, str):
            out["content"] = block.content
        elif block.content is not UNSET:
            out["content"] = [_block_to_dict(b, _at(where, " content")) for b in block.content]
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
        if block.json is not UNSET:
            kept: dict[str, Any] = _kept(block.json, where, "a raw block's json")
            if block.data != _kept_data(kept):
                raise InvalidMessageError(
                    f"{where}: a raw block with json has data {_kept_data(kept)!r}"
                )
            return kept
        kind = block.data.get("type") if isinstance(block.data, dict) else None
        if type(kind) is not str or kind in _KNOWN_KEYS:
            raise InvalidMessageError(
                f"{where}: a RawBlock needs a str 'type' that liteagent does not model, "
                f"got {shown(kind)}"
            )
        copied: dict[str, Any] = _copy(block.data, where)
        return copied
    raise InvalidMessageError(f"{where}: not a content block: {type(block).__name__}")


def message_to_dict(message: Message, *, where: str = "message") -> dict[str, Any]:
    """Return ``message`` in the Anthropic Messages API shape (a fresh dict).

    A message marked :attr:`~Message.string_content` whose content is one text block without
    other keys gets that text as its string ``content``; with any other content (e.g. after a
    compaction pass added a block to it) the mark is ignored and ``content`` is a list.
    Raises :class:`InvalidMessageError` for a message that would not convert back to itself:
    an ``extra`` that is empty or repeats a modelled key, a :class:`RawBlock` of a modelled
    type, a value that is not JSON.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
    role: object = message.role  # typed as a Literal, but a Message built in Python may hold any
    if type(role) is not str or role not in ("user", "assistant"):
        raise InvalidMessageError(f"{where}: role must be 'user' or 'assistant', got {shown(role)}")
    _typed(message.content, tuple, where, "content")
    try:
        blocks = [_block_to_dict(b, f"{where} content[{i}]") for i, b in enumerate(message.content)]
    except RecursionError as e:
        raise InvalidMessageError(f"{where}: nested too deeply") from e
    if type(message.string_content) is not bool:
        raise InvalidMessageError(f"{where}: string_content must be a bool")
    content: str | list[dict[str, Any]] = blocks
    if message.string_content and _one_text(blocks):
        content = blocks[0]["text"]
    out: dict[str, Any] = {"role": message.role, "content": content}
    out.update(_extra_out(message.extra, _MESSAGE_KEYS, where))
    if message.extra_json is not None:
        out.update(_extra_json_out(message, where))
    return out


def _extra_json_out(message: Message, where: str) -> dict[str, Any]:
    """The keys a message keeps as JSON text (:attr:`Message.extra_json`)."""
    if message.extra is not UNSET:
        raise InvalidMessageError(f"{where}: extra and extra_json cannot both be set")
    keys = _kept(message.extra_json, where, "extra_json")
    return _extra_out(keys, _MESSAGE_KEYS, where)


def _one_text(blocks: list[dict[str, Any]]) -> bool:
    """Whether ``blocks`` is one text block without other keys (what a string content is)."""
    return (
        len(blocks) == 1
        and blocks[0].keys() == _TEXT
        and blocks[0]["type"] == "text"
        and type(blocks[0]["text"]) is str
    )


def messages_to_dicts(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Return ``messages`` in the Anthropic Messages API shape, one fresh dict per message.

    Raises :class:`InvalidMessageError` naming the index of the first message that does not
    convert (or saying that ``messages`` is not a list of them).
    """
    given: object = messages  # typed as an Iterable, but a caller may pass anything
    if isinstance(given, (str, bytes, Mapping, Message)) or not isinstance(given, Iterable):
        raise InvalidMessageError(f"expected a list of messages, got {type(given).__name__}")
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


def _kept_data(block: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of a raw block kept as JSON text: its type, when that can be stored."""
    kind = block.get("type")
    return {"type": kind} if isinstance(kind, str) and _encodable(kind) else {}


def _at(where: str, more: str) -> str:
    """``where`` followed by ``more``: where a value nested in it is, named only so deep (a
    block nested thousands of times must not make a message of kilobytes)."""
    if len(where) < _WHERE_MAX:
        return where + more
    return where if where.endswith(" ...") else f"{where} ..."


_WHERE_MAX = 200


def _block_from_dict(d: Any, where: str) -> Block:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(f"{where}: a block must be an object, got {type(d).__name__}")
    kind = _req(d, "type", str, where)
    where = _at(where, f" ({kind})")
    own = d
    if kind == "tool_result" and isinstance(d.get("content"), list):
        own = {k: v for k, v in d.items() if k != "content"}  # its blocks are converted alone
    if unstorable(own if isinstance(own, dict) else dict(own)) is not None:
        return _lossless(d, kind, where)
    return _stored_block(d, kind, where)


def _lossless(d: Mapping[str, Any], kind: str, where: str) -> Block:
    """The storable form of block ``d``, which holds a value the log cannot store."""
    copied: dict[str, Any] = _copy(dict(d), where)
    if _paired(copied):
        raise InvalidMessageError(
            f"{where}: a string holds a high surrogate followed by a low one as two code points, "
            "which JSON cannot write (it reads the pair back as one character)"
        )
    if kind == "tool_use" and isinstance(copied.get("input"), dict):
        rest = {k: v for k, v in copied.items() if k != "input"}
        if unstorable(rest) is None:
            block = _stored_block({**rest, "input": {}}, kind, where)
            assert isinstance(block, ToolUseBlock)
            return ToolUseBlock(
                block.id,
                block.name,
                {},
                block.extra,
                input_json=canonical_json(copied["input"], where=where),
            )
    _stored_block(d, kind, where)  # the same checks as a storable block of its type
    return RawBlock(_kept_data(copied), json=canonical_json(copied, where=where))


def _stored_block(d: Mapping[str, Any], kind: str, where: str) -> Block:
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
                    _block_from_dict(b, _at(where, f" content[{i}]")) for i, b in enumerate(raw)
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
    """Return the :class:`Message` for one Anthropic-shaped message dict; it can be stored in
    the log (a block holding a value msgpack cannot store comes back in its lossless form, see
    the module docstring).

    Raises :class:`InvalidMessageError` naming the message, block and field that is wrong.
    """
    if nests_deeper(d, MAX_MESSAGE_NESTING):
        raise InvalidMessageError(
            f"{where}: nested more than {MAX_MESSAGE_NESTING} levels of arrays and objects "
            "(a session stores no deeper message)"
        )
    try:
        return _message_from_dict(d, where)
    except RecursionError as e:
        raise InvalidMessageError(f"{where}: nested too deeply") from e
    except LiteAgentError:
        raise
    except Exception as e:  # a value whose own methods raise (a str subclass's __eq__, say)
        raise InvalidMessageError(
            f"{where}: a value cannot be read (its own {type(e).__name__})"
        ) from e


def _message_from_dict(d: Any, where: str) -> Message:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(f"{where}: a message must be an object, got {type(d).__name__}")
    role = _req(d, "role", str, where)
    if role not in ("user", "assistant"):
        raise InvalidMessageError(f"{where}: role must be 'user' or 'assistant', got {shown(role)}")
    raw = _req(d, "content", (str, list), where)
    if isinstance(raw, str):  # one text block (a lossless raw block if it cannot be stored)
        content: tuple[Block, ...] = (
            _block_from_dict({"type": "text", "text": raw}, f"{where} content"),
        )
    else:
        content = tuple(_block_from_dict(b, f"{where} content[{i}]") for i, b in enumerate(raw))
    rest = {k: v for k, v in d.items() if k not in _MESSAGE_KEYS}
    if rest and unstorable(rest) is not None:  # kept as its JSON text
        copied = _copy(rest, where)
        if _paired(copied):
            raise InvalidMessageError(
                f"{where}: an extra key holds a high surrogate followed by a low one as two code "
                "points, which JSON cannot write (it reads the pair back as one character)"
            )
        return Message(
            role,
            content,
            string_content=isinstance(raw, str),
            extra_json=canonical_json(copied, where=where),
        )
    return Message(
        role,
        content,
        extra=_copy(rest, where) if rest else UNSET,
        string_content=isinstance(raw, str),
    )


def messages_from_dicts(dicts: Iterable[Any]) -> list[Message]:
    """Return the messages for a list of Anthropic-shaped message dicts.

    Raises :class:`InvalidMessageError` naming the index of the first bad message.
    """
    if isinstance(dicts, (str, bytes, Mapping)) or not isinstance(dicts, Iterable):
        raise InvalidMessageError(f"expected a list of message dicts, got {type(dicts).__name__}")
    return [message_from_dict(d, where=f"message {i}") for i, d in enumerate(dicts)]
