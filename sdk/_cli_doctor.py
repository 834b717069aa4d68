"""``lite-agent doctor [--repair]``: the integrity of every session of the project.

It runs the store's own check (``Checkpointer.check_integrity``: torn tails, damage, gaps,
unknown kinds, leftovers of a killed truncate) and folds every session (interrupted restores,
tool calls left without a result). It changes nothing unless ``--repair`` is given, and then
reports each action:

- a torn tail (the unfinished last write of a crash) is cut back to the last whole write, by
  rewriting the session's log at its current head (the file backend cuts a torn tail whenever
  a writer takes the session; its generation changes, so a stale writer elsewhere conflicts
  instead of appending onto the wrong history);
- an interrupted restore is rolled back (every file back to how it was before the restore), or
  finished with ``--finish-restores``;
- events of an unknown kind (written by a newer liteagent) are kept as they are;
- damage that is not a torn tail is never "repaired": it is reported, and the exit code is 1.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from liteagent.eventlog import (
    Checkpointer,
    IntegrityProblem,
    LiteAgentError,
    SessionState,
    fold,
)

from ._cli_env import CliEnv
from ._cli_output import emit_json, one_line

__all__ = ["Finding", "cmd_doctor"]

_REPAIRABLE = frozenset({"torn_tail", "leftover", "interrupted_restore"})
_INFORMATIONAL = frozenset({"unknown_kind", "open_tool_calls", "leftover"})


class Finding(msgspec.Struct, kw_only=True):
    """One problem found, and what ``--repair`` did about it (``action``; "" = nothing)."""

    session_id: str | None
    kind: str
    detail: str
    seq: int | None = None
    action: str = ""
    repaired: bool = False


def _store_findings(cp: Checkpointer) -> list[Finding]:
    report = cp.check_integrity()
    return [_finding(p) for p in report.problems]


def _finding(p: IntegrityProblem) -> Finding:
    return Finding(session_id=p.session_id, kind=p.kind, detail=p.detail, seq=p.seq)


def _session_findings(cp: Checkpointer, damaged: set[str]) -> tuple[list[Finding], int]:
    findings: list[Finding] = []
    sessions = cp.list()
    for info in sessions:
        if info.id in damaged:
            continue
        try:
            state: SessionState = fold(cp.read(info.id))
        except LiteAgentError as e:
            findings.append(Finding(session_id=info.id, kind="unreadable", detail=one_line(e)))
            continue
        if state.pending_restore is not None:
            seq, started = state.pending_restore
            findings.append(Finding(
                session_id=info.id, kind="interrupted_restore", seq=seq,
                detail=f"a restore to seq {started.to_seq} was interrupted ({len(started.files)} "
                       "files); the session refuses new turns until it is settled"))
        if state.open_tool_calls and state.pending_restore is None:
            findings.append(Finding(
                session_id=info.id, kind="open_tool_calls",
                detail=f"{len(state.open_tool_calls)} tool calls without a result (a turn cut "
                       "short); the next prompt closes them as interrupted"))
    return findings, len(sessions)


def _rewrite(cp: Checkpointer, sid: str, kind: str) -> str:
    head, generation = cp.position(sid)
    cp.truncate(sid, head, expected_head=head, expected_generation=generation)
    what = ("the unfinished write is gone" if kind == "torn_tail"
            else "the temp file of the interrupted truncate is gone")
    return f"rewrote the log at its head, seq {head}: {what}"


def _settle(env: CliEnv, sid: str, finish: bool) -> str:
    started = fold(env.checkpointer.read(sid)).started
    if started is not None and started.workdir != str(env.workdir):
        raise LiteAgentError(
            f"its workspace is {started.workdir}; run `lite-agent --workdir {started.workdir} "
            "doctor --repair`")
    agent = env.agent(model=False)
    if finish:
        result = agent.finish_restore(sid)
        return f"finished the restore: put back {', '.join(result.restored_files) or 'no files'}"
    paths = agent.rollback_restore(sid)
    return f"rolled the restore back: {', '.join(paths) or 'no files'} as before it"


def _repair(env: CliEnv, finding: Finding, finish: bool) -> None:
    sid = finding.session_id
    if sid is None or finding.kind not in _REPAIRABLE:
        finding.action = ("kept as is (written by a newer liteagent)"
                          if finding.kind == "unknown_kind" else "")
        return
    try:
        if finding.kind == "interrupted_restore":
            finding.action = _settle(env, sid, finish)
        elif env.checkpointer.head(sid) or finding.kind == "torn_tail":
            finding.action = _rewrite(env.checkpointer, sid, finding.kind)
        finding.repaired = bool(finding.action)
    except (LiteAgentError, OSError) as e:
        finding.action = f"not repaired: {one_line(e)}"


def cmd_doctor(env: CliEnv, args: argparse.Namespace) -> int:
    """Check (and with --repair, repair) every session of the project."""
    cp = env.checkpointer
    findings = _store_findings(cp)
    damaged = {f.session_id for f in findings
               if f.session_id and f.kind not in ("unknown_kind", "leftover", "torn_tail")}
    more, count = _session_findings(cp, damaged)
    findings.extend(more)
    if args.repair:
        seen: set[tuple[str | None, str]] = set()
        for f in findings:
            if (f.session_id, f.kind) in seen:  # one repair per session and kind
                f.action, f.repaired = "see above", True
                continue
            seen.add((f.session_id, f.kind))
            _repair(env, f, args.finish_restores)
    remaining = [f for f in findings if f.kind not in _INFORMATIONAL and not f.repaired]
    doc: dict[str, Any] = {"store": env.location, "sessions": count, "ok": not remaining,
                           "repair": bool(args.repair),
                           "findings": [msgspec.to_builtins(f) for f in findings]}
    if args.json:
        emit_json(doc)
    else:
        print(f"{env.location}: {count} sessions")
        for f in findings:
            where = f"{f.session_id}" + (f" seq {f.seq}" if f.seq else "")
            print(f"  {f.kind:<20} {where}: {f.detail}")
            if f.action:
                print(f"  {'':<20} → {f.action}")
        if not findings:
            print("  no problems found")
        elif remaining and not args.repair:
            print("run `lite-agent doctor --repair` to repair what can be repaired")
    return 0 if not remaining else 1
