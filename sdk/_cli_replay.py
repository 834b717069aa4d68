"""``lite-agent replay ID [--at SEQ] [--view] [--verify]``: a session's events in order, what
the model saw at a request, and the check of every recorded request against the log."""

from __future__ import annotations

import argparse
from typing import Any

from liteagent.eventlog import StoredEvent, messages_to_dicts
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    Block,
    BranchCreated,
    Compaction,
    ContentArchived,
    ContextStatus,
    FileSnapshot,
    Forked,
    Message,
    ModelRequestRecord,
    RawBlock,
    RestoreFinished,
    RestoreStarted,
    SessionStarted,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptImported,
    TurnAborted,
    UserPrompt,
)

from ._cli_args import existing_session
from ._cli_env import CliEnv, cli_tools
from ._cli_errors import UsageError
from ._cli_output import (
    argument_text,
    emit_json,
    make_console,
    printable,
    short,
    to_json,
    when,
)
from ._prompt import DEFAULT_SYSTEM_PROMPT
from ._replay import ViewConfig, request_at, verify_session

__all__ = ["cli_view_config", "cmd_replay", "describe_event"]


def cli_view_config() -> ViewConfig:
    """The request configuration of the CLI's agents (their tools, the default prompt and
    max_tokens)."""
    config = ViewConfig.of_tools(cli_tools())
    return ViewConfig(
        tools=config.tools, max_tokens=config.max_tokens, system=DEFAULT_SYSTEM_PROMPT
    )


def describe_block(block: Block) -> str:
    """One block, briefly."""
    if isinstance(block, TextBlock):
        return f"text {short(block.text)!r}"
    if isinstance(block, ToolUseBlock):
        arg = next(
            (
                argument_text(block.input[k])
                for k in ("path", "command", "pattern")
                if k in block.input
            ),
            "",
        )
        return f"{block.name}({short(arg, 40)})"
    if isinstance(block, ToolResultBlock):
        error = " error" if block.is_error is True else ""
        if isinstance(block.content, str):
            return f"result{error} {short(block.content, 50)!r}"
        if isinstance(block.content, tuple):
            n = len(block.content)
            return f"result{error} of {n} block{'' if n == 1 else 's'}"
        return f"result{error}, no content"
    if isinstance(block, ThinkingBlock):
        return f"thinking {short(block.thinking, 40)!r}"
    if isinstance(block, RawBlock):  # a block kept as the API gave it
        kind = block.data.get("type")
        return f"{short(kind, 40) if isinstance(kind, str) and kind else 'untyped'} block"
    return f"{type(block).__struct_config__.tag} block"  # redacted thinking, compaction


def describe_status(status: ContextStatus) -> str:
    """A context engine's decision: its level and numbers."""
    after = "" if status.tokens_after is None else f" → ~{status.tokens_after}"
    actions = f"; {', '.join(status.actions)}" if status.actions else ""
    return f"level {status.level}: ~{status.tokens}{after} tokens of {status.budget}{actions}"


def describe_event(event: StoredEvent) -> str:
    """One line for a stored event: what it says, briefly."""
    body = event.body
    if isinstance(body, SessionStarted):
        return f"workdir {body.workdir}, model {body.model}"
    if isinstance(body, UserPrompt):
        return f"[{body.origin}] {short(body.text)!r}"
    if isinstance(body, AssistantMessage):
        blocks = ", ".join(describe_block(b) for b in body.content) or "no blocks"
        stop = f"  ({printable(body.stop_reason)})" if body.stop_reason is not None else ""
        return blocks + stop
    if isinstance(body, ToolResult):
        return f"{body.tool_name or '?'} {body.block.tool_use_id}: {describe_block(body.block)}"
    if isinstance(body, FileSnapshot):
        change = (
            "created"
            if body.pre_hash is None
            else "deleted"
            if body.post_hash is None
            else "changed"
        )
        return f"{body.path} {change} by {body.tool_call_id}"
    if isinstance(body, Compaction):
        return (
            f"seqs {body.first_seq}..{body.last_seq}: ~{body.tokens_before} → "
            f"~{body.tokens_after} tokens, {len(body.replacement)} messages"
        )
    if isinstance(body, ModelRequestRecord):
        return f"view {body.view_hash[:16]}…, ~{body.token_estimate} tokens"
    if isinstance(body, ContextStatus):
        return describe_status(body)
    if isinstance(body, ContentArchived):
        return (
            f"the result of {body.tool_use_id} moved to the blob store ({body.chars} "
            f"characters, {body.size} bytes)"
        )
    if isinstance(body, BackgroundStarted):
        return (
            f"background task {short(body.task_id, 40)} started by "
            f"{short(body.tool_call_id, 40)} (pid {body.pid} on {short(body.host, 60)}): "
            f"{short(body.description)}"
        )
    if isinstance(body, BackgroundCompleted):
        outcome = "finished" if body.ok else "failed"
        return f"background task {short(body.task_id, 40)} {outcome}" + (
            f": {short(body.summary)}" if body.summary else ""
        )
    if isinstance(body, TurnAborted):
        return short(body.reason, 80)
    if isinstance(body, RestoreStarted):
        what = "an undo of " + body.undo_of if body.undo_of else f"to seq {body.to_seq}"
        return f"{what}, {len(body.files)} files"
    if isinstance(body, RestoreFinished):
        return f"{body.outcome} (started at seq {body.started_seq})"
    if isinstance(body, BranchCreated):
        return f"a branch of {body.origin} from seq {body.at_seq} (made by {body.made_by})"
    if isinstance(body, Forked):
        where = f", files in {body.workdir}" if body.workdir else ""
        return f"forked from {body.origin} before seq {body.at_seq}{where}"
    if isinstance(body, TranscriptImported):
        return f"imported from a transcript; how {len(body.shapes)} messages were written"
    return f"unknown kind {body.kind}, {len(body.data)} bytes (kept as is)"


def _message_lines(messages: tuple[Message, ...]) -> list[str]:
    lines = []
    for i, m in enumerate(messages, start=1):
        blocks = ", ".join(describe_block(b) for b in m.content)
        lines.append(f"{i:>4} {m.role:<9} {blocks}")
    return lines


def _view(env: CliEnv, sid: str, at: int | None, as_json: bool) -> int:
    events = list(env.checkpointer.read(sid))
    seq = events[-1].seq if at is None else at
    request, record = request_at(events, seq, cli_view_config())
    computed = (
        next((c for c in verify_session(events, cli_view_config()) if c.seq == seq), None)
        if record
        else None
    )
    # the messages recomputed from the log, and the rest of the request (model, system
    # prompt, tools, max_tokens) as the CLI's agents send it, against the record's digests
    head = None if computed is None else computed.request_matches
    matches = None if computed is None else computed.ok and head is not False
    doc: dict[str, Any] = {
        "session_id": sid,
        "seq": seq,
        "recorded": record is not None,
        "model": request.model,
        "system": request.system,
        "tools": [t.name for t in request.tools],
        "max_tokens": request.max_tokens,
        "messages": messages_to_dicts(request.messages),
        "view_hash": computed.computed if computed else None,
        "recorded_hash": record.view_hash if record else None,
        "request_matches": head,
        "matches": matches,
        "problem": computed.problem if computed else "",
    }
    if as_json:
        emit_json(doc)
    else:
        console = make_console()
        what = (
            "the request recorded at" if record else "the request a model call would be sent after"
        )
        console.print(
            f"{what} seq {seq}: model {request.model}, {len(request.messages)} "
            f"messages, tools: {', '.join(doc['tools'])}",
            style="bold",
        )
        console.print("\n".join(_message_lines(request.messages)))
        if record is not None and computed is not None:
            verdict = "matches" if computed.ok else "DOES NOT match"
            console.print(
                f"recomputed view hash {verdict} the recorded one ({record.view_hash[:16]}…)",
                style="green" if computed.ok else "red",
            )
            if computed.problem:
                console.print(computed.problem, style="red")
            if head is False:
                console.print(
                    "but the recorded request had another model, system prompt, tools or "
                    "max_tokens than the ones shown (the session was written with another "
                    "configuration than lite-agent's)",
                    style="red",
                )
    return 0 if matches in (None, True) else 1


def _verify(env: CliEnv, sid: str, at: int | None, as_json: bool) -> int:
    every = verify_session(list(env.checkpointer.read(sid)), cli_view_config())
    checks = [c for c in every if at is None or c.seq <= at]  # --at: the requests up to it
    bad = [c for c in checks if not c.ok]
    if as_json:
        emit_json(
            {
                "session_id": sid,
                "ok": not bad,
                "requests": len(checks),
                "nothing_to_verify": not checks,
                "mismatches": [to_json(c) for c in bad],
            }
        )
    elif not checks and every:  # --at before the first request
        make_console().print(
            f"nothing to verify: session {sid} has no recorded model request up to seq {at} "
            f"(its first is at seq {min(c.seq for c in every)})"
        )
    elif not checks:
        make_console().print(
            f"nothing to verify: session {sid} has no recorded model requests "
            "(no turn of it has called the model)"
        )
    else:
        console = make_console()
        for c in checks:
            mark = "ok      " if c.ok else "MISMATCH"
            problem = f"  {c.problem}" if c.problem else ""
            console.print(
                f"{c.seq:>6}  {mark}  {c.level}, {c.messages} messages in the log's "
                f"conversation{problem}",
                style=None if c.ok else "red",
            )
        console.print(
            f"{len(checks) - len(bad)} of {len(checks)} recorded requests recomputed "
            "from the log exactly" + ("" if not bad else f"; {len(bad)} differ"),
            style="green" if not bad else "red",
        )
    return 0 if not bad else 1


def cmd_replay(env: CliEnv, args: argparse.Namespace) -> int:
    """The replay command (see the module docstring)."""
    if args.view and args.verify:
        raise UsageError("--view and --verify cannot be combined (run them one after the other)")
    sid = existing_session(env, args.session_id)
    if args.at is not None:
        head = env.checkpointer.head(sid)
        if not 1 <= args.at <= head:
            raise UsageError(f"--at {args.at} is outside the log: session {sid} has seqs 1..{head}")
    if args.verify:
        return _verify(env, sid, args.at, args.json)
    if args.view:
        return _view(env, sid, args.at, args.json)
    events = [e for e in env.checkpointer.read(sid) if args.at is None or e.seq <= args.at]
    if args.json:
        emit_json(
            [{"seq": e.seq, "ts": e.ts, "kind": e.kind, "body": to_json(e.body)} for e in events]
        )
    else:
        console = make_console()
        for e in events:
            what = printable(describe_event(e))
            console.print(f"{e.seq:>6}  {when(e.ts)}  {printable(e.kind):<20} {what}")
    return 0
