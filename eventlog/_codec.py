"""Storage codecs: a byte transform applied to every stored frame and blob (compression,
encryption).

A codec's ``encode`` runs before anything is written: if it raises, nothing is stored. Its
``decode`` runs on read: if it raises, the read fails with :class:`CodecError` naming the session
and seq; there is never a plaintext fallback.
"""

from __future__ import annotations

import zlib
from typing import Protocol, runtime_checkable

from ._errors import CodecError, InvalidArgumentError
from ._shown import shown

__all__ = ["Codec", "check_codec", "codec_decode", "codec_encode", "zlib_codec"]


@runtime_checkable
class Codec(Protocol):
    """A reversible byte transform: ``decode(encode(b)) == b`` for every ``b``."""

    def encode(self, data: bytes) -> bytes:
        """Return the stored form of ``data``; raise on failure (nothing is then written)."""
        ...

    def decode(self, data: bytes) -> bytes:
        """Return the original bytes of a stored form; raise when ``data`` is not one."""
        ...


class _ZlibCodec:
    """zlib (DEFLATE) compression."""

    __slots__ = ("level",)

    def __init__(self, level: int) -> None:
        self.level = level

    def encode(self, data: bytes) -> bytes:
        return zlib.compress(data, self.level)

    def decode(self, data: bytes) -> bytes:
        return zlib.decompress(data)

    def __repr__(self) -> str:
        return f"zlib_codec(level={self.level})"


def zlib_codec(level: int = 6) -> Codec:
    """Return a codec that compresses with zlib at ``level`` (0-9, or -1 for zlib's default)."""
    if type(level) is not int or not -1 <= level <= 9:
        raise InvalidArgumentError(f"zlib level must be an int from -1 to 9, got {shown(level)}")
    return _ZlibCodec(level)


def check_codec(codec: object) -> Codec | None:
    """``codec`` if it is ``None`` or has ``encode`` and ``decode``, else
    :class:`InvalidArgumentError`."""
    if codec is not None and not isinstance(codec, Codec):
        raise InvalidArgumentError(f"codec must have encode() and decode(), got {shown(codec)}")
    return codec


def codec_encode(codec: Codec, data: bytes, what: str) -> bytes:
    """``codec.encode(data)``; anything it raises, or a result that is not bytes, is
    :class:`CodecError` (nothing is then written)."""
    try:
        out = codec.encode(data)
    except Exception as e:
        raise CodecError(f"the storage codec could not encode {what}: {e}") from e
    if not isinstance(out, bytes):
        raise CodecError(f"the storage codec returned {type(out).__name__}, not bytes")
    return out


def codec_decode(
    codec: Codec, data: bytes, what: str, *, session_id: str | None = None, seq: int | None = None
) -> bytes:
    """``codec.decode(data)``; anything it raises is :class:`CodecError` naming the session and
    seq (never a plaintext fallback)."""
    try:
        out = codec.decode(bytes(data))
    except Exception as e:
        raise CodecError(
            f"the storage codec could not decode {what}: {e}", session_id=session_id, seq=seq
        ) from e
    if not isinstance(out, bytes):
        raise CodecError(
            f"the storage codec returned {type(out).__name__}, not bytes",
            session_id=session_id,
            seq=seq,
        )
    return out
