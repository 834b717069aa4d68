"""``lite-agent export ID`` and ``lite-agent import FILE``: transcripts as JSON Lines, one
message per line in the Anthropic Messages shape (``{"role": ..., "content": ...}``; see
:mod:`liteagent.eventlog._interchange`).

**Export** writes the session's whole conversation from its log: every message event, with
compactions not applied and archived tool results in full (the log keeps both). Each model
response, each prompt and each background notice is a message of its own; the tool results of
one step, with the text the log recorded beside them, are one user message; the notice that
closes a stopped turn is an assistant message of its own. So two messages of one role can follow
each other (a background notice, then the next prompt); the Messages API reads them as one turn.
Lone surrogates are written as JSON escapes (UTF-8 cannot carry them).

**Import** makes a session of a transcript: a ``session_started`` event, then per message an
assistant-message event (assistant), a user prompt (a user message without tool results: it is
a checkpoint), or a tool-result event per result and a non-checkpoint prompt per run of other
blocks (a user message with tool results), all appended in one atomic write, so its log,
checkpoints and views work like any other. Every line is checked first; each bad line is
reported with its number and nothing is written.

A message's keys besides ``role`` and ``content``, and a ``content`` given as a string, are
recorded in a :class:`~liteagent.eventlog.types.TranscriptImported` event right after
``session_started`` (the conversation the model is sent has neither: the Messages API takes no
other keys, and a string is the one text block it stands for), with a digest of each such
message's first event: a restore or fork to a checkpoint keeps the shapes of the messages
before it, and a message written later at the same seq gets none.

Import then export gives every message back, one line each, equal as JSON (every block and
value exact, other keys kept, a string ``content`` as a string, consecutive messages of one role
kept apart), except for what a session's log cannot record, which import refuses, naming the
line, and writes nothing:

- a user message with tool results right after another user message: the log would join them
  into one message (join them in the file to import it);
- a ``tool_use`` or ``tool_result`` block holding a value the log cannot store (an integer
  beyond 64 bits, a lone surrogate in a key): it would no longer be a tool call or result;
- a number JSON cannot carry (``NaN``, ``Infinity``, one too large for a float).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from msgspec import UNSET

from liteagent.eventlog import SessionState, StoredEvent, fold
from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog._interchange import message_from_dict, message_to_dict, unstorable
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Event,
    Message,
    OpaqueEvent,
    RawBlock,
    SessionStarted,
    ToolResult,
    ToolResultBlock,
    TranscriptImported,
    UserPrompt,
)

from ._cli_args import existing_session, not_a_branch, session_id_arg
from ._cli_env import CliEnv
from ._cli_errors import UsageError, cli_words
from ._cli_json import check_finite, strict_loads
from ._cli_output import emit_json, json_text, printable
from ._core import new_session_id

__all__ = [
    "MAX_TRANSCRIPT_BYTES",
    "TranscriptError",
    "cmd_export",
    "cmd_import",
    "event_digest",
    "export_messages",
    "import_events",
    "message_events",
    "read_transcript",
]


# ---------------------------------------------------------------------------------------------
# export


def cmd_export(env: CliEnv, args: argparse.Namespace) -> int:
    """Print the session's conversation as JSON Lines (or one JSON document with --json)."""
    sid = existing_session(env, args.session_id)
    events = list(env.checkpointer.read(sid))
    dicts = []
    for i, m in enumerate(export_messages(events, fold(events)), 1):
        d = message_to_dict(m, where=f"message {i}")
        check_finite(d, f"message {i}")
        dicts.append(d)
    if args.json:
        sys.stdout.write(json_text({"session_id": sid, "messages": dicts}) + "\n")
    else:
        sys.stdout.writelines(json_text(d, indent=None) + "\n" for d in dicts)
    return 0


def export_messages(events: list[StoredEvent], state: SessionState) -> list[Message]:
    """The conversation of a session (``state`` folded from ``events``), grouped into messages
    as the module docstring says; a message imported from a transcript is marked as it was
    written there (its other keys, a string ``content``: :class:`TranscriptImported`)."""
    shapes: dict[int, tuple[dict[str, Any] | None, bool]] = {}
    kept_json: dict[int, str] = {}
    for t in (e.body for e in events if type(e.body) is TranscriptImported):
        digests = dict(t.digests)
        valid = {
            seq
            for seq, digest in digests.items()
            if 0 < seq <= len(events) and event_digest(events[seq - 1].body) == digest
        }
        shapes.update((seq, (extra, string)) for seq, extra, string in t.shapes if seq in valid)
        kept_json.update((seq, text) for seq, text in t.extra_json if seq in valid)
    out: list[tuple[int, Message]] = []
    for entry in state.entries:
        body = events[entry.seq - 1].body
        m = entry.message
        joins = type(body) is ToolResult or (
            type(body) is UserPrompt and body.origin in ("reminder", "repair")
        )
        if joins and out and out[-1][1].role == m.role:
            seq, last = out[-1]
            out[-1] = (seq, Message(m.role, last.content + m.content))
        else:
            out.append((entry.seq, m))
    return [_shaped(m, shapes.get(seq), kept_json.get(seq)) for seq, m in out]


def _shaped(
    message: Message, shape: tuple[dict[str, Any] | None, bool] | None, extra_json: str | None
) -> Message:
    if shape is None:
        return message
    extra, string = shape
    return Message(
        message.role,
        message.content,
        extra=extra or UNSET,
        string_content=string,
        extra_json=extra_json,
    )


# ---------------------------------------------------------------------------------------------
# import


class TranscriptError(InvalidArgumentError):
    """Raised when lines of a transcript are not messages, or not messages a session can keep;
    ``problems`` lists each line and what is wrong with it."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        noun = "bad line" if len(problems) == 1 else "bad lines"
        super().__init__(f"{len(problems)} {noun}, nothing was written")


def _lines(text: str) -> list[tuple[int, str]]:
    """The numbered lines of a JSON Lines text: separated by ``\\n`` only (a JSON string may
    hold U+2028 and other characters ``str.splitlines`` splits at), a ``\\r`` before it
    dropped, blank lines skipped, a byte-order mark at the start ignored."""
    lines = text.removeprefix("\ufeff").split("\n")
    return [(n, line.removesuffix("\r")) for n, line in enumerate(lines, 1) if line.strip()]


def read_transcript(text: str) -> list[Message]:
    """The messages of a JSON Lines transcript; raise :class:`TranscriptError` naming every
    bad line (see the module docstring for what a session cannot keep)."""
    messages: list[Message] = []
    problems: list[str] = []
    previous: tuple[int, Message] | None = None
    for number, line in _lines(text):
        try:
            data = strict_loads(line)
        except (ValueError, RecursionError) as e:  # json's errors are ValueErrors
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            problems.append(f"line {number}: not JSON ({why})")
            previous = None
            continue
        try:
            message = message_from_dict(data, where=f"line {number}")
        except LiteAgentError as e:
            problems.append(str(e))
            previous = None
            continue
        problems += _unkept(number, message, previous)
        messages.append(message)
        previous = (number, message)
    if problems:
        raise TranscriptError(problems)
    if not messages:
        raise InvalidArgumentError("the transcript has no messages")
    return messages


def _unkept(number: int, message: Message, previous: tuple[int, Message] | None) -> list[str]:
    """What of ``message`` (on line ``number``, after ``previous``) a session cannot keep."""
    problems = []
    for i, block in enumerate(message.content):
        if not isinstance(block, RawBlock):
            continue
        kind = block.data.get("type")
        if kind in ("tool_use", "tool_result"):
            why = unstorable(json.loads(block.json)) if isinstance(block.json, str) else None
            problems.append(
                f"line {number}: content[{i}] ({kind}) holds {why or 'a value'} that a session "
                f"cannot store in a {kind} block; change it to import the transcript"
            )
    if (
        previous is not None
        and previous[1].role == message.role == "user"
        and _has_results(message)
    ):
        problems.append(
            f"line {number}: a user message with tool results right after the user message of "
            f"line {previous[0]}: a session would join them into one message; join the two "
            "lines to import the transcript"
        )
    return problems


def _has_results(message: Message) -> bool:
    return any(type(b) is ToolResultBlock for b in message.content)


def message_events(message: Message) -> list[Event]:
    """The events that add ``message`` to a session's conversation (module docstring)."""
    if message.role == "assistant":
        return [AssistantMessage(content=message.content)]
    if not _has_results(message):
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


def import_events(messages: list[Message], started: SessionStarted) -> list[Event]:
    """The events of a session made of ``messages``: ``started``, the
    :class:`TranscriptImported` record of how they were written (when one has keys besides
    ``role`` and ``content`` or a string ``content``), then each message's events."""
    body: list[Event] = []
    shapes: list[tuple[int, dict[str, Any] | None, bool]] = []
    kept_json: list[tuple[int, str]] = []
    digests: list[tuple[int, str]] = []
    for m in messages:
        added = message_events(m)
        if m.extra is not UNSET or m.string_content or m.extra_json is not None:
            seq = 3 + len(body)  # after session_started and the record itself
            shapes.append((seq, None if m.extra is UNSET else m.extra, m.string_content))
            if m.extra_json is not None:
                kept_json.append((seq, m.extra_json))
            digests.append((seq, event_digest(added[0])))
        body.extend(added)
    if not shapes:
        return [started, *body]
    record = TranscriptImported(
        shapes=tuple(shapes), extra_json=tuple(kept_json), digests=tuple(digests)
    )
    return [started, record, *body]


def event_digest(event: Event | OpaqueEvent) -> str:
    """A digest of ``event`` as stored (its kind and body), for :class:`TranscriptImported`."""
    kind, data = encode_body(event)
    return hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()[:32]


MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
"""The largest transcript ``import`` reads (a larger one, or an endless input such as
``/dev/zero``, is refused rather than read until the memory runs out)."""


def _read_input(file: str, name: str) -> bytes:
    """The bytes of ``file`` (``-``: standard input), at most :data:`MAX_TRANSCRIPT_BYTES`."""
    limit = MAX_TRANSCRIPT_BYTES
    try:
        if file == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with Path(file).open("rb") as f:
                data = f.read(limit + 1)
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror or e}") from e
    if len(data) > limit:
        raise InvalidArgumentError(
            f"{name} is larger than {limit // (1024 * 1024)} MiB, the most import reads"
        )
    return data


def _decoded(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text, or :class:`InvalidArgumentError` naming the line and byte that
    are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise InvalidArgumentError(
            f"{name} is not UTF-8 text: line {line}, byte {column} (0x{data[e.start]:02x}) "
            "is not part of a UTF-8 character"
        ) from e


def cmd_import(env: CliEnv, args: argparse.Namespace) -> int:
    """Create a session from a transcript file (see the module docstring)."""
    sid = new_session_id() if args.session is None else session_id_arg(args.session, "--session")
    not_a_branch(sid, "--session")
    name = "standard input" if args.file == "-" else repr(args.file)
    text = _decoded(_read_input(args.file, name), name)
    try:
        messages = read_transcript(text)
    except TranscriptError as e:
        if not args.json:  # --json reports them in the error document's details
            for problem in e.problems:
                print(f"lite-agent: {printable(cli_words(problem))}", file=sys.stderr)
        raise
    cp = env.checkpointer
    if cp.head(sid):
        raise UsageError(f"session {sid!r} already exists; choose another --session")
    started = SessionStarted(workdir=str(env.workdir), model=env.model or "imported")
    events = import_events(messages, started)
    head = cp.append(sid, events, expected_head=0)
    prompts = sum(1 for e in events if isinstance(e, UserPrompt) and e.origin == "user")
    if args.json:
        emit_json(
            {"session_id": sid, "messages": len(messages), "events": head, "checkpoints": prompts}
        )
    else:
        print(
            f"imported {len(messages)} messages as session {sid} ({head} events, "
            f"{prompts} checkpoints)"
        )
    return 0
