"""The raw projection of a session — its folded conversation, as the model sees it without the
ContextEngine — kept up to date incrementally, with the digest of exactly those messages.

The conversation is the latest compaction's ``replacement`` messages followed by the
conversation entries after its ``last_seq`` (or all entries), consecutive messages of one role
joined into one (:func:`liteagent.eventlog.merge_adjacent`, as
:func:`liteagent.eventlog.conversation` joins them).

A turn must cost O(new events), not O(history): the view keeps the merged messages with the
digest (:func:`~._viewhash.message_digest`) and the token estimate
(:func:`~._tokens.estimate_tokens`) of each, looks only at the entries added since it last
looked, and keeps the digest chain of the messages a merge can no longer change, so
:meth:`ConversationView.messages_digest` is O(1). A truncation (restore) or a new compaction
record starts it over from the state.

This is the one implementation: the turn loop sends it when the engine is off,
:func:`~._replay.verify_replay` recomputes raw requests with it, and the ContextEngine's base
(:mod:`._engine_base`) is built on it, so the raw view and the engine's base agree byte for
byte by construction.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

from liteagent.eventlog import SessionState
from liteagent.eventlog._messages import merge_adjacent
from liteagent.eventlog.types import ConversationEntry, Message

from ._tokens import estimate_tokens
from ._viewhash import message_digest

__all__ = ["ConversationView", "deepcopy_with_chains"]

_HASH = type(hashlib.sha256())


T = TypeVar("T")


def deepcopy_with_chains(obj: T, memo: dict[int, Any]) -> T:
    """A deep copy of ``obj`` whose ``hashlib`` digest chains (which ``copy.deepcopy`` cannot
    copy) are copied with their own ``copy()``; for the ``__deepcopy__`` of the views."""
    clone = object.__new__(type(obj))
    memo[id(obj)] = clone
    for name, value in vars(obj).items():
        setattr(
            clone, name, value.copy() if isinstance(value, _HASH) else copy.deepcopy(value, memo)
        )
    return clone


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
    """The merged messages of a session's conversation (module docstring), with per-message
    digests, token estimates and seqs (of the last entry merged into each; a replacement
    message has its compaction's ``last_seq``), updated from the entries added since the last
    :meth:`update`.

    ``epoch`` changes whenever the view starts over, and ``changed_from`` is the index of the
    first message the last update changed or added, so a projection built on the view (the
    engine's base) follows it in O(changes) too. Not thread-safe: one session, one thread.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.reset()

    def reset(self) -> None:
        """Forget everything (the next update takes the whole state in)."""
        self.messages: list[Message] = []
        self.digests: list[bytes] = []
        self.tokens: list[int] = []
        self.seqs: list[int] = []
        self.total_tokens = 0
        self.changed_from = 0
        self.epoch += 1
        self._seen = 0
        self._compactions = 0
        self._tuple: tuple[Message, ...] | None = ()
        # The digest chain of every message but the last (which a merge may still replace).
        self._stable = hashlib.sha256()

    def update(self, state: SessionState) -> None:
        """Take in the entries of ``state`` not seen yet (all of them after a truncation or a
        new compaction record)."""
        entries = state.entries
        self.changed_from = len(self.messages)
        if len(entries) < self._seen or len(state.compactions) != self._compactions:
            self.reset()
            self._compactions = len(state.compactions)
            if state.compactions:
                _, record = state.compactions[-1]
                for m in record.replacement:
                    self._add(m, record.last_seq)
                self._seen = _first_after(entries, record.last_seq)
        if len(entries) > self._seen:
            for entry in entries[self._seen :]:
                self._add(entry.message, entry.seq)
            self._seen = len(entries)

    def sync(self, state: SessionState) -> tuple[Message, ...]:
        """:meth:`update`, then the messages as a tuple (the same tuple object while nothing
        changed)."""
        self.update(state)
        if self._tuple is None:
            self._tuple = tuple(self.messages)
        return self._tuple

    def _add(self, m: Message, seq: int) -> None:
        n = len(self.messages)
        merge_adjacent((m,), into=self.messages)
        self._tuple = None
        last = self.messages[-1]
        if len(self.messages) == n:  # joined into the last message
            self.total_tokens -= self.tokens[-1]
            self.digests[-1] = message_digest(last)
            self.tokens[-1] = estimate_tokens((last,))
            self.seqs[-1] = seq
            self.changed_from = min(self.changed_from, n - 1)
        else:
            if self.digests:
                self._stable.update(self.digests[-1])  # the old last can no longer change
            self.digests.append(message_digest(last))
            self.tokens.append(estimate_tokens((last,)))
            self.seqs.append(seq)
        self.total_tokens += self.tokens[-1]

    def __deepcopy__(self, memo: dict[int, Any]) -> ConversationView:
        """A deep copy (see :func:`deepcopy_with_chains`)."""
        return deepcopy_with_chains(self, memo)

    def messages_digest(self) -> bytes:
        """The messages' digest (:func:`~._viewhash.messages_digest` of :attr:`digests`), in
        O(1)."""
        chain = self._stable.copy()
        if self.digests:
            chain.update(self.digests[-1])
        return chain.digest()
