"""Turns: the unit every compaction cut aligns to.

A turn starts at a user message that carries no tool results (a prompt) and runs until the next
one. Tool results always answer calls of the assistant message just before them, inside the
same turn, so cutting between turns never separates a ``tool_use`` from its ``tool_result``.
Messages before the first prompt (rare: a transcript starting with tool results) form a turn of
their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog import Message, ToolResultBlock

__all__ = ["is_prompt", "split_turns"]


def is_prompt(message: Message) -> bool:
    """Whether ``message`` starts a turn: a user message without tool results."""
    return message.role == "user" and not any(
        type(b) is ToolResultBlock for b in message.content
    )


def split_turns(messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` grouped into turns, in order; concatenating them gives ``messages``."""
    turns: list[list[Message]] = []
    for m in messages:
        if not turns or is_prompt(m):
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns
