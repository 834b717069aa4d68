"""Encoding of event bodies: one reused encoder, one reused decoder per kind (two-phase decode;
the decoding of a stored event is :func:`~._contract.decode_stored`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, get_args

import msgspec

from ._errors import CodecError, InvalidEventError
from ._events import Event, OpaqueEvent
from ._nesting import MAX_NESTING, packed_nests_deeper
from ._shown import shown

__all__ = ["DECODERS", "EVENT_KINDS", "encode_body", "is_utf8", "kind_of"]

_EVENT_TYPES: tuple[type[Any], ...] = get_args(Event)
_KIND_BY_TYPE: dict[type[Any], str] = {t: str(t.__struct_config__.tag) for t in _EVENT_TYPES}
EVENT_KINDS: frozenset[str] = frozenset(_KIND_BY_TYPE.values())
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {
    kind: msgspec.msgpack.Decoder(t) for t, kind in _KIND_BY_TYPE.items()
}
DECODERS: Mapping[str, msgspec.msgpack.Decoder[Any]] = MappingProxyType(_DECODERS)
"""One reused decoder per known kind (read-only)."""
_ENCODER = msgspec.msgpack.Encoder()
_ANY_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()
_TOO_DEEP = (
    f"its values nest more than {MAX_NESTING} levels of arrays and objects, deeper than "
    "every read could decode"
)


def kind_of(event: object) -> str:
    """Return the stored kind of ``event``; raise :class:`InvalidEventError` for a non-event."""
    if type(event) is OpaqueEvent:
        return event.kind
    kind = _KIND_BY_TYPE.get(type(event))
    if kind is None:
        raise InvalidEventError(
            f"expected a liteagent event (one of {sorted(EVENT_KINDS)} or OpaqueEvent), "
            f"got {type(event).__name__}"
        )
    return kind


def encode_body(event: Event | OpaqueEvent) -> tuple[str, bytes]:
    """Return ``(kind, body bytes)`` for ``event``, checked to read back.

    msgspec does not type-check a Struct when it is built, so every body is decoded again here:
    an event that would not read back (a non-str key in a dict, a wrongly typed field) is
    refused with :class:`CodecError` before anything is written, instead of making the session
    unreadable later. Raises :class:`InvalidEventError` for a non-event and for an
    :class:`OpaqueEvent` whose bytes are not one msgpack value (or not a valid event of its kind,
    when the kind is known), and :class:`CodecError` for values msgpack cannot encode (integers
    beyond 64 bits, strings with lone surrogates, arbitrary objects). Containers are stored as
    msgpack arrays and maps, so a set or tuple inside a dict value reads back as a list.
    """
    if type(event) is OpaqueEvent:
        return _encode_opaque(event)
    kind = kind_of(event)
    try:
        data = _ENCODER.encode(event)
    except (TypeError, ValueError, OverflowError) as e:  # ValueError: msgspec's, lone surrogates
        raise CodecError(f"cannot encode {kind} event: {e}") from e
    except RecursionError as e:  # far deeper than MAX_NESTING, or a writer's stack far too deep
        raise CodecError(f"cannot encode {kind} event: its values nest too deeply ({e})") from e
    if packed_nests_deeper(data, MAX_NESTING, _ANY_DECODER.decode):
        raise CodecError(f"cannot encode {kind} event: {_TOO_DEEP}")
    try:
        _DECODERS[kind].decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        raise CodecError(f"cannot encode {kind} event: it would not read back ({e})") from e
    return kind, data


_MAX_KIND = 128  # every store keeps a kind as text; liteagent's own are short snake_case


def is_utf8(text: str) -> bool:
    """Whether UTF-8 can encode ``text`` (it holds no lone surrogate): what every store keeps."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _encode_opaque(event: OpaqueEvent) -> tuple[str, bytes]:
    kind, data = event.kind, event.data
    if type(kind) is not str or not kind or not isinstance(data, bytes):
        raise InvalidEventError("an OpaqueEvent needs a non-empty str kind and bytes data")
    if len(kind) > _MAX_KIND or not kind.isprintable() or not is_utf8(kind):
        raise InvalidEventError(
            f"an OpaqueEvent's kind must be printable text of at most {_MAX_KIND} characters "
            f"that UTF-8 can encode, got {shown(kind)}"
        )
    if packed_nests_deeper(data, MAX_NESTING, _ANY_DECODER.decode):
        raise InvalidEventError(f"OpaqueEvent({kind!r}) bytes: {_TOO_DEEP}")
    decoder = _DECODERS.get(kind, _ANY_DECODER)
    try:
        decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        what = f"a valid {kind} event" if kind in _DECODERS else "one msgpack value"
        raise InvalidEventError(f"OpaqueEvent({kind!r}) bytes are not {what}: {e}") from e
    return kind, data
