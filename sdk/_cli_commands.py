"""The scriptable session commands: run, sessions, checkpoints, restore, compact.

Each takes the opened :class:`CliEnv` and the parsed arguments, prints a human form or (with
``--json``) one JSON document on stdout, and returns the exit code. Errors propagate to the
entry point, which prints a one-line reason and returns 1.
"""

from __future__ import annotations

import argparse
import io
import sys

from liteagent.eventlog import InvalidArgumentError, validate_session_id

from ._cli_env import CliEnv, run_live
from ._cli_output import (
    LiveRenderer,
    checkpoint_lines,
    emit_json,
    session_lines,
    to_json,
)

__all__ = ["cmd_checkpoints", "cmd_compact", "cmd_restore", "cmd_run", "cmd_sessions",
           "existing_session"]


def existing_session(env: CliEnv, session_id: str) -> str:
    """``session_id`` validated, refused when the store has no such session."""
    sid = validate_session_id(session_id)
    if env.checkpointer.head(sid) == 0:
        raise InvalidArgumentError(
            f"no session {sid!r} in {env.location} (`lite-agent sessions` lists them)")
    return sid


def _renderer(args: argparse.Namespace) -> LiveRenderer:
    return LiveRenderer(io.StringIO() if args.json else sys.stdout)


def cmd_run(env: CliEnv, args: argparse.Namespace) -> int:
    """Run one prompt to the end of the model's turn (a new session unless --session)."""
    agent = env.agent()
    if args.session:
        agent.resume(args.session)
    renderer = _renderer(args)
    result = run_live(agent, lambda token: agent.send(args.prompt, cancel=token), renderer)
    if args.json:
        emit_json({"session_id": result.session_id, "text": result.text,
                   "stop_reason": result.stop_reason, "usage": result.usage,
                   "messages": len(result.messages)})
    else:
        u = result.usage
        print(f"[session {result.session_id} · {result.stop_reason} · "
              f"{u.input_tokens} in / {u.output_tokens} out tokens]")
    return 0


def cmd_sessions(env: CliEnv, args: argparse.Namespace) -> int:
    """List the stored sessions, most recently active first."""
    sessions = env.checkpointer.list()
    if args.json:
        emit_json([{"id": s.id, "mtime": s.mtime, "events": env.checkpointer.head(s.id)}
                   for s in sessions])
    else:
        print("\n".join(session_lines(sessions)))
    return 0


def cmd_checkpoints(env: CliEnv, args: argparse.Namespace) -> int:
    """List a session's checkpoints, oldest first."""
    sid = existing_session(env, args.session_id)
    checkpoints = env.agent(model=False).list_checkpoints(sid)
    if args.json:
        emit_json(checkpoints)
    else:
        print("\n".join(checkpoint_lines(checkpoints)))
    return 0


def cmd_restore(env: CliEnv, args: argparse.Namespace) -> int:
    """Restore a session to a checkpoint (files and conversation, or the conversation only)."""
    sid = existing_session(env, args.session_id)
    agent = env.agent(model=False)
    agent.resume(sid)
    files = not args.conversation_only
    result = run_live(
        agent,
        lambda token: agent.restore(sid, args.seq, files=files, conversation=True,
                                    cancel=token),
        _renderer(args),
    )
    if args.json:
        emit_json({"session_id": sid, "seq": args.seq, **to_json(result)})
    else:
        names = ", ".join(result.restored_files) or "none"
        print(f"restored {len(result.restored_files)} files ({names}); the conversation is "
              f"back to before seq {args.seq}")
        if files:
            print("note: shell commands and custom tools are not undone")
    return 0


def cmd_compact(env: CliEnv, args: argparse.Namespace) -> int:
    """Compact a session's context now (the log keeps every event)."""
    sid = existing_session(env, args.session_id)
    agent = env.agent(model=False)
    agent.resume(sid)
    stats = run_live(agent, lambda token: agent.compact(args.instructions, cancel=token),
                     _renderer(args))
    if args.json:
        emit_json({"session_id": sid, **to_json(stats)})
    elif stats.changed:
        print(f"compacted: ~{stats.before} → ~{stats.after} tokens (the log keeps every event)")
    else:
        print(f"nothing to reduce (~{stats.before} tokens)")
    return 0
