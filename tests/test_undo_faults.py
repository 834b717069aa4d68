"""Undo under SIGKILL: a worker process restores a session (55 files), then undoes the restore
and is killed at a random moment of the undo. A new agent then finds the undo completed, never
started, or interrupted; finish_restore / rollback_restore (what ``lite-agent doctor --repair``
runs) reach exactly the state before the restore / the state after it, and no blob that a log
or branch references is missing."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _restore_tools import TOOLS
from _restore_zygote import (
    SID,
    ZYGOTE,
    Round,
    Zygote,
    content_digest,
    files_of,
    open_checkpointer,
    run_round,
)

from liteagent.eventlog import Checkpointer
from liteagent.eventlog._gc import referenced_blobs
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """The helper process that forks the workers (one per module: it starts in seconds)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield Zygote(proc)
    finally:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        proc.wait(60)
        proc.stdout.close()


def agent_on(work: Path, cp: Checkpointer) -> LiteAgent:
    """An agent on ``work`` and ``cp``, in the session SID."""
    agent = create_lite_agent(
        model=scripted([]), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
    )
    agent.resume(SID)
    return agent


def all_referenced_blobs_exist(cp: Checkpointer) -> None:
    """Every blob any session (branches included) references is in the store."""
    refs: set[str] = set()
    for info in cp.list():
        refs |= referenced_blobs(cp, info.id)
    assert refs
    assert [] == sorted(r for r in refs if not cp.blobs.has(r))


def settle_undo(r: Round, cp: Checkpointer, agent: LiteAgent, rng: random.Random) -> str:
    """Check the state a kill during an undo left and settle it at random; return which.

    In the undo rounds the worker says ``restoring <seq> <log after the restore> <log
    before it>`` (content digests): the undo goes from the first to the second, and the
    workspace from ``r.initial`` (restored) to ``r.before`` (the prompts' changes)."""
    restored, original = r.before_digest, r.done_digest
    pending = agent.pending_restore()
    log = content_digest(list(cp.read(SID)))
    if pending is None and log == original:
        assert r.before == files_of(r.work)
        outcome = "completed"
    elif pending is None:
        assert restored == log
        assert r.initial == files_of(r.work)
        outcome = "not started"
    else:
        assert pending.undo_of is not None
        if rng.random() < 0.5:
            agent.finish_restore()
            assert original == content_digest(list(cp.read(SID)))
            assert r.before == files_of(r.work)
            outcome = "finished"
        else:
            agent.rollback_restore()
            assert restored == content_digest(list(cp.read(SID)))
            assert agent.pending_restore() is None
            assert r.initial == files_of(r.work)
            outcome = "rolled back"
    all_referenced_blobs_exist(cp)
    (branch,) = [b for b in agent.list_branches(SID) if b.available]
    # whatever the kill left, one more undo (or redo) is possible and exact
    agent.undo_restore(SID, branch=branch.id)
    want = r.initial if content_digest(list(cp.read(SID))) == restored else r.before
    assert want == files_of(r.work)
    return outcome


@pytest.mark.processes
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_sigkill_during_an_undo(zygote: Zygote, tmp_path: Path, backend: str) -> None:
    """After a SIGKILL at a random moment of an undo, a new agent finds it completed, never
    started, or interrupted — and finishing or rolling it back reaches exactly the state
    before / after the restore, with every referenced blob present."""
    rng = random.Random(f"undo-sigkill-{backend}")
    outcomes: list[str] = []
    durations: list[float] = []
    for n in range(18):  # two rounds to time a whole undo, then 16 random kills
        kill_after = None if n < 2 else rng.uniform(0.0, min(durations) * 1.3)
        r = run_round(
            zygote, tmp_path / f"round{n}", backend, rng, kill_after=kill_after, mode="undo"
        )
        if n < 2:
            durations.append(float(r.said["restored"][0]))
        with open_checkpointer(backend, r.store) as cp, agent_on(r.work, cp) as agent:
            outcomes.append(settle_undo(r, cp, agent, rng))
    assert ["completed", "completed"] == outcomes[:2]
    assert {"finished", "rolled back"} & set(outcomes), outcomes


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_crash_inside_an_undo_file_write(zygote: Zygote, tmp_path: Path) -> None:
    """A worker killed inside the undo's first file write leaves an interrupted undo that
    finish_restore completes to exactly the workspace and log before the restore."""
    r = run_round(
        zygote, tmp_path, "file", random.Random(11), kill_after=None, mode="undo_die_in_write"
    )
    with file_checkpointer_of(r) as cp, agent_on(r.work, cp) as agent:
        pending = agent.pending_restore()
        assert pending is not None
        assert pending.undo_of is not None
        agent.finish_restore()
        assert r.done_digest == content_digest(list(cp.read(SID)))
        all_referenced_blobs_exist(cp)
    assert r.before == files_of(r.work)


def file_checkpointer_of(r: Round) -> Checkpointer:
    """The file checkpointer of a round's store."""
    return open_checkpointer("file", r.store)
