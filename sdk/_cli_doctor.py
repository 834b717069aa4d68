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
- blobs a killed garbage collection set aside (neither kept nor removed; a read puts one back by
  itself) are put back, so the next ``lite-agent gc`` decides on them again;
- events of an unknown kind (written by a newer liteagent) are kept as they are;
- damage that is not a torn tail (a damaged frame or row, a gap, a damaged header, a log cut
  below its header, a session that cannot be read) is salvaged with ``Checkpointer.repair``:
  the readable prefix of the session is kept, the damaged remainder is moved to a quarantine
  file beside the log (never deleted; the file backend), the generation changes, and the
  report says which seqs were kept and which were lost;
- a log of a newer format, or bytes that the storage codec refuses (a wrong ``codec``), are
  never changed: they are reported and the exit code is 1.

Every failure, however the store is damaged, is reported as a finding: doctor never prints a
traceback.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import msgspec

from liteagent.eventlog import Checkpointer, IntegrityProblem, Lease, SessionState, fold
from liteagent.eventlog.errors import LiteAgentError, NotADatabaseError, SessionLeasedError

from ._cli_env import CliEnv, NoStoreError
from ._cli_errors import UsageError, plain_error
from ._cli_output import emit_json, one_line, printable

__all__ = ["Finding", "cmd_doctor"]

_SALVAGED = frozenset({"corrupt", "gap", "unreadable"})  # repaired with Checkpointer.repair
_REPAIRABLE = frozenset({"torn_tail", "leftover", "interrupted_restore"} | _SALVAGED)
_STORE_REPAIRABLE = frozenset({"interrupted_gc"})
_INFORMATIONAL = frozenset({"unknown_kind", "open_tool_calls", "leftover"})
_NOT_DAMAGE = frozenset({"unknown_kind", "leftover", "torn_tail"})


class Finding(msgspec.Struct, kw_only=True):
    """One problem found, and what ``--repair`` did about it (``action``; "" = nothing).

    A salvage (``Checkpointer.repair``) also fills ``kept_head`` (the seqs ``1..kept_head``
    were kept), ``lost`` (``[first, last]`` ranges of lost seqs; ``last`` is ``None`` when how
    far the log went is unknown) and ``quarantine`` (where the damaged bytes were moved)."""

    session_id: str | None
    kind: str
    detail: str
    seq: int | None = None
    action: str = ""
    repaired: bool = False
    kept_head: int | None = None
    lost: list[tuple[int, int | None]] | None = None
    quarantine: str | None = None


_RUN_DOCTOR = re.compile(r"[;,]?\s*\(?`lite-agent doctor`[^;()]*\)?")


def _failure(e: Exception) -> str:
    """A one-line reason (without advice to run doctor: this is doctor); a foreign exception
    (a defect: the store should have translated it) is named by its type."""
    if isinstance(e, (LiteAgentError, OSError)):
        return _RUN_DOCTOR.sub("", plain_error(e)).strip()
    return f"{type(e).__name__}: {one_line(e)}"


_NOT_REPAIRED = (
    "not repaired: doctor cannot open the store; move {location} aside to start a new one "
    "(the moved copy keeps what can still be read)"
)


def _unopenable(e: Exception) -> Finding:
    """The finding of a store that cannot be opened at all: nothing can be repaired in it."""
    return Finding(
        session_id=None,
        kind="corrupt",
        detail=f"the store cannot be opened: {_failure(e)}",
    )


def _store_findings(cp: Checkpointer) -> list[Finding]:
    try:
        report = cp.check_integrity()
    except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
        return [
            Finding(
                session_id=None,
                kind="corrupt",
                detail=f"the store's integrity check failed: {_failure(e)}",
            )
        ]
    return [_finding(p) for p in report.problems]


def _gc_findings(cp: Checkpointer) -> list[Finding]:
    try:
        aside = cp.blobs.interrupted_deletes()
    except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
        return [Finding(session_id=None, kind="corrupt", detail=f"blobs: {_failure(e)}")]
    if not aside:
        return []
    return [
        Finding(
            session_id=None,
            kind="interrupted_gc",
            detail=f"a garbage collection was killed with {len(aside)} blobs set aside "
            "(each is put back when it is read)",
        )
    ]


def _finding(p: IntegrityProblem) -> Finding:
    return Finding(session_id=p.session_id, kind=p.kind, detail=p.detail, seq=p.seq)


def _session_findings(cp: Checkpointer, damaged: set[str]) -> tuple[list[Finding], int]:
    findings: list[Finding] = []
    try:
        sessions = [info.id for info in cp.list()]
    except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
        return [
            Finding(
                session_id=None, kind="corrupt", detail=f"cannot list the sessions: {_failure(e)}"
            )
        ], len(damaged)
    for sid in sessions:
        if sid in damaged:
            continue
        try:
            state: SessionState = fold(cp.read(sid))
        except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
            findings.append(Finding(session_id=sid, kind="unreadable", detail=_failure(e)))
            continue
        if state.pending_restore is not None:
            seq, started = state.pending_restore
            findings.append(
                Finding(
                    session_id=sid,
                    kind="interrupted_restore",
                    seq=seq,
                    detail=(
                        "an undo of a restore"
                        if started.undo_of
                        else f"a restore to seq {started.to_seq}"
                    )
                    + f" was interrupted ({len(started.files)} "
                    "files); the session refuses new turns until it is settled",
                )
            )
        if state.open_tool_calls and state.pending_restore is None:
            findings.append(
                Finding(
                    session_id=sid,
                    kind="open_tool_calls",
                    detail=f"{len(state.open_tool_calls)} tool calls without a result (a turn cut "
                    "short); the next prompt closes them as interrupted",
                )
            )
    return findings, len(set(sessions) | damaged)


def _rewrite(cp: Checkpointer, sid: str, kind: str, lease: Lease) -> str:
    head, generation = cp.position(sid)
    cp.truncate(sid, head, expected_head=head, expected_generation=generation, lease=lease)
    what = (
        "the unfinished write is gone"
        if kind == "torn_tail"
        else "the temp file of the interrupted truncate is gone"
    )
    return f"rewrote the log at its head, seq {head}: {what}"


def _salvage(cp: Checkpointer, finding: Finding) -> str:
    assert finding.session_id is not None
    report = cp.repair(finding.session_id)
    finding.kept_head = report.kept_head
    finding.lost = list(report.lost)
    finding.quarantine = report.quarantine
    if not report.repaired:
        return f"nothing to repair: the session reads to seq {report.kept_head}"
    kept = f"kept seqs 1..{report.kept_head}" if report.kept_head else "kept no events"
    lost = (
        "; ".join(
            f"lost seq {a} and any after it (how far the log went is unknown)"
            if b is None
            else f"lost seq {a}"
            if a == b
            else f"lost seqs {a}..{b}"
            for a, b in report.lost
        )
        or "lost nothing"
    )
    where = f"; the damaged bytes are in {report.quarantine}" if report.quarantine else ""
    return f"salvaged: {kept}, {lost}{where}"


def _settle(env: CliEnv, sid: str, finish: bool) -> str:
    started = fold(env.checkpointer.read(sid)).started
    if started is not None and started.workdir != str(env.workdir):
        raise LiteAgentError(
            f"its workspace is {started.workdir}; run `lite-agent --workdir {started.workdir} "
            "doctor --repair`"
        )
    agent = env.agent(model=False)
    if finish:
        result = agent.finish_restore(sid)
        return f"finished the restore: put back {', '.join(result.restored_files) or 'no files'}"
    paths = agent.rollback_restore(sid)
    return f"rolled the restore back: {', '.join(paths) or 'no files'} as before it"


def _leased(cp: Checkpointer, sid: str) -> Lease:
    """The session's lease for a repair: a session another process is running is not touched
    (its writer would find the log changed under it)."""
    try:
        return cp.acquire_lease(sid)
    except SessionLeasedError as e:
        holder = e.holder
        who = "another process" if holder is None else f"pid {holder.pid} on {holder.host}"
        raise LiteAgentError(f"the session is running in {who}; repair it once that stops") from e


def _repair(env: CliEnv, finding: Finding, finish: bool) -> None:
    if finding.kind in _STORE_REPAIRABLE:
        try:
            n = env.checkpointer.blobs.restore_interrupted_deletes()
            finding.action = f"put back {n} blobs set aside; `lite-agent gc` decides on them again"
            finding.repaired = True
        except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
            finding.action = f"not repaired: {_failure(e)}"
        return
    sid = finding.session_id
    if sid is None or finding.kind not in _REPAIRABLE:
        finding.action = (
            "kept as is (written by a newer liteagent)" if finding.kind == "unknown_kind" else ""
        )
        return
    cp = env.checkpointer
    try:
        if finding.kind == "interrupted_restore":  # the agent takes the session's lease
            finding.action = _settle(env, sid, finish)
        else:
            with _leased(cp, sid) as lease:
                if finding.kind in _SALVAGED:
                    finding.action = _salvage(cp, finding)
                elif cp.head(sid) or finding.kind == "torn_tail":
                    finding.action = _rewrite(cp, sid, finding.kind, lease)
        finding.repaired = bool(finding.action)
    except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
        finding.action = f"not repaired: {_failure(e)}"


def _examine(env: CliEnv, repair: bool) -> tuple[list[Finding], int, bool, bool]:
    """The findings, the number of sessions, whether there is a store at all, and whether it
    could be opened."""
    try:
        cp = env.checkpointer
    except NoStoreError:
        return [], 0, False, False
    except UsageError as e:  # an option names something that is no store (a folder as --db)
        if not isinstance(e.__cause__, NotADatabaseError):  # a damaged one is a finding
            raise
        finding = _unopenable(e.__cause__)
        if repair:
            finding.action = _NOT_REPAIRED.format(location=env.location)
        return [finding], 0, True, False
    except Exception as e:  # noqa: BLE001 -- doctor reports whatever a damaged store raises
        finding = _unopenable(e)
        if repair:
            finding.action = _NOT_REPAIRED.format(location=env.location)
        return [finding], 0, True, False
    findings = _store_findings(cp) + _gc_findings(cp)
    damaged = {f.session_id for f in findings if f.session_id and f.kind not in _NOT_DAMAGE}
    more, count = _session_findings(cp, damaged)
    findings.extend(more)
    return findings, count, True, True


def cmd_doctor(env: CliEnv, args: argparse.Namespace) -> int:
    """Check (and with --repair, repair) every session of the project; a store that cannot
    be opened is a finding too (exit code 1), and no store at all is no problem (0)."""
    if args.finish_restores and not args.repair:  # it would check only, finishing nothing
        raise UsageError(
            "--finish-restores needs --repair: `lite-agent doctor --repair --finish-restores` "
            "finishes interrupted restores"
        )
    findings, count, exists, opened = _examine(env, args.repair)
    if args.repair and opened:
        seen: set[tuple[str | None, str]] = set()
        for f in findings:
            key = (f.session_id, "salvage" if f.kind in _SALVAGED else f.kind)
            if key in seen:  # one repair per session and kind
                f.action, f.repaired = "see above", True
                continue
            seen.add(key)
            _repair(env, f, args.finish_restores)
    remaining = [f for f in findings if f.kind not in _INFORMATIONAL and not f.repaired]
    doc: dict[str, Any] = {
        "store": env.location,
        "exists": exists,
        "sessions": count,
        "ok": not remaining,
        "repair": bool(args.repair),
        "findings": [msgspec.to_builtins(f) for f in findings],
    }
    if args.json:
        emit_json(doc)
    else:
        location = printable(env.location)
        if not exists:
            print(f"{location}: no store (no sessions)")
        else:
            print(f"{location}: {count} sessions" if opened else f"{location}: cannot be opened")
        for f in findings:
            where = (f.session_id or "the store") + (f" seq {f.seq}" if f.seq else "")
            print(f"  {f.kind:<20} {where}: {printable(f.detail)}")
            if f.action:
                print(f"  {'':<20} → {printable(f.action)}")
        if not findings:
            print("  no problems found")
        elif remaining and not args.repair:
            print("run `lite-agent doctor --repair` to repair what can be repaired")
    return 0 if not remaining else 1
