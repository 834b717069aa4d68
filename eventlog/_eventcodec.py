"""Encoding of event bodies: one reused encoder, one reused decoder per kind (two-phase decode)."""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from ._errors import CodecError, InvalidEventError
from ._events import Event, OpaqueEvent

__all__ = ["EVENT_KINDS", "decode_body", "encode_body", "kind_of"]

_EVENT_TYPES: tuple[type[Any], ...] = get_args(Event)
_KIND_BY_TYPE: dict[type[Any], str] = {
    t: str(t.__struct_config__.tag) for t in _EVENT_TYPES
}
EVENT_KINDS: frozenset[str] = frozenset(_KIND_BY_TYPE.values())
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {
    kind: msgspec.msgpack.Decoder(t) for t, kind in _KIND_BY_TYPE.items()
}
_ENCODER = msgspec.msgpack.Encoder()


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
    """Return ``(kind, body bytes)`` for ``event``.

    Raises :class:`InvalidEventError` for a non-event and :class:`CodecError` when the event holds
    a value msgpack cannot encode (a set inside a tool input, an integer over 64 bits, ...).
    """
    if type(event) is OpaqueEvent:
        if not event.kind or not isinstance(event.data, bytes):
            raise InvalidEventError("an OpaqueEvent needs a non-empty kind and bytes data")
        return event.kind, event.data
    kind = kind_of(event)
    try:
        return kind, _ENCODER.encode(event)
    except (TypeError, OverflowError, msgspec.EncodeError) as e:
        raise CodecError(f"cannot encode {kind} event: {e}") from e


def decode_body(kind: str, data: bytes | memoryview) -> Event | OpaqueEvent:
    """Decode one stored body; an unknown ``kind`` gives an :class:`OpaqueEvent`.

    Raises ``msgspec.DecodeError`` (or ``RecursionError``) for bytes that are not a valid event of
    ``kind``; callers translate that into :class:`CodecError` naming the session and seq.
    """
    decoder = _DECODERS.get(kind)
    if decoder is None:
        return OpaqueEvent(kind, bytes(data))
    result: Event = decoder.decode(data)
    return result
