"""The hash of exactly what the model is shown, recomputable offline from the log.

``view_hash(request)`` is the SHA-256 of (the SHA-256 of the request without its messages) +
(the messages' digest), where the messages' digest is the SHA-256 of the concatenated SHA-256 of
each message's msgpack encoding. The two parts are kept apart so a live session can keep the
messages' digest up to date in O(new messages) and so a replay can check the messages it
re-projects against a record that holds the request part (``request_digest``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from liteagent.eventlog.types import Message, ModelRequest

__all__ = ["combine_view_hash", "message_digest", "messages_digest", "request_digest", "view_hash"]

_ENC = msgspec.msgpack.Encoder()


def message_digest(message: Message) -> bytes:
    """The SHA-256 (raw bytes) of one message's msgpack encoding."""
    return hashlib.sha256(_ENC.encode(message)).digest()


def messages_digest(digests: Iterable[bytes]) -> bytes:
    """The messages' digest from the per-message digests, in order."""
    return hashlib.sha256(b"".join(digests)).digest()


def request_digest(request: ModelRequest) -> str:
    """The SHA-256 (hex) of ``request`` without its messages."""
    return hashlib.sha256(_ENC.encode(msgspec.structs.replace(request, messages=()))).hexdigest()


def combine_view_hash(request_hex: str, digest: bytes) -> str:
    """The view hash from a request digest (hex) and a messages' digest."""
    return hashlib.sha256(bytes.fromhex(request_hex) + digest).hexdigest()


def view_hash(request: ModelRequest, digest: bytes | None = None) -> str:
    """The view hash of ``request`` (``digest``, when given, is its messages' digest)."""
    if digest is None:
        digest = messages_digest(message_digest(m) for m in request.messages)
    return combine_view_hash(request_digest(request), digest)
