"""Many hosts on one store: real OS processes, each an asyncio agent running many sessions at
once on the same SQLite file or file-backend home (``_host_proc.py``).

- Each host with sessions of its own: every turn completes, none fails (no "database is
  locked", no lease or conflict error between hosts that never share a session).
- Every host on the same sessions at once: each send completes or is refused with
  ``AgentBusyError`` (another host runs that session), and each session's log holds exactly the
  prompts of the sends that completed, each a whole turn (its tool call answered, a final
  reply), with nothing of a refused one; the store passes its integrity check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from liteagent.eventlog import Checkpointer, StoredEvent, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, ToolResult, UserPrompt

HOST = Path(__file__).with_name("_host_proc.py")
TIMEOUT = 600  # seconds: a hang guard for the whole run, never a performance bound


def _store(backend: str, tmp: Path) -> Path:
    return tmp / ("log.db" if backend == "sqlite" else "home")


def _open(backend: str, tmp: Path) -> Checkpointer:
    if backend == "sqlite":
        return sqlite_checkpointer(_store(backend, tmp))
    return file_checkpointer(workdir=tmp / "work", home=_store(backend, tmp))


def _hosts(
    backend: str, tmp: Path, *, hosts: int, sessions: int, turns: int, shared: bool
) -> list[dict[str, list[str]]]:
    """Run ``hosts`` processes at once; what each send of each ended with, per host."""
    (tmp / "work").mkdir(exist_ok=True)
    procs = []
    for h in range(hosts):
        args = [backend, _store(backend, tmp), tmp / "work", h, sessions, turns, int(shared)]
        out = tmp / f"host{h}.json"
        cmd = [sys.executable, str(HOST), *map(str, args), str(out)]
        procs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), out))
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.read_text()))
    return results


def _whole_turns(events: list[StoredEvent]) -> list[str]:
    """The prompts of the log, checking that each is a whole turn: a tool call, its result,
    and a final reply, in that order, with nothing else between prompts but bookkeeping."""
    prompts: list[str] = []
    shape: list[str] = []
    for e in events:
        if isinstance(e.body, UserPrompt):
            assert not shape or shape == ["call", "result", "reply"], (prompts[-1:], shape)
            prompts.append(e.body.text)
            shape = []
        elif isinstance(e.body, AssistantMessage):
            shape.append("call" if e.body.stop_reason == "tool_use" else "reply")
        elif isinstance(e.body, ToolResult):
            shape.append("result")
    assert not shape or shape == ["call", "result", "reply"], (prompts[-1:], shape)
    return prompts


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_hosts_with_sessions_of_their_own_all_complete(backend: str, tmp_path: Path) -> None:
    """4 hosts x 100 sessions x 2 turns on one store: 800 turns, none fails."""
    results = _hosts(backend, tmp_path, hosts=4, sessions=100, turns=2, shared=False)
    ended = Counter(o for r in results for outcomes in r.values() for o in outcomes)
    assert ended == Counter({"ok": 800})
    with _open(backend, tmp_path) as cp:
        assert cp.check_integrity().ok
        assert 400 == len(cp.list())


def _shared(backend: str, tmp: Path, hosts: int, sessions: int, turns: int) -> Counter[str]:
    results = _hosts(backend, tmp, hosts=hosts, sessions=sessions, turns=turns, shared=True)
    ended = Counter(o for r in results for outcomes in r.values() for o in outcomes)
    assert set(ended) <= {"ok", "AgentBusyError"}, ended
    with _open(backend, tmp) as cp:
        report = cp.check_integrity()
        assert report.ok, report
        for sid in {sid for r in results for sid in r}:
            prompts = _whole_turns(list(cp.read(sid)))
            completed = Counter(
                f"host {h} turn {t}"
                for h, r in enumerate(results)
                for t, outcome in enumerate(r[sid])
                if outcome == "ok"
            )
            assert Counter(prompts) == completed, sid
    return ended


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_hosts_racing_for_the_same_sessions(backend: str, tmp_path: Path) -> None:
    """4 hosts on the same 60 sessions at once, 3 turns each: busy or whole, never mixed."""
    ended = _shared(backend, tmp_path, hosts=4, sessions=60, turns=3)
    assert ended["ok"] > 0


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_hosts_racing_for_the_same_sessions_soak(backend: str, tmp_path: Path) -> None:
    """The same with 6 hosts on 500 sessions, 4 turns each (``pytest -m soak``)."""
    ended = _shared(backend, tmp_path, hosts=6, sessions=500, turns=4)
    assert ended["ok"] > 0
