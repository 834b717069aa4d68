"""The scriptable session commands: run, sessions, checkpoints, restore, compact.

Each takes the opened :class:`CliEnv` and the parsed arguments, prints a human form or (with
``--json``) one JSON document on stdout, and returns the exit code. Errors propagate to the
entry point, which reports them (see :mod:`._cli_errors`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rich.console import Console

from liteagent.actors._compactor import CompactStats
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Compaction, TextBlock

from ._cli_args import checkpoint_seq, existing_session, not_a_branch, session_id_arg
from ._cli_env import KEEP_TAIL_TURNS, CliEnv, NoStoreError, SummaryModel
from ._cli_errors import (
    NoApiKeyError,
    OutputClosedError,
    SessionLeftError,
    UsageError,
    one_line,
)
from ._cli_output import (
    LiveRenderer,
    SessionRow,
    checkpoint_table,
    emit_json,
    file_names,
    finite_time,
    make_console,
    quiet_console,
    session_rows,
    session_table,
    show,
    to_json,
)
from ._cli_terminal import run_live
from ._cli_travel import show_preview, undo
from ._validate import check_prompt, check_text

__all__ = [
    "CompactionOutcome",
    "cmd_checkpoints",
    "cmd_compact",
    "cmd_restore",
    "cmd_run",
    "cmd_sessions",
    "compaction_outcome",
]


def _renderer(args: argparse.Namespace) -> LiveRenderer:
    return LiveRenderer(quiet_console() if args.json else make_console())


def cmd_run(env: CliEnv, args: argparse.Namespace) -> int:
    """Run one prompt to the end of the model's turn (a new session unless --session)."""
    if not args.prompt.strip():
        raise UsageError(
            'PROMPT is empty: give the text to send (lite-agent run "fix the failing test")',
            usage=getattr(args, "usage", ""),
        )
    try:
        check_prompt(args.prompt)
    except InvalidArgumentError as e:
        raise UsageError(f"PROMPT: {one_line(e)}", usage=getattr(args, "usage", "")) from e
    if args.session is not None:
        not_a_branch(session_id_arg(args.session, "--session"), "--session")
    agent = env.agent()
    if args.session is not None:
        agent.resume(args.session)
    renderer = _renderer(args)
    try:
        result = run_live(agent, lambda token: agent.send(args.prompt, cancel=token), renderer)
    except (OutputClosedError, KeyboardInterrupt):
        raise
    except Exception as e:
        if args.session is None and _recorded(env, agent.session_id):  # a new session is left
            raise SessionLeftError(e, agent.session_id) from e
        raise
    if args.json:
        emit_json(
            {
                "session_id": result.session_id,
                "text": result.text,
                "stop_reason": result.stop_reason,
                "usage": result.usage,
                "messages": len(result.messages),
            }
        )
    else:
        u = result.usage
        renderer.console.print(
            f"[session {result.session_id} · {result.stop_reason} · "
            f"{u.input_tokens} in / {u.output_tokens} out tokens]",
            style="dim",
        )
    return 0


def _listed(env: CliEnv) -> list[SessionRow]:
    """The sessions to list, each with its event count, or why it cannot be read (a damaged
    one is listed as damaged, never failing the listing); an empty log (all a salvage kept)
    is no session, as for the other commands."""
    try:
        cp = env.checkpointer
    except NoStoreError:
        return []  # nothing stored there yet (and `sessions` creates nothing)
    return session_rows(cp, [s for s in cp.list() if not is_branch_session(s.id)])


def _recorded(env: CliEnv, session_id: str) -> bool:
    """Whether the session has events (a failure to tell is a no)."""
    try:
        return env.checkpointer.head(session_id) > 0
    except Exception:  # noqa: BLE001 -- only a hint for the report
        return False


def cmd_sessions(env: CliEnv, args: argparse.Namespace) -> int:
    """List the stored sessions, most recently active first (a damaged one as damaged)."""
    rows = _listed(env)
    if args.json:
        emit_json(
            [
                {"id": r.info.id, "mtime": finite_time(r.info.mtime), "events": r.events}
                | ({"damaged": r.damaged} if r.damaged is not None else {})
                for r in rows
            ]
        )
    else:
        console = make_console()
        show(console, session_table(console, rows))
    return 0


def cmd_checkpoints(env: CliEnv, args: argparse.Namespace) -> int:
    """List a session's checkpoints, oldest first."""
    sid = existing_session(env, args.session_id)
    checkpoints = env.agent(model=False).list_checkpoints(sid)
    if args.json:
        emit_json(checkpoints)
    else:
        console = make_console()
        show(console, checkpoint_table(console, checkpoints))
    return 0


def _restore_usage(args: argparse.Namespace) -> None:
    def bad(message: str) -> UsageError:
        return UsageError(message, usage=getattr(args, "usage", ""))

    if args.undo:
        if args.seq is not None:
            raise bad("--undo takes no SEQ: it undoes the last restore of ID")
        if args.dry_run or args.conversation_only:
            raise bad("--undo cannot be combined with --dry-run or --conversation-only")
    elif args.seq is None:
        raise bad("the following arguments are required: SEQ")
    elif args.branch is not None:
        raise bad("--branch needs --undo")


def cmd_restore(env: CliEnv, args: argparse.Namespace) -> int:
    """Restore a session to a checkpoint (files and conversation, or the conversation only),
    preview that (``--dry-run``), or undo the last restore (``--undo``)."""
    _restore_usage(args)
    sid = existing_session(env, args.session_id)
    agent = env.agent(model=False)
    if args.undo:
        agent.resume(sid)
        return undo(agent, sid, args.branch, args.json)
    seq = checkpoint_seq(agent, sid, args.seq)
    files = not args.conversation_only
    if args.dry_run:
        return show_preview(agent, sid, seq, files, args.json)
    agent.resume(sid)
    renderer = _renderer(args)
    result = run_live(
        agent,
        lambda token: agent.restore(sid, seq, files=files, conversation=True, cancel=token),
        renderer,
    )
    if args.json:
        emit_json({"session_id": sid, "seq": seq, **to_json(result)})
    else:
        names = file_names(result.restored_files) or "none"
        say = renderer.console.print
        say(
            f"restored {len(result.restored_files)} files ({names}); the conversation is back "
            f"to before seq {seq}"
        )
        if files:
            say("note: shell commands and custom tools are not undone", style="yellow")
        say(f"`lite-agent restore --undo {sid}` brings it all back")
    return 0


@dataclass
class CompactionOutcome:
    """What a compaction did with a summary and the instructions: ``summarized`` when a model
    summary is in the compacted view; ``note`` says why instructions given were not used."""

    summarized: bool
    note: str | None


def compaction_outcome(
    env: CliEnv,
    session_id: str,
    instructions: str | None,
    stats: CompactStats,
    summary: SummaryModel | None,
    *,
    no_model: str | None = None,
) -> CompactionOutcome:
    """Tell whether the compaction just recorded holds the model's summary, and if not, why
    the ``instructions`` were not used (``no_model``: why there was no model)."""
    summarized = False
    if summary is not None and summary.last_summary and stats.changed:
        last = next(
            (
                e.body
                for e in reversed(list(env.checkpointer.read(session_id)))
                if isinstance(e.body, Compaction)
            ),
            None,
        )
        summarized = last is not None and any(
            summary.last_summary in block.text
            for message in last.replacement
            for block in message.content
            if isinstance(block, TextBlock)
        )
    if not instructions or not instructions.strip() or summarized:
        return CompactionOutcome(summarized, None)
    why = f"the instructions were not used: {no_model}"
    if summary is not None and summary.failures:
        why = (
            f"the instructions were not used: the summary failed ({summary.failures[-1]}), "
            "so the compaction was mechanical, as without a model"
        )
    elif summary is not None and summary.calls:
        why = (
            "the instructions were not used: the summary would not have made the context "
            "smaller, so it was left out"
        )
    elif summary is not None:
        why = (
            "the instructions were not used: there is nothing old enough to summarize (the "
            f"last {KEEP_TAIL_TURNS} turns are always kept as they are)"
        )
    return CompactionOutcome(summarized, why)


def say_compacted(console: Console, stats: CompactStats, outcome: CompactionOutcome) -> None:
    """The human lines of a finished compaction."""
    if stats.changed:
        how = " with a summary by the model" if outcome.summarized else ""
        console.print(
            f"compacted{how}: ~{stats.before} → ~{stats.after} tokens (the log keeps every event)"
        )
    else:
        console.print(f"nothing to reduce (~{stats.before} tokens)")
    if outcome.note:
        console.print(f"note: {outcome.note}", style="yellow")


_NO_MODEL = (
    "no model to summarize with (set ANTHROPIC_API_KEY, or pass --provider); the "
    "compaction was mechanical: large tool results moved out, older turns dropped"
)


def cmd_compact(env: CliEnv, args: argparse.Namespace) -> int:
    """Compact a session's context now (the log keeps every event): with a model, older turns
    become a summary written with the instructions; without one, mechanically."""
    if args.instructions is not None:
        try:
            check_text(args.instructions, "INSTRUCTIONS")
        except InvalidArgumentError as e:
            raise UsageError(one_line(e), usage=getattr(args, "usage", "")) from e
    sid = existing_session(env, args.session_id)
    no_model: str | None = None
    try:
        agent = env.agent()
    except NoApiKeyError:
        agent, no_model = env.agent(model=False), _NO_MODEL
    summary = env.summary_model if no_model is None else None
    renderer = _renderer(args)
    stats = run_live(
        agent,
        lambda token: agent.compact(args.instructions, session_id=sid, cancel=token),
        renderer,
    )
    outcome = compaction_outcome(env, sid, args.instructions, stats, summary, no_model=no_model)
    if args.json:
        emit_json(
            {
                "session_id": sid,
                **to_json(stats),
                "summarized": outcome.summarized,
                "instructions_used": (
                    None if not (args.instructions or "").strip() else outcome.note is None
                ),
                "note": outcome.note,
            }
        )
    else:
        say_compacted(renderer.console, stats, outcome)
    return 0
