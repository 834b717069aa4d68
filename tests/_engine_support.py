"""Helpers for the ContextEngine tests: a recorded transcript as a session log, and the checks
every projected view must pass."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

from liteagent.context import ContextView, estimate_tokens, split_turns
from liteagent.context._archive import archive_marker, archive_ref
from liteagent.context._turns import is_prompt
from liteagent.eventlog import StoredEvent, messages_from_dicts
from liteagent.eventlog._eventcodec import kind_of
from liteagent.eventlog.types import (
    AssistantMessage,
    ContentArchived,
    Event,
    Message,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    UserPrompt,
)

THRESHOLD = 16384


def load_messages(path: Path) -> list[Message]:
    """The messages of one recorded trajectory."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return list(messages_from_dicts([json.loads(line) for line in lines if line.strip()]))


def utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def events_for(message: Message, threshold: int = THRESHOLD) -> list[Event]:
    """The events a session appends for ``message`` (results over ``threshold`` archived)."""
    if message.role == "assistant":
        return [AssistantMessage(content=message.content)]
    out: list[Event] = []
    results = [b for b in message.content if type(b) is ToolResultBlock]
    for b in results:
        out.append(ToolResult(block=b))
        if isinstance(b.content, str) and utf8(b.content) > threshold:
            out.append(
                ContentArchived(
                    tool_use_id=b.tool_use_id,
                    ref=archive_ref(b.content),
                    chars=len(b.content),
                    size=utf8(b.content),
                )
            )
    rest = tuple(b for b in message.content if type(b) is not ToolResultBlock)
    if rest or not results:
        out.append(UserPrompt(content=rest))
    return out


def stored(events: Sequence[Event], first_seq: int = 1) -> list[StoredEvent]:
    return [StoredEvent(first_seq + i, 0.0, kind_of(e), e) for i, e in enumerate(events)]


def log_of(messages: Sequence[Message], threshold: int = THRESHOLD) -> list[StoredEvent]:
    """A session log holding ``messages``."""
    return stored([e for m in messages for e in events_for(m, threshold)])


def view_problems(
    view: ContextView,
    conversation: Sequence[Message],
    externalized_tail: Sequence[Message],
    fixed: int = 0,
) -> list[str]:
    """What is wrong with ``view`` of ``conversation`` (whose most recent turn, externalized,
    is ``externalized_tail``)."""
    problems: list[str] = []
    msgs = view.messages
    if "clear_tool_uses" not in view.native_edits and (
        view.tokens_after != fixed + estimate_tokens(msgs)
    ):
        problems.append(
            f"tokens_after {view.tokens_after} is not the view's estimate "
            f"{fixed + estimate_tokens(msgs)}"
        )
    if view.tokens_after > view.budget:
        problems.append(f"{view.tokens_after} tokens over the budget {view.budget}")
    if msgs and msgs[0].role != "user":
        problems.append("the view does not start with a user message")
    for a, b in itertools.pairwise(msgs):
        if a.role == b.role:
            problems.append("two consecutive messages have the same role")
            break
    for i, m in enumerate(msgs):
        uses = sorted(b.id for b in m.content if type(b) is ToolUseBlock)
        if m.role == "assistant" and i + 1 < len(msgs):
            answers = sorted(
                b.tool_use_id for b in msgs[i + 1].content if type(b) is ToolResultBlock
            )
            if uses != answers:
                problems.append(f"message {i} calls {uses}, message {i + 1} answers {answers}")
        if any(type(b) is ToolResultBlock for b in m.content) and (
            i == 0 or msgs[i - 1].role != "assistant"
        ):
            problems.append(f"message {i} has tool results without a call before it")
    first = next((m for m in conversation if is_prompt(m)), None)
    if first is not None and (not msgs or msgs[0].content[: len(first.content)] != first.content):
        problems.append("the view does not start with the first prompt's blocks")
    if list(msgs[-len(externalized_tail) :]) != list(externalized_tail):
        problems.append("the most recent turn is not the verbatim tail of the view")
    return problems


def externalized(
    messages: Sequence[Message], threshold: int = THRESHOLD, preview_chars: int = 400
) -> list[Message]:
    """``messages`` with every tool result over ``threshold`` bytes shown as its reference."""
    out = []
    for m in messages:
        blocks = tuple(
            ToolResultBlock(
                b.tool_use_id,
                archive_marker(archive_ref(b.content), b.content, preview_chars=preview_chars),
                is_error=b.is_error,
                extra=b.extra,
            )
            if type(b) is ToolResultBlock
            and isinstance(b.content, str)
            and utf8(b.content) > threshold
            else b
            for b in m.content
        )
        out.append(Message(m.role, blocks, m.extra))
    return out


def last_turn(messages: Sequence[Message]) -> list[Message]:
    """The most recent turn of ``messages``."""
    return split_turns(messages)[-1]
