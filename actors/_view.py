"""The raw projection of a session — its folded conversation — kept up to date incrementally,
with a hash of exactly what the model is shown.

A turn must cost O(new events), not O(history): the view keeps the merged messages and a digest
of each, and only looks at the entries added since it last looked. :func:`view_hash` is a pure
function of a request (so it can be recomputed offline from the log); the cached digests only
make it cheap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from liteagent.eventlog import Message, SessionState
from liteagent.providers import ModelRequest

__all__ = ["ConversationView", "view_hash"]

_ENC = msgspec.msgpack.Encoder()


def _digest(message: Message) -> tuple[bytes, int]:
    data = _ENC.encode(message)
    return hashlib.sha256(data).digest(), len(data)


def view_hash(request: ModelRequest, message_digests: Sequence[bytes] | None = None) -> str:
    """SHA-256 over the request without its messages, then each message's SHA-256, in order.

    ``message_digests`` (one per message, as :class:`ConversationView` keeps them) only saves
    recomputing them; the result is the same.
    """
    head = _ENC.encode(msgspec.structs.replace(request, messages=()))
    h = hashlib.sha256(hashlib.sha256(head).digest())
    if message_digests is None:
        message_digests = [_digest(m)[0] for m in request.messages]
    for d in message_digests:
        h.update(d)
    return h.hexdigest()


class ConversationView:
    """The merged messages of a session's conversation entries, with per-message digests and
    encoded sizes, updated from the entries added since the last :meth:`sync`."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (after the state was reloaded from the log)."""
        self.messages: list[Message] = []
        self.digests: list[bytes] = []
        self.sizes: list[int] = []
        self.total_size = 0
        self._seen = 0
        self._tuple: tuple[Message, ...] = ()

    def sync(self, state: SessionState) -> tuple[Message, ...]:
        """Take in the entries of ``state`` not seen yet; return the messages as a tuple (the
        same tuple object while nothing changed)."""
        entries = state.entries
        if len(entries) < self._seen:
            self.reset()
        if len(entries) == self._seen and self._tuple:
            return self._tuple
        for entry in entries[self._seen :]:
            m = entry.message
            if self.messages and self.messages[-1].role == m.role:
                m = Message(m.role, self.messages[-1].content + m.content)
                self.total_size -= self.sizes[-1]
                self.messages[-1] = m
                self.digests[-1], self.sizes[-1] = _digest(m)
            else:
                self.messages.append(m)
                digest, size = _digest(m)
                self.digests.append(digest)
                self.sizes.append(size)
            self.total_size += self.sizes[-1]
        self._seen = len(entries)
        self._tuple = tuple(self.messages)
        return self._tuple
