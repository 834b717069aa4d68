"""The time-travel commands beyond a plain restore: ``restore --dry-run`` (the preview),
``restore --undo``, ``branches``, ``fork`` and ``gc``, and how they are shown.

Each prints a human form or (``--json``) one JSON document, and returns the exit code; a
preview that shows the restore would be refused still exits 0 (``would_refuse`` says so).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console
from rich.table import Table

from liteagent.actors._branches import Branch
from liteagent.actors._preview import RestorePreview
from liteagent.actors._restore_plan import NoBranchError
from liteagent.eventlog import GarbageReport

from ._agent import LiteAgent
from ._cli_args import checkpoint_seq, existing_session, session_id_arg
from ._cli_env import CliEnv, NoStoreError
from ._cli_errors import UsageError, cli_words, one_line
from ._cli_output import (
    LiveRenderer,
    emit_json,
    file_names,
    make_console,
    make_table,
    printable,
    quiet_console,
    short,
    show,
    to_json,
    when,
)
from ._cli_terminal import run_live
from ._validate import MAX_SECONDS

__all__ = [
    "branch_table",
    "cmd_branches",
    "cmd_fork",
    "cmd_gc",
    "parse_duration",
    "say_preview",
    "show_preview",
    "undo",
]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """Seconds from ``"90"``, ``"30s"``, ``"10m"``, ``"2h"`` or ``"7d"``; :class:`UsageError`
    for anything else."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"{option} {text}: not a duration (seconds, or a number and s, m, h, d)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_SECONDS:
        raise UsageError(f"{option} {text}: too long (at most ten years)")
    return seconds


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n} B"


def say_preview(console: Console, preview: RestorePreview) -> None:
    """The human form of a restore's preview."""
    say = console.print
    what = "the conversation and the files" if preview.files else "the conversation only"
    if not preview.conversation:
        what = "the files only"
    say(f"a restore of {preview.session_id} to before seq {preview.seq} ({what}) would:")
    if preview.conversation:
        say(f"  take {preview.events_removed} events out of the log (kept as a branch: undoable)")
    for c in preview.changes:
        lines = ""
        if c.binary:
            lines = ", binary"
        elif c.added_lines is not None:
            lines = f", +{c.added_lines} -{c.removed_lines} lines"
        after = "?" if c.action == "unavailable" else _size(c.size_after)
        sizes = f"{_size(c.size_now)} → {after}{lines}"
        say(f"  {c.action:<9} {file_names([c.path])} ({sizes})")
    if preview.files and not preview.changes:
        say("  put back no file (no file tool changed one since)")
    for path, reason in preview.refused:
        why = printable(cli_words(reason))
        say(f"  refuse    {file_names([path]) if path else 'the session'}: {why}", style="red")
    if preview.side_effects:
        say(f"it cannot undo {len(preview.side_effects)} side effects since:", style="yellow")
        for e in preview.side_effects:
            say(f"  {when(e.ts)}  {printable(e.tool)}: {short(e.summary, 60)}  [{e.status}]")
    else:
        say("no side effects it cannot undo (no shell command or untracked tool ran since)")
    if preview.would_refuse:
        say("the restore would be refused as things are now; nothing was changed", style="red")
    else:
        say("nothing was changed (dry run)")


def show_preview(agent: LiteAgent, sid: str, seq: int, files: bool, as_json: bool) -> int:
    """``restore --dry-run``."""
    preview = agent.restore(sid, seq, files=files, conversation=True, dry_run=True)
    if as_json:
        emit_json({**to_json(preview), "would_refuse": preview.would_refuse})
    else:
        say_preview(make_console(), preview)
    return 0


def undo(agent: LiteAgent, sid: str, branch: str | None, as_json: bool) -> int:
    """``restore --undo``."""
    if branch is not None:
        session_id_arg(branch, "--branch", what="branch")
    renderer = LiveRenderer(quiet_console() if as_json else make_console())
    try:
        result = run_live(
            agent, lambda token: agent.undo_restore(sid, branch=branch, cancel=token), renderer
        )
    except NoBranchError as e:
        if branch is None:  # nothing to undo: refused
            raise
        raise UsageError(  # the argument names what is not there
            f"--branch {branch}: {one_line(e)} (`lite-agent branches {sid}` lists them)"
        ) from e
    if as_json:
        emit_json({"session_id": sid, **to_json(result)})
    else:
        names = file_names(result.restored_files) or "none"
        renderer.console.print(
            f"undone: put back {len(result.restored_files)} files ({names}); "
            f"`lite-agent restore --undo {sid}` undoes this too"
        )
    return 0


def branch_table(console: Console, branches: list[Branch]) -> Table | str:
    """The branches as a table, or a line saying there are none."""
    if not branches:
        return "no branches (nothing a restore took away is left to bring back)"
    table = make_table(console, "branch", "made", "by", "from seq", "events", "files", "now")
    for b in branches:
        table.add_row(
            b.id,
            when(b.created),
            printable(b.made_by),
            str(b.at_seq),
            str(b.events),
            file_names(b.files) or "-",
            "available" if b.available else short(b.reason, 60),
        )
    return table


def cmd_branches(env: CliEnv, args: argparse.Namespace) -> int:
    """List what ``restore --undo`` can bring back into a session."""
    sid = existing_session(env, args.session_id)
    branches = env.agent(model=False).list_branches(sid)
    if args.json:
        emit_json(branches)
    else:
        console = make_console()
        show(console, branch_table(console, branches))
    return 0


def cmd_fork(env: CliEnv, args: argparse.Namespace) -> int:
    """A new session from a session's events before a checkpoint."""
    sid = existing_session(env, args.session_id)
    agent = env.agent(model=False)
    seq = checkpoint_seq(agent, sid, args.seq)
    into = None if args.into is None else Path(args.into)
    if into is not None and not into.is_dir():
        raise UsageError(f"--into {args.into}: not a folder (make it a copy of the workspace)")
    new = agent.fork(sid, seq, workdir=into)
    if args.json:
        emit_json(
            {
                "session_id": new,
                "forked_from": sid,
                "seq": seq,
                "workdir": None if into is None else str(into.resolve()),
            }
        )
    else:
        where = (
            f"its files as they were then are in {into}; run it with --workdir {into}"
            if into is not None
            else "it shares this workspace (files as they are now)"
        )
        print(f"forked {sid} before seq {seq} as {new}; {where}")
    return 0


def cmd_gc(env: CliEnv, args: argparse.Namespace) -> int:
    """Remove blobs nothing references (and old branches)."""
    grace = parse_duration(args.grace, "--grace")
    retention = (
        None
        if args.branch_retention is None
        else parse_duration(args.branch_retention, "--branch-retention")
    )
    if args.dry_run:
        env.create_store = False  # a dry run changes nothing, and creates no store either
    try:
        report: GarbageReport = env.agent(model=False).collect_garbage(
            grace=grace, branch_retention=retention, dry_run=args.dry_run
        )
    except NoStoreError:  # a dry run where nothing is stored: nothing to collect
        report = GarbageReport(
            sessions=0, referenced=0, deleted=0, freed_bytes=0, young=0, dry_run=True
        )
    if args.json:
        emit_json(report)
        return 0
    verb = "would remove" if report.dry_run else "removed"
    print(f"{env.location}: {report.sessions} sessions read, {report.referenced} blobs referenced")
    print(
        f"  {verb} {report.deleted} unreferenced blobs ({report.freed_bytes} bytes); kept "
        f"{report.young} written in the last {args.grace}"
    )
    if report.branches_deleted:
        print(f"  {verb} {len(report.branches_deleted)} branches")
    if report.leftovers:
        print(f"  removed {report.leftovers} leftovers of interrupted writes")
    if report.leases_dropped:
        print(f"  {verb} {report.leases_dropped} lease records of sessions that do not exist")
    return 0
