"""Whether stored events decode: how a repair tells damage from a wrong codec.

Checksums cannot catch an event whose stored bytes verify but do not decode (a writer's bug, a
hand edit that recomputed the checksum). Every backend's repair treats it the same way: after
events that decoded with the same codec it is damage (the prefix ends before it, the rest goes
to the quarantine, nothing deleted); as the session's very first event it is most likely the
wrong codec, and the repair changes nothing and raises :class:`CodecError`.
"""

from __future__ import annotations

import msgspec

from ._codec import Codec, codec_decode
from ._contract import decode_stored
from ._errors import CodecError

__all__ = ["decode_problem", "undecodable", "wrong_codec"]


def undecodable(
    codec: Codec | None, session_id: str, event: tuple[int, float, str, bytes | msgspec.Raw]
) -> CodecError | None:
    """The error reading the stored event ``(seq, ts, kind, body)`` gives (after ``codec``), or
    None when it decodes."""
    seq, ts, kind, body = event
    try:
        if codec is not None:
            body = codec_decode(codec, bytes(body), "an event", session_id=session_id, seq=seq)
        decode_stored(session_id, seq, ts, kind, body)
    except CodecError as e:
        return e
    return None


def wrong_codec(session_id: str, error: CodecError) -> CodecError:
    """The refusal of a repair whose session's first event does not decode."""
    return CodecError(
        f"repair changed nothing: the session's first event does not decode ({error}); open "
        "the store with the codec it was written with",
        session_id=session_id,
        seq=1,
    )


def decode_problem(
    codec: Codec | None, session_id: str, event: tuple[int, float, str, bytes], kept: int
) -> str | None:
    """For a repair's readable prefix of ``kept`` events: why ``event`` ends it (it does not
    decode), or None. Raises :func:`wrong_codec`'s error when it is the first event."""
    error = undecodable(codec, session_id, event)
    if error is None:
        return None
    if kept == 0:
        raise wrong_codec(session_id, error)
    return f"the event does not decode: {error}"
