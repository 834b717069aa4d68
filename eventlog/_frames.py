"""The on-disk format of the file backend: a file header, then one checksummed frame per append.

::

    file header (32 bytes):  magic "LALOG\\0\\0\\1" | u32 version | u32 flags | u64 generation
                             | u64 xxh3_64 of the previous 24 bytes
    frame:                   u32 payload length | u64 first seq | u32 count
                             | u32 xxh32 of the previous 16 bytes (the header's own check)
                             | u64 xxh3_64 of (the first 16 bytes + payload)
                             | payload | u32 total frame length (a trailer, to find the last frame)
    payload:                 codec.encode(msgpack [[ts, kind, body], ...])   (one record per event)

One append is one frame written by one ``write``, so a batch is all there or not at all. A frame
that a crash cut short can only be the last thing in the file: a *torn tail* is a frame with an
intact header that reaches past the end of the file, an incomplete header, or all-zero bytes.
Any other damage (a bad checksum, a damaged header followed by more data) is corruption.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

import msgspec
import xxhash

from ._codec import Codec
from ._contract import EncodedEvent
from ._errors import CodecError, InvalidArgumentError

__all__ = [
    "FILE_HEADER_SIZE",
    "FORMAT_VERSION",
    "FRAME_OVERHEAD",
    "Damage",
    "Frame",
    "FrameScanner",
    "HeaderInfo",
    "Record",
    "build_frame",
    "build_header",
    "decode_payload",
    "encode_payload",
    "encode_records",
    "parse_header",
    "record_count",
]

MAGIC = b"LALOG\x00\x00\x01"
FORMAT_VERSION = 1
_HEADER_BODY = struct.Struct("<8sIIQ")
_U64 = struct.Struct("<Q")
FILE_HEADER_SIZE = _HEADER_BODY.size + 8  # 32
_PREFIX = struct.Struct("<IQI")  # payload length, first seq, count
_HCRC = struct.Struct("<I")
_FRAME_HEAD = struct.Struct("<IQIIQ")  # ... + header check + checksum
_TRAILER = struct.Struct("<I")
FRAME_HEAD_SIZE = _FRAME_HEAD.size  # 28
FRAME_OVERHEAD = FRAME_HEAD_SIZE + _TRAILER.size  # 32
MAX_PAYLOAD = 0xFFFFFFFF - FRAME_OVERHEAD

_xxh = xxhash.xxh3_64_intdigest
_xxh_stream = xxhash.xxh3_64
_STREAM_FROM = 4096  # hash larger payloads in two steps instead of copying them


def _frame_checksum(prefix: bytes, payload: bytes | memoryview) -> int:
    """xxh3_64 of ``prefix + payload``, without copying a large payload."""
    if len(payload) < _STREAM_FROM:
        return _xxh(prefix + bytes(payload))
    h = _xxh_stream(prefix)
    h.update(payload)
    return int(h.intdigest())


_xxh32 = xxhash.xxh32_intdigest


class Record(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One event inside a frame's payload (its seq is implied by the frame)."""

    ts: float
    kind: str
    body: msgspec.Raw


_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder(list[Record])


class HeaderInfo(NamedTuple):
    """What a valid file header says."""

    version: int
    generation: int


def build_header(generation: int) -> bytes:
    """Return the 32-byte file header for ``generation``."""
    body = _HEADER_BODY.pack(MAGIC, FORMAT_VERSION, 0, generation)
    return body + _U64.pack(_xxh(body))


def parse_header(data: bytes) -> HeaderInfo | None:
    """Return the header's contents, or ``None`` when the 32 bytes are not a valid header."""
    if len(data) < FILE_HEADER_SIZE:
        return None
    body = data[: _HEADER_BODY.size]
    magic, version, _flags, generation = _HEADER_BODY.unpack(body)
    (checksum,) = _U64.unpack_from(data, _HEADER_BODY.size)
    if magic != MAGIC or checksum != _xxh(body):
        return None
    return HeaderInfo(version, generation)


def encode_payload(batch: list[EncodedEvent], ts: float, codec: Codec | None) -> bytes:
    """Return a frame payload for ``batch``; a failing codec gives :class:`CodecError`."""
    return encode_records([Record(ts, e.kind, msgspec.Raw(e.body)) for e in batch], codec)


def encode_records(records: list[Record], codec: Codec | None) -> bytes:
    """Return a frame payload holding ``records``; a failing codec gives :class:`CodecError`."""
    raw = _ENC.encode(records)
    if codec is not None:
        try:
            raw = codec.encode(raw)
        except Exception as e:
            raise CodecError(f"the storage codec failed to encode a batch: {e}") from e
        if not isinstance(raw, bytes):
            raise CodecError(f"the storage codec returned {type(raw).__name__}, not bytes")
    if len(raw) > MAX_PAYLOAD:
        raise InvalidArgumentError(f"a batch of {len(raw)} bytes exceeds the frame limit")
    return raw


def decode_payload(
    payload: bytes | memoryview, codec: Codec | None, session_id: str, first_seq: int
) -> list[Record]:
    """Return the records of a frame payload; a wrong codec gives :class:`CodecError`."""
    data = payload
    if codec is not None:
        try:
            data = codec.decode(bytes(payload))
        except Exception as e:
            raise CodecError(
                f"the storage codec could not decode a frame: {e}",
                session_id=session_id,
                seq=first_seq,
            ) from e
    try:
        return _DEC.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        raise CodecError(
            f"a frame's payload is not a list of events ({e}); wrong storage codec?",
            session_id=session_id,
            seq=first_seq,
        ) from e


def record_count(payload: bytes | memoryview, codec: Codec | None) -> int | None:
    """The number of records a frame payload holds, read from the header of its msgpack array
    (after the codec) without decoding the records; None when it cannot be told (the payload
    does not decode: a codec error for the reader to report)."""
    data: bytes | memoryview = payload
    if codec is not None:
        try:
            data = codec.decode(bytes(payload))
        except Exception:  # noqa: BLE001 -- reported as a codec error by the reader
            return None
    if not data:
        return None
    b = data[0]
    if 0x90 <= b <= 0x9F:  # fixarray
        return b & 0x0F
    if b == 0xDC and len(data) >= 3:  # array 16
        return int.from_bytes(data[1:3], "big")
    if b == 0xDD and len(data) >= 5:  # array 32
        return int.from_bytes(data[1:5], "big")
    return None


def build_frame(payload: bytes, first_seq: int, count: int) -> bytes:
    """Return the bytes of one frame holding ``count`` events starting at ``first_seq``."""
    prefix = _PREFIX.pack(len(payload), first_seq, count)
    checksum = _frame_checksum(prefix, payload)
    return b"".join(
        (
            prefix,
            _HCRC.pack(_xxh32(prefix)),
            _U64.pack(checksum),
            payload,
            _TRAILER.pack(FRAME_OVERHEAD + len(payload)),
        )
    )


class Frame(NamedTuple):
    """A whole, checksum-verified frame found at ``offset`` (``payload`` unverified if skipped)."""

    offset: int
    first_seq: int
    n_events: int
    payload: bytes | memoryview
    end: int

    @property
    def last_seq(self) -> int:
        """The seq of the frame's last event."""
        return self.first_seq + self.n_events - 1


class Damage(NamedTuple):
    """Bytes at ``offset`` that are not a whole frame; ``torn`` when they can only be an
    unfinished last write (see the module docstring); otherwise they are corruption."""

    offset: int
    torn: bool
    reason: str


class FrameScanner:
    """Reads frames sequentially from a file descriptor between two offsets, in large chunks.

    Iterating yields :class:`Frame` objects and at most one :class:`Damage`, after which it stops.
    Frames whose last seq is ``<= skip_through`` are not checksummed (their bytes are not used).
    """

    CHUNK = 1 << 20

    def __init__(self, fd: int, start: int, end: int, skip_through: int = 0) -> None:
        self._fd = fd
        self.offset = start
        self.end = end
        self._skip = skip_through
        self._buf = b""
        self._mem = memoryview(self._buf)
        self._buf_off = start

    def _bytes(self, offset: int, n: int) -> bytes:
        """Return ``n`` bytes at ``offset`` (fewer only at the end of the range)."""
        rel = self._fill(offset, n)
        return self._buf[rel : rel + n]

    def _view(self, offset: int, n: int) -> memoryview:
        """Like :meth:`_bytes`, without copying (valid until the next read of the scanner)."""
        rel = self._fill(offset, n)
        return self._mem[rel : rel + n]

    def _fill(self, offset: int, n: int) -> int:
        """Make sure the buffer holds ``n`` bytes at ``offset``; return their index in it."""
        rel = offset - self._buf_off
        if rel < 0 or rel + n > len(self._buf):
            want = max(n, self.CHUNK)
            want = min(want, self.end - offset)
            self._buf = os.pread(self._fd, want, offset)
            self._mem = memoryview(self._buf)
            self._buf_off = offset
            rel = 0
        return rel

    def __iter__(self) -> Iterator[Frame | Damage]:
        while self.offset < self.end:
            off = self.offset
            remaining = self.end - off
            if remaining < FRAME_HEAD_SIZE:
                yield self._damage(off, "an incomplete frame header", True)
                return
            head = self._bytes(off, FRAME_HEAD_SIZE)
            length, first_seq, count, hcrc, checksum = _FRAME_HEAD.unpack(head)
            if hcrc != _xxh32(head[:16]):
                yield self._damage(off, "a damaged frame header", False)
                return
            total = FRAME_OVERHEAD + length
            if total > remaining:
                yield self._damage(off, f"an unfinished frame ({remaining} of {total} bytes)", True)
                return
            frame_end = off + total
            skip = first_seq + count - 1 <= self._skip
            payload: bytes | memoryview
            tail: bytes | memoryview
            if skip:
                tail = self._bytes(frame_end - 4, 4)
                payload = b""
            else:
                data = self._view(off + FRAME_HEAD_SIZE, length + 4)
                payload, tail = data[:-4], data[-4:]
            if _TRAILER.unpack(tail)[0] != total or count == 0:
                yield self._damage(off, "a frame with a damaged trailer", False)
                return
            if not skip and _frame_checksum(head[:16], payload) != checksum:
                yield self._damage(off, "a frame whose checksum does not match", False)
                return
            self.offset = frame_end
            yield Frame(off, first_seq, count, payload, frame_end)

    def _damage(self, offset: int, reason: str, torn: bool) -> Damage:
        """Damage at ``offset``; also torn when every byte from there to the end is zero."""
        return Damage(offset, torn or self._all_zero(offset), reason)

    def _all_zero(self, offset: int) -> bool:
        pos = offset
        while pos < self.end:
            n = min(self.CHUNK, self.end - pos)
            if self._bytes(pos, n).strip(b"\0"):
                return False
            pos += n
        return True
