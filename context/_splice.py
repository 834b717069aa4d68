"""Removing a run of whole turns and leaving one marker where they were.

The marker is the text of :func:`removal_note` (``[liteagent: N earlier turns (M messages) were
removed to save context]``). Where it goes is decided only by the roles of the two kept
neighbours of the cut, ``prev`` (the message before it) and ``next`` (the one after it), and by
whether they are *frozen* (the first user prompt, or part of the most recent turn; see
:mod:`._scope`). In order of preference:

1. a user message of its own, when neither neighbour is a user message;
2. merged into a user neighbour that is not frozen: as a leading text block of ``next`` (after its
   ``tool_result`` blocks, which must come first), else as a trailing text block of ``prev``;
3. an assistant message of its own, when neither neighbour is an assistant message and the cut is
   not at the start (a conversation must start with a user message);
4. merged into an assistant neighbour that is not frozen (trailing in ``prev``, else leading in
   ``next``).

A merge is only allowed when ``prev`` and ``next`` already alternate. In a valid conversation a
cut that removes whole turns (:mod:`._turns`) ends before a user prompt or before an assistant
message that follows tool results:

- tool results, then an assistant step: the marker ends the tool-result message (rule 2; text
  after ``tool_result`` blocks is allowed);
- an assistant reply, then a prompt: the marker leads that prompt (rule 2), unless the prompt
  opens the most recent turn, in which case it ends the assistant reply (rule 4);
- two user messages (tool results or the first prompt, then a prompt), as a cut right after the
  first user prompt (which :func:`~._compactors.token_budget_compactor` makes) can give: an
  assistant marker message of its own (rule 3);
- the first user prompt, then an assistant step: the marker leads the assistant step (rule 4).

Roles keep alternating in every case, and no frozen message changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple

import msgspec

from liteagent.eventlog._messages import Role
from liteagent.eventlog.types import Message, TextBlock, ToolResultBlock

from ._scope import Scope
from ._tokens import estimate_tokens

__all__ = ["REMOVAL_PREFIX", "Cut", "choose_cut", "removal_note", "splice_boundary"]

REMOVAL_PREFIX = "[liteagent: "


def removal_note(turns: int, messages: int) -> str:
    """The marker text for ``turns`` removed turns holding ``messages`` messages."""
    t = "turn" if turns == 1 else "turns"
    m = "message" if messages == 1 else "messages"
    verb = "was" if turns == 1 else "were"
    return f"{REMOVAL_PREFIX}{turns} earlier {t} ({messages} {m}) {verb} removed to save context]"


def _lead(message: Message, note: str) -> Message:
    content = message.content
    k = 0
    while k < len(content) and type(content[k]) is ToolResultBlock:
        k += 1
    new = (*content[:k], TextBlock(text=note), *content[k:])
    return msgspec.structs.replace(message, content=new)


def _trail(message: Message, note: str) -> Message:
    return msgspec.structs.replace(message, content=(*message.content, TextBlock(text=note)))


def _own(role: Role, note: str) -> Message:
    return Message(role=role, content=(TextBlock(text=note),))


def splice_boundary(
    prev: Message | None,
    next_: Message | None,
    note: str,
    *,
    prev_frozen: bool,
    next_frozen: bool,
) -> list[Message] | None:
    """The messages that replace ``[prev, next_]`` (``None`` ones left out) once the marker
    ``note`` is placed between them, by the rules of the module docstring; ``None`` when no rule
    applies (e.g. the cut is at the start and the next message is a frozen user prompt)."""
    before = [prev] if prev is not None else []
    after = [next_] if next_ is not None else []
    roles = {m.role for m in (*before, *after)}
    alternating = len(roles) == len(before) + len(after)
    if "user" not in roles:
        return [*before, _own("user", note), *after]
    if alternating:
        if next_ is not None and next_.role == "user" and not next_frozen:
            return [*before, _lead(next_, note)]
        if prev is not None and prev.role == "user" and not prev_frozen:
            return [_trail(prev, note), *after]
    if prev is not None and "assistant" not in roles:
        return [*before, _own("assistant", note), *after]
    if alternating:
        if prev is not None and prev.role == "assistant" and not prev_frozen:
            return [_trail(prev, note), *after]
        if next_ is not None and next_.role == "assistant" and not next_frozen:
            return [*before, _lead(next_, note)]
    return None


class Cut(NamedTuple):
    """A chosen cut: the new messages and how many turns and messages it removed."""

    messages: list[Message]
    turns: int
    removed: int


def choose_cut(
    messages: Sequence[Message],
    scope: Scope,
    start: int,
    stops: Sequence[int],
    max_tokens: int | None,
) -> Cut | None:
    """Remove ``messages[start:stop]`` for the first ``stop`` in ``stops`` (ascending) whose
    result has at most ``max_tokens`` estimated tokens, or the last ``stop`` when none fits or
    ``max_tokens`` is ``None``; place the marker by :func:`splice_boundary`.

    Returns ``None`` when nothing would be removed, when no stop allows a marker, or when the
    result would not be smaller than ``messages`` by the estimate (a marker costs tokens too).
    """
    n = len(messages)
    candidates = [s for s in stops if start < s <= n]
    if not candidates or start < 0:
        return None
    per = [estimate_tokens((m,)) for m in messages]
    prefix = [0, *accumulate(per)]
    total = prefix[-1]
    prev = messages[start - 1] if start > 0 else None
    prev_frozen = start > 0 and scope.frozen(start - 1)
    best: tuple[int, list[Message], int, int] | None = None
    for stop in candidates:
        next_ = messages[stop] if stop < n else None
        turns = scope.turn_of(stop - 1) - scope.turn_of(start) + 1
        note = removal_note(turns, stop - start)
        joint = splice_boundary(
            prev,
            next_,
            note,
            prev_frozen=prev_frozen,
            next_frozen=next_ is not None and scope.frozen(stop),
        )
        if joint is None:
            continue
        around = (per[start - 1] if prev is not None else 0) + (per[stop] if stop < n else 0)
        after = total - (prefix[stop] - prefix[start]) - around + estimate_tokens(joint)
        best = (stop, joint, turns, after)
        if max_tokens is not None and after <= max_tokens:
            break
    if best is None:
        return None
    stop, joint, turns, after = best
    if after >= total:
        return None
    head = list(messages[: start - 1]) if prev is not None else []
    tail = list(messages[stop + 1 :]) if stop < n else []
    return Cut(messages=[*head, *joint, *tail], turns=turns, removed=stop - start)
