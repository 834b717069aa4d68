"""Storage codecs: a byte transform applied to every stored frame and blob (compression,
encryption).

A codec's ``encode`` runs before anything is written: if it raises, nothing is stored. Its
``decode`` runs on read: if it raises, the read fails with :class:`CodecError` naming the session
and seq; there is never a plaintext fallback.
"""

from __future__ import annotations

import zlib
from typing import Protocol, runtime_checkable

from ._errors import InvalidArgumentError

__all__ = ["Codec", "zlib_codec"]


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
        raise InvalidArgumentError(f"zlib level must be an int from -1 to 9, got {level!r}")
    return _ZlibCodec(level)
