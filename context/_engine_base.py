"""The ContextEngine's incremental base: the session's conversation as the model may see it,
kept up to date from the folded state in O(new entries) per request.

The base is built on the raw view (:class:`~._view.ConversationView`: the latest compaction's
replacement messages followed by the conversation entries after it, consecutive entries of one
role merged into one message), which it follows message by message. For every base message it
keeps:

- the *externalized* message: every tool result whose body was archived
  (:class:`~liteagent.eventlog.types.ContentArchived`) shows :func:`~._archive.archive_marker`
  instead;
- the *normalized* message: besides, the tool results the normalize level clears (old ones) or
  drops (superseded reads) show a one-line placeholder;
- token estimates and digests of both, and prefix sums of the estimates.

A tool result becomes *old* once ``keep_recent`` newer results exist and it is not in the most
recent turn; a ``read_file`` result is *superseded* once a later call reads the same path whole
or writes, edits or deletes it. Both only ever grow as the conversation grows, so each message's
normalized form is recomputed only when one of its results changes status. Anything that
rewrites history (a compaction record, a truncation by restore: the raw view starts over; a late
archive record for a result already seen) rebuilds the base from the raw view.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from typing import Any

from liteagent.eventlog import SessionState
from liteagent.eventlog.types import ContentArchived, Message, ToolResultBlock, ToolUseBlock

from ._archive import ARCHIVE_PREFIX, archive_marker, archive_ref
from ._bodies import body_bytes, cleared_marker
from ._tokens import estimate_block_tokens, estimate_tokens
from ._turns import is_prompt, opens_turn
from ._view import ConversationView, deepcopy_with_chains
from ._viewhash import message_digest

__all__ = ["EngineBase"]

_PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "delete_file"})


def superseded_marker(tool_use_id: str, path: str) -> str:
    """The placeholder of a read whose file was read again or changed later."""
    return (
        f"[liteagent:superseded {tool_use_id}: {path} was read again or changed later; "
        "this older output is left out]"
    )


@dataclass
class _Result:
    """One tool result of the base: where it is and what clearing it would save."""

    message: int
    block: int
    tool_use_id: str
    clear_saving: int
    clear_body: str
    sup_saving: int = 0
    sup_body: str = ""
    superseded: bool = False


@dataclass
class _Call:
    name: str
    path: str | None


@dataclass
class EngineBase:
    """See the module docstring. Use :meth:`sync` before reading the lists."""

    keep_recent: int
    preview_chars: int
    raw: ConversationView = field(default_factory=ConversationView)
    ext: list[Message] = field(default_factory=list)
    ext_digests: list[bytes] = field(default_factory=list)
    prefix: list[int] = field(default_factory=lambda: [0])
    norm: list[Message] = field(default_factory=list)
    norm_digests: list[bytes] = field(default_factory=list)
    results: list[_Result] = field(default_factory=list)
    result_messages: list[int] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    archived_counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reset_tracking()

    def _reset_tracking(self) -> None:
        self._epoch = -1  # the raw view's epoch the base follows (-1: rebuild at the next sync)
        self._archived_seen = 0
        self._archived: dict[str, ContentArchived] = {}
        self._calls: dict[str, _Call] = {}
        self._pending_reads: dict[str, list[int]] = {}
        self._result_index: dict[str, int] = {}
        self._old = 0
        self._savings: list[int] = [0]
        self._dirty = 0  # savings prefix entries from this result index on are stale
        self._norm: list[int] = []  # see norm_prefix()
        self._norm_from = 0  # its entries from this message index on are stale
        self._archived_total = 0
        self._cleared = 0
        # The digest chain of ext_digests[:_chained] (every message but the last, which a merge
        # may still replace), so ext_digest() is O(1).
        self._chain = hashlib.sha256()
        self._chained = 0

    def reset(self) -> None:
        """Forget everything (the next :meth:`sync` rebuilds from the raw view)."""
        for name in (
            "ext",
            "ext_digests",
            "norm",
            "norm_digests",
            "results",
            "result_messages",
            "turn_starts",
            "prompts",
            "archived_counts",
        ):
            getattr(self, name).clear()
        self.prefix[:] = [0]
        self._reset_tracking()

    def ext_digest(self) -> bytes:
        """``messages_digest(self.ext_digests)`` in O(1)."""
        chain = self._chain.copy()
        if self.ext_digests:
            chain.update(self.ext_digests[-1])
        return chain.digest()

    def __deepcopy__(self, memo: dict[int, Any]) -> EngineBase:
        """A deep copy (see :func:`~._view.deepcopy_with_chains`)."""
        return deepcopy_with_chains(self, memo)

    @property
    def last_seqs(self) -> list[int]:
        """The seq of the last entry in each base message (the raw view's)."""
        return self.raw.seqs

    @property
    def raw_total(self) -> int:
        """The estimated tokens of the raw messages (before externalizing)."""
        return self.raw.total_tokens

    # -- syncing ------------------------------------------------------------------------------

    def sync(self, state: SessionState) -> None:
        """Take in what ``state`` added since the last call: the raw view's new or changed
        messages (a merge changes the last one)."""
        raw = self.raw
        raw.update(state)
        if (
            raw.epoch != self._epoch
            or len(state.archived) < self._archived_seen
            or self._take_archived(state)
        ):
            self.reset()
            self._epoch = raw.epoch
            self._take_archived(state)
            start = 0
        else:
            start = raw.changed_from
            while len(self.ext) > start:
                self._pop()
        for k in range(start, len(raw.messages)):
            self._push(k)

    def _take_archived(self, state: SessionState) -> bool:
        """Record new archive events; True when one is for a result already in the base."""
        late = False
        for _, event in state.archived[self._archived_seen :]:
            self._archived[event.tool_use_id] = event
            if event.tool_use_id in self._result_index:
                late = True
        self._archived_seen = len(state.archived)
        return late

    @property
    def archived_total(self) -> int:
        """How many archived results the base shows as references."""
        return self._archived_total

    # -- one message --------------------------------------------------------------------------

    def _pop(self) -> None:
        i = len(self.ext) - 1
        while self.results and self.results[-1].message == i:
            r = self.results.pop()
            self.result_messages.pop()
            self._result_index.pop(r.tool_use_id, None)
        del self._savings[len(self.results) + 1 :]
        self._dirty = min(self._dirty, len(self.results))
        self._norm_from = min(self._norm_from, i)
        if self.turn_starts and self.turn_starts[-1] == i:
            self.turn_starts.pop()
        if self.prompts and self.prompts[-1] == i:
            self.prompts.pop()
        self._archived_total -= self.archived_counts.pop()
        for lst in (self.ext, self.ext_digests, self.prefix, self.norm, self.norm_digests):
            lst.pop()
        if self._chained > len(self.ext_digests):  # never after one pop; start the chain over
            self._chain, self._chained = hashlib.sha256(), 0

    def _push(self, i: int) -> None:
        """Take in raw message ``i`` (the next one: ``i == len(self.ext)``)."""
        raw = self.raw.messages[i]
        previous = self.ext[-1] if self.ext else None
        blocks = list(raw.content)
        archived = 0
        for j, b in enumerate(blocks):
            if type(b) is ToolResultBlock:
                blocks[j] = self._externalized(b)
                archived += blocks[j] is not b
            elif type(b) is ToolUseBlock:
                self._take_call(b)
        ext = Message(raw.role, tuple(blocks), raw.extra) if archived else raw
        if previous is None or opens_turn(previous, ext):
            self.turn_starts.append(i)
        if is_prompt(ext):
            self.prompts.append(i)
        self.ext.append(ext)
        if archived:
            digest, tokens = message_digest(ext), estimate_tokens((ext,))
        else:  # the raw message itself: the raw view measured it
            digest, tokens = self.raw.digests[i], self.raw.tokens[i]
        self.ext_digests.append(digest)
        while self._chained < i:
            self._chain.update(self.ext_digests[self._chained])
            self._chained += 1
        self.prefix.append(self.prefix[-1] + tokens)
        self.norm.append(ext)
        self.norm_digests.append(digest)
        self.archived_counts.append(archived)
        self._archived_total += archived
        for j, b in enumerate(ext.content):
            if type(b) is ToolResultBlock:
                self._take_result(i, j, b)

    def _externalized(self, block: ToolResultBlock) -> ToolResultBlock:
        event = self._archived.get(block.tool_use_id)
        if event is None or not isinstance(block.content, str):
            return block
        if archive_ref(block.content) != event.ref:
            return block
        marker = archive_marker(event.ref, block.content, preview_chars=self.preview_chars)
        return ToolResultBlock(
            block.tool_use_id, marker, is_error=block.is_error, extra=block.extra
        )

    def _take_call(self, block: ToolUseBlock) -> None:
        if block.id in self._calls:
            return
        path = block.input.get("path") if block.name in _PATH_TOOLS else None
        path = path if isinstance(path, str) else None
        whole = block.name == "read_file" and not set(block.input) - {"path"}
        self._calls[block.id] = _Call(block.name, path)
        if path is not None and (block.name != "read_file" or whole):
            for k in self._pending_reads.pop(path, []):
                self._supersede(k)

    def _take_result(self, i: int, j: int, block: ToolResultBlock) -> None:
        k = len(self.results)
        if isinstance(block.content, str) and block.content.startswith(ARCHIVE_PREFIX):
            clear = block.content.split("\n", 1)[0]
        else:
            clear = cleared_marker(block.tool_use_id, body_bytes(block.content))
        r = _Result(i, j, block.tool_use_id, _saving(block, clear), clear)
        call = self._calls.get(block.tool_use_id)
        if call is not None and call.name == "read_file" and call.path is not None:
            r.sup_body = superseded_marker(block.tool_use_id, call.path)
            r.sup_saving = _saving(block, r.sup_body)
            self._pending_reads.setdefault(call.path, []).append(k)
        self.results.append(r)
        self.result_messages.append(i)
        self._result_index[block.tool_use_id] = k

    def _supersede(self, k: int) -> None:
        if k >= len(self.results):
            return
        r = self.results[k]
        if not r.superseded:
            r.superseded = True
            self._dirty = min(self._dirty, k)
            self._refresh(r.message)

    # -- the normalize level ------------------------------------------------------------------

    def advance_old(self) -> None:
        """Mark as old every result but the ``keep_recent`` newest and those of the most recent
        turn, refreshing the normalized messages that change."""
        last_turn = self.turn_starts[-1] if self.turn_starts else 0
        in_last = bisect.bisect_left(self.result_messages, last_turn)
        old = max(min(len(self.results) - self.keep_recent, in_last), self._old)
        if old == self._old:
            return
        touched = sorted({self.results[k].message for k in range(self._old, old)})
        self._cleared += sum(1 for k in range(self._old, old) if self.results[k].clear_saving)
        self._dirty = min(self._dirty, self._old)
        self._old = old
        for i in touched:
            self._refresh(i)

    def _refresh(self, i: int) -> None:
        """Recompute the normalized form of base message ``i``."""
        first = bisect.bisect_left(self.result_messages, i)
        m = self.ext[i]
        blocks = list(m.content)
        for k in range(first, len(self.results)):
            r = self.results[k]
            if r.message != i:
                break
            b = blocks[r.block]
            assert type(b) is ToolResultBlock
            if k < self._old and r.clear_saving > 0:
                body = r.clear_body
            elif r.superseded and r.sup_saving > 0:
                body = r.sup_body
            else:
                continue
            blocks[r.block] = ToolResultBlock(
                b.tool_use_id, body, is_error=b.is_error, extra=b.extra
            )
        new = Message(m.role, tuple(blocks), m.extra)
        self.norm[i] = new
        self.norm_digests[i] = message_digest(new)

    # -- totals -------------------------------------------------------------------------------

    def saving_before(self, i: int) -> int:
        """What normalizing saves in base messages ``[0, i)``."""
        n = len(self.results)
        if self._dirty < n or len(self._savings) != n + 1:
            start = min(self._dirty, len(self._savings) - 1)
            if start < n:
                self._norm_from = min(self._norm_from, self.result_messages[start] + 1)
            del self._savings[start + 1 :]
            for k in range(start, n):
                r = self.results[k]
                s = r.clear_saving if k < self._old else (r.sup_saving if r.superseded else 0)
                self._savings.append(self._savings[-1] + s)
            self._dirty = n
        return self._savings[bisect.bisect_left(self.result_messages, i)]

    def norm_prefix(self) -> list[int]:
        """``p[i]`` = estimated tokens of normalized messages ``[0, i)`` (non-decreasing),
        recomputed only from the first message whose savings changed."""
        self.saving_before(0)
        m = len(self.prefix)
        start = min(self._norm_from, len(self._norm), m)
        del self._norm[start:]
        for i in range(start, m):
            self._norm.append(
                self.prefix[i] - self._savings[bisect.bisect_left(self.result_messages, i)]
            )
        self._norm_from = m
        return self._norm

    def cleared_counts(self) -> tuple[int, int]:
        """(old results cleared, recent superseded reads left out) at the normalize level."""
        cleared = self._cleared
        superseded = sum(1 for r in self.results[self._old :] if r.superseded and r.sup_saving)
        return cleared, superseded


def _saving(block: ToolResultBlock, body: str) -> int:
    new = ToolResultBlock(block.tool_use_id, body, is_error=block.is_error, extra=block.extra)
    return max(estimate_block_tokens(block) - estimate_block_tokens(new), 0)
