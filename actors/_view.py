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

from liteagent.context import estimate_tokens, view_hash
from liteagent.eventlog import ConversationEntry, Message, SessionState

__all__ = ["ConversationView", "view_hash"]

_ENC = msgspec.msgpack.Encoder()


def _digest(message: Message) -> tuple[bytes, int]:
    data = _ENC.encode(message)
    return hashlib.sha256(data).digest(), len(data)


def _first_after(entries: Sequence[ConversationEntry], seq: int) -> int:
    """The index of the first entry whose seq is after ``seq`` (entries are in seq order)."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].seq <= seq:
            lo = mid + 1
        else:
            hi = mid
    return lo


class ConversationView:
    """The merged messages of a session's conversation entries, with per-message digests,
    encoded sizes and token estimates (:func:`~liteagent.context.estimate_tokens`, the measure
    the context engine uses), updated from the entries added since the last :meth:`sync`."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (after the state was reloaded from the log)."""
        self.messages: list[Message] = []
        self.digests: list[bytes] = []
        self.sizes: list[int] = []
        self.total_size = 0
        self.tokens: list[int] = []
        self.total_tokens = 0
        self._seen = 0
        self._tuple: tuple[Message, ...] = ()
        # The digest chain of every message but the last (which a merge may still replace).
        self._stable = hashlib.sha256()
        self._compactions = 0

    def sync(self, state: SessionState) -> tuple[Message, ...]:
        """Take in the entries of ``state`` not seen yet; return the messages as a tuple (the
        same tuple object while nothing changed). The latest compaction record replaces the
        conversation up to its ``last_seq`` with its ``replacement`` messages."""
        entries = state.entries
        if len(entries) < self._seen or len(state.compactions) != self._compactions:
            self.reset()
            self._compactions = len(state.compactions)
            if state.compactions:
                _, record = state.compactions[-1]
                for m in record.replacement:
                    self._add(m)
                self._seen = _first_after(entries, record.last_seq)
        if len(entries) == self._seen and self._tuple:
            return self._tuple
        for entry in entries[self._seen :]:
            self._add(entry.message)
        self._seen = len(entries)
        self._tuple = tuple(self.messages)
        return self._tuple

    def _add(self, m: Message) -> None:
        if self.messages and self.messages[-1].role == m.role:
            m = Message(m.role, self.messages[-1].content + m.content)
            self.total_size -= self.sizes[-1]
            self.total_tokens -= self.tokens[-1]
            self.messages[-1] = m
            self.digests[-1], self.sizes[-1] = _digest(m)
            self.tokens[-1] = estimate_tokens((m,))
        else:
            if self.digests:
                self._stable.update(self.digests[-1])  # the old last can no longer change
            self.messages.append(m)
            digest, size = _digest(m)
            self.digests.append(digest)
            self.sizes.append(size)
            self.tokens.append(estimate_tokens((m,)))
        self.total_size += self.sizes[-1]
        self.total_tokens += self.tokens[-1]

    def messages_digest(self) -> bytes:
        """The messages' digest :func:`view_hash` uses, in O(1)."""
        chain = self._stable.copy()
        if self.digests:
            chain.update(self.digests[-1])
        return chain.digest()
