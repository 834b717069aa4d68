"""What a pass may change: everything except the first user prompt and the most recent turn.

Every pass and compactor keeps two parts of a conversation verbatim (see :mod:`._contract`):

- the *first user prompt*: the first message for which :func:`~._turns.is_prompt` holds (usually
  message 0; a transcript that starts with tool results has it later, or not at all);
- the *most recent turn*, as :func:`~._turns.split_turns` groups it: the last prompt or model
  step to the end. It may end with an assistant message whose ``tool_use`` calls are still
  unanswered; that is why it is never touched.

:class:`Scope` computes both once per call, in one pass over the messages.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from liteagent.eventlog.types import Message

from ._turns import is_prompt, opens_turn

__all__ = ["Scope"]


class Scope:
    """The turn layout of one conversation and the indices a pass must not change.

    ``turn_starts`` holds the index where each turn begins (``[0, ...]``, empty for an empty
    conversation); ``first_prompt`` is the index of the first user prompt (``None`` if there is
    none); ``last_turn_start`` is where the most recent turn begins (``0`` when there is only one
    turn, or no message at all).
    """

    __slots__ = ("first_prompt", "last_turn_start", "length", "turn_starts")

    def __init__(self, messages: Sequence[Message]) -> None:
        starts: list[int] = []
        first: int | None = None
        previous: Message | None = None
        for i, m in enumerate(messages):
            if first is None and is_prompt(m):
                first = i
            if opens_turn(previous, m):
                starts.append(i)
            previous = m
        self.turn_starts: tuple[int, ...] = tuple(starts)
        self.first_prompt: int | None = first
        self.last_turn_start: int = starts[-1] if starts else 0
        self.length: int = len(messages)

    def frozen(self, index: int) -> bool:
        """Whether message ``index`` must stay verbatim (first prompt or most recent turn)."""
        return index == self.first_prompt or index >= self.last_turn_start

    def turn_of(self, index: int) -> int:
        """The number of the turn that contains message ``index`` (0-based)."""
        return max(bisect.bisect_right(self.turn_starts, index) - 1, 0)

    def turn_end(self, turn: int) -> int:
        """The index just past the last message of turn number ``turn``."""
        nxt = turn + 1
        return self.turn_starts[nxt] if nxt < len(self.turn_starts) else self.length
