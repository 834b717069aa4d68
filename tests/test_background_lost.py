"""Background tasks whose process is gone are told to the model as lost, not left waiting.

A background task's start is recorded with the process running it (``BackgroundStarted``).
When that process ends before the task (its agent closed, or it was killed with SIGKILL), the
session's next turn records the task as failed and tells the model; a task still running in
another agent of the same process, or started on another host, is left open. A fork is told
that the tasks open at its checkpoint report to the original.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import fold, sqlite_checkpointer
from liteagent.eventlog._liveness import started_self
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    TextBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import LiteAgent, create_lite_agent
from liteagent.tools import bash

WAIT = 60.0  # a bound on waiting for a condition (never asserted as a timing)
LOST = re.compile(r"\[background task (bg-[0-9a-f]{8}) \(([^)]*)\) lost: ([^\]]*)\]")


def _start(command: str) -> AssistantMessage:
    call = ToolUseBlock("t-bg", "bash", {"command": command, "run_in_background": True})
    return AssistantMessage(content=(call,), stop_reason="tool_use")


class Model:
    """Replies "ok" and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.requests.append(request)
        return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")

    def last_user_text(self) -> str:
        """The text of the last request's last (user) message."""
        last = self.requests[-1].messages[-1]
        return "\n".join(b.text for b in last.content if isinstance(b, TextBlock))


def _agent(work: Path, db: Path, script: list[Any]) -> LiteAgent:
    return create_lite_agent(
        model=scripted(script),
        model_name="m",
        workdir=work,
        tools=[bash],
        checkpointer=sqlite_checkpointer(db),
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


def _next_turn(work: Path, db: Path, text: str) -> Model:
    """A new agent's turn on session "s"; its model, which kept the request."""
    model = Model()
    agent = _agent(work, db, [model])
    try:
        agent.send(text, session_id="s")
    finally:
        agent.close()
    return model


def _events(db: Path, session_id: str) -> list[Any]:
    """The session's stored events (read through a checkpointer of their own)."""
    cp = sqlite_checkpointer(db)
    try:
        return list(cp.read(session_id))
    finally:
        cp.close()


def _read(db: Path, session_id: str) -> list[Any]:
    """The bodies of the session's events."""
    return [e.body for e in _events(db, session_id)]


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_task_stopped_by_close_is_told_to_the_model_as_lost(work: Path, db: Path) -> None:
    """An agent closed while its background task runs: the next agent's next turn records the
    task as failed, tells the model which task was lost and why, and leaves nothing open."""
    first = Model()
    agent = _agent(work, db, [_start("sleep 30"), first])
    agent.send("start it", session_id="s")
    agent.close()
    model = _next_turn(work, db, "what became of it?")
    bodies = _read(db, "s")
    (start,) = [b for b in bodies if isinstance(b, BackgroundStarted)]
    (end,) = [b for b in bodies if isinstance(b, BackgroundCompleted)]
    assert (start.task_id, start.tool_call_id, start.pid) == (end.task_id, "t-bg", os.getpid())
    assert not end.ok
    found = LOST.search(model.last_user_text())
    assert found is not None, model.last_user_text()
    assert (start.task_id, "sleep 30") == found.group(1, 2)
    assert "closed" in found.group(3)
    assert "what became of it?" in model.last_user_text()
    assert () == fold(_events(db, "s")).background_open


def test_a_task_running_in_another_agent_of_this_process_is_not_lost(work: Path, db: Path) -> None:
    """Agent A starts a task; agent B (same process, same store) takes a turn on the session
    while it runs: nothing is recorded lost, and A records the task's real end afterwards."""
    gate = work / "go"
    a = _agent(
        work, db, [_start(f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done"), Model()]
    )
    model = Model()
    b = _agent(work, db, [model])
    try:
        a.send("start it", session_id="s")
        b.send("meanwhile", session_id="s")
        assert LOST.search(model.last_user_text()) is None
        gate.touch()
        assert _until(lambda: any(isinstance(x, BackgroundCompleted) for x in _read(db, "s")))
    finally:
        a.close()
        b.close()
    ends = [x for x in _read(db, "s") if isinstance(x, BackgroundCompleted)]
    assert [True] == [e.ok for e in ends]
    assert "done" in ends[0].summary


_CHILD = textwrap.dedent(
    """
    import sys, time
    from liteagent.eventlog import sqlite_checkpointer
    from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
    from liteagent.providers import scripted
    from liteagent.sdk import create_lite_agent
    from liteagent.tools import bash

    call = ToolUseBlock("t-bg", "bash", {"command": "sleep 5", "run_in_background": True})
    agent = create_lite_agent(
        model=scripted([
            AssistantMessage(content=(call,), stop_reason="tool_use"),
            AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn"),
        ]),
        model_name="m", workdir=sys.argv[1], tools=[bash],
        checkpointer=sqlite_checkpointer(sys.argv[2]),
    )
    agent.send("start it", session_id="s")
    print("started", flush=True)
    time.sleep(600)
    """
)


def test_a_task_whose_process_was_killed_is_lost(work: Path, db: Path) -> None:
    """A real process starts a task and is killed with SIGKILL: the next turn, in this
    process, records the task as lost."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(work), str(db)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert "started" == child.stdout.readline().strip()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(WAIT)
        if child.stdout is not None:
            child.stdout.close()
    model = _next_turn(work, db, "and now?")
    found = LOST.search(model.last_user_text())
    assert found is not None, model.last_user_text()
    (end,) = [b for b in _read(db, "s") if isinstance(b, BackgroundCompleted)]
    assert (found.group(1), False) == (end.task_id, end.ok)


def _stored_start(db: Path, **kw: Any) -> None:
    """A session whose log says a task was started by the process ``kw`` names."""
    cp = sqlite_checkpointer(db)
    try:
        cp.append(
            "s",
            [
                UserPrompt(content=(TextBlock("start it"),)),
                AssistantMessage(content=(TextBlock("started"),), stop_reason="end_turn"),
                BackgroundStarted(task_id="bg-0000abcd", description="job", **kw),
            ],
        )
    finally:
        cp.close()


def test_a_task_started_on_another_host_is_left_open(work: Path, db: Path) -> None:
    """Nothing here can tell whether a process of another host still runs: its task stays
    open and nothing is told to the model."""
    _stored_start(db, pid=os.getpid(), host="another-host", process=started_self())
    model = _next_turn(work, db, "next")
    assert LOST.search(model.last_user_text()) is None
    assert ["bg-0000abcd"] == [t.task_id for t in fold(_events(db, "s")).background_open]


def test_a_task_of_a_gone_process_of_this_host_is_lost(work: Path, db: Path) -> None:
    """A record naming a process of this host that no longer exists: lost at the next turn."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(WAIT)
    machine = started_self().rpartition("|")[0]
    _stored_start(db, pid=gone.pid, host=os.uname().nodename, process=f"{machine}|1")
    model = _next_turn(work, db, "next")
    found = LOST.search(model.last_user_text())
    assert found is not None
    assert ("bg-0000abcd", "job") == found.group(1, 2)


def test_a_fork_is_told_its_open_tasks_report_to_the_original(work: Path, db: Path) -> None:
    """A fork at a checkpoint after a task started (still running): the fork records the task
    as ended for it and tells the model where the result goes; the original keeps it open."""
    gate = work / "go"
    agent = _agent(
        work,
        db,
        [_start(f"while [ ! -e {gate} ]; do sleep 0.05; done"), Model(), Model(), Model()],
    )
    try:
        agent.send("start it", session_id="s")
        agent.send("second", session_id="s")
        second = agent.list_checkpoints("s")[-1].seq
        fork = agent.fork("s", second)
        forked = _read(db, fork)
        assert [] == [t.task_id for t in fold(_events(db, fork)).background_open]
        (notice,) = [b for b in forked if isinstance(b, UserPrompt) and b.origin == "background"]
        found = LOST.search(notice.content[0].text)
        assert found is not None
        assert "reports to session 's' only" in found.group(3)
        assert 1 == len(fold(_events(db, "s")).background_open)
    finally:
        gate.touch()
        agent.close()


def test_task_ids_are_random_and_unique() -> None:
    """Two processes never start tasks of one id in a session: ids are random."""
    from liteagent.actors._background import new_task_id

    ids = {new_task_id() for _ in range(1000)}
    assert 1000 == len(ids)
    assert all(re.fullmatch(r"bg-[0-9a-f]{8}", i) for i in ids)


def test_descriptions_are_stored_as_text_and_cut() -> None:
    """A description with a lone surrogate or of any length is stored as bounded text."""
    from liteagent.actors._background import DESCRIPTION_CHARS, started

    record = started("bg-1", "t", "x\udcff" + "y" * 1000)
    assert "\udcff" not in record.description
    assert DESCRIPTION_CHARS == len(record.description)
