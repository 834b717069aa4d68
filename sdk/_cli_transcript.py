"""``lite-agent export ID`` and ``lite-agent import FILE``: transcripts as JSON Lines, one
message per line in the Anthropic Messages shape (``{"role": ..., "content": [...]}``).

Export writes the session's whole conversation (every event, compactions not applied). Import
turns a transcript from elsewhere into a session: a ``session_started`` event, then one event
per message — a user message without tool results is a user prompt (so it is a checkpoint), the
tool results of a user message are tool-result events (text beside them is a non-checkpoint
prompt), an assistant message is an assistant-message event — appended in one atomic write, so
its log, checkpoints and views work like any other. Consecutive messages of one role are merged
(as the API does). Every line is checked first; any bad line is reported with its number and
nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from liteagent.eventlog import (
    AssistantMessage,
    Block,
    Event,
    InvalidArgumentError,
    LiteAgentError,
    Message,
    SessionStarted,
    ToolResult,
    ToolResultBlock,
    UserPrompt,
    conversation,
    fold,
    message_from_dict,
    message_to_dict,
    validate_session_id,
)

from ._cli_commands import existing_session
from ._cli_env import CliEnv
from ._cli_output import emit_json
from ._core import new_session_id

__all__ = ["cmd_export", "cmd_import", "message_events", "read_transcript"]


def cmd_export(env: CliEnv, args: argparse.Namespace) -> int:
    """Print the session's conversation as JSON Lines (or one JSON document with --json)."""
    sid = existing_session(env, args.session_id)
    messages = conversation(fold(env.checkpointer.read(sid)))
    dicts = [message_to_dict(m, where=f"message {i}") for i, m in enumerate(messages, 1)]
    if args.json:
        emit_json({"session_id": sid, "messages": dicts})
    else:
        for d in dicts:
            sys.stdout.write(json.dumps(d, ensure_ascii=False) + "\n")
    return 0


class TranscriptError(InvalidArgumentError):
    """Raised when lines of a transcript are not messages; ``problems`` lists each line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} bad lines, nothing was written")


def read_transcript(text: str) -> list[Message]:
    """The messages of a JSON Lines transcript; raise :class:`TranscriptError` naming every
    bad line (blank lines are skipped)."""
    messages: list[Message] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data: Any = json.loads(line)
        except ValueError as e:
            problems.append(f"line {number}: not JSON ({e})")
            continue
        try:
            messages.append(message_from_dict(data, where=f"line {number}"))
        except LiteAgentError as e:
            problems.append(str(e))
    if problems:
        raise TranscriptError(problems)
    if not messages:
        raise InvalidArgumentError("the transcript has no messages")
    return messages


def message_events(message: Message) -> list[Event]:
    """The events that add ``message`` to a session's conversation."""
    if message.role == "assistant":
        return [AssistantMessage(content=message.content)]
    has_results = any(type(b) is ToolResultBlock for b in message.content)
    if not has_results:
        return [UserPrompt(content=message.content)]
    events: list[Event] = []
    run: list[Block] = []
    for block in message.content:
        if type(block) is ToolResultBlock:
            if run:
                events.append(UserPrompt(content=tuple(run), origin="reminder"))
                run = []
            events.append(ToolResult(block=block))
        else:
            run.append(block)
    if run:
        events.append(UserPrompt(content=tuple(run), origin="reminder"))
    return events


def cmd_import(env: CliEnv, args: argparse.Namespace) -> int:
    """Create a session from a transcript file (see the module docstring)."""
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError as e:
            raise InvalidArgumentError(f"cannot read {args.file!r}: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(f"{args.file!r} is not UTF-8 text: {e}") from e
    try:
        messages = read_transcript(text)
    except TranscriptError as e:
        for problem in e.problems:
            print(f"lite-agent: {problem}", file=sys.stderr)
        raise
    sid = validate_session_id(args.session) if args.session else new_session_id()
    cp = env.checkpointer
    if cp.head(sid):
        raise InvalidArgumentError(f"session {sid!r} already exists; choose another --session")
    events: list[Event] = [SessionStarted(workdir=str(env.workdir),
                                          model=env.model or "imported")]
    for m in messages:
        events.extend(message_events(m))
    head = cp.append(sid, events, expected_head=0)
    prompts = sum(1 for e in events if isinstance(e, UserPrompt) and e.origin == "user")
    if args.json:
        emit_json({"session_id": sid, "messages": len(messages), "events": head,
                   "checkpoints": prompts})
    else:
        print(f"imported {len(messages)} messages as session {sid} ({head} events, "
              f"{prompts} checkpoints)")
    return 0
