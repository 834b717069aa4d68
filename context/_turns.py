"""Turns: the unit every compaction cut aligns to.

A turn is one step of the agent loop, the smallest piece that can be removed without breaking the
conversation:

- a user *prompt* (a user message carrying no tool results) opens a turn;
- so does an assistant message that follows a user message carrying tool results: it is the
  model's next step in the same task.

So a turn is a prompt with the model's first reply (and the tool results answering it), or one
further model reply with the tool results answering it. Tool results always answer calls of the
assistant message just before them, inside the same turn, so cutting between turns never
separates a ``tool_use`` from its ``tool_result``. And a long task, one prompt followed by
hundreds of tool calls, is hundreds of turns: compaction can shorten it, not only conversations
of many prompts. Messages before the first prompt (rare: a transcript starting with tool results)
belong to the first turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from liteagent.eventlog.types import Message, ToolResultBlock

__all__ = ["is_prompt", "opens_turn", "split_turns", "turn_starts"]


def is_prompt(message: Message) -> bool:
    """Whether ``message`` is a user prompt: a user message without tool results."""
    return message.role == "user" and not any(type(b) is ToolResultBlock for b in message.content)


def opens_turn(previous: Message | None, message: Message) -> bool:
    """Whether ``message``, coming right after ``previous`` (``None``: it is the first message),
    opens a turn."""
    if previous is None or is_prompt(message):
        return True
    return message.role == "assistant" and previous.role == "user" and not is_prompt(previous)


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """The index where each turn of ``messages`` begins (``[]`` for no messages)."""
    previous: Message | None = None
    starts: list[int] = []
    for i, m in enumerate(messages):
        if opens_turn(previous, m):
            starts.append(i)
        previous = m
    return starts


def split_turns(messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` grouped into turns, in order; concatenating them gives ``messages``."""
    bounds = [*turn_starts(messages), len(messages)]
    return [list(messages[a:b]) for a, b in pairwise(bounds)]
