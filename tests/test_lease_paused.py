"""A holder that is alive but stopped (SIGSTOP) for longer than its lease's ttl: another
process takes the session over and works on it; when the first is continued it must change
nothing more: no further tool call of its turn runs, its delete deletes nothing, its restore
writes no file, puts nothing back and deletes no branch. Each gets ``LeaseLostError``.

Real processes on one SQLite store (whose leases expire; a file-backend lease is an ``flock``
a stopped holder keeps, see test_session_lease). The child's leases live 1 s unrenewed; it
stops at a chosen call (``pause`` in ``_lease_procs``) and the test SIGSTOPs it there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lease_procs import ForkServer, fork_server, result, signal_file, wait_file, wait_until
from _restore_model import call, reply

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent
from liteagent.tools import write_file

pytestmark = pytest.mark.processes

TTL = 1.0  # seconds the child's leases live unrenewed
SESSION = "s"


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    """One fork server per module (importing liteagent takes seconds)."""
    with fork_server() as s:
        yield s


@pytest.fixture
def procs(server: ForkServer) -> Iterator[ForkServer]:
    """The fork server; children a failed test left behind are killed afterwards."""
    yield server
    server.kill_all()


class Scene:
    """The store, the workspace and a folder for the child's signals."""

    def __init__(self, root: Path) -> None:
        self.db = root / "sessions.db"
        self.work = root / "work"
        self.work.mkdir()
        self.folder = root / "signals"
        self.folder.mkdir()
        self.cp: Checkpointer = sqlite_checkpointer(self.db)

    def agent(self, *script: Any) -> LiteAgent:
        """An agent of this process (the one that takes over)."""
        return create_lite_agent(
            model=scripted(list(script)),
            model_name="m",
            workdir=self.work,
            checkpointer=self.cp,
            tools=[write_file],
            context=False,
        )

    def job(self, **job: Any) -> dict[str, Any]:
        return {
            "name": "A",
            "dir": str(self.folder),
            "work": str(self.work),
            "backend": "sqlite",
            "store": str(self.db),
            "session": SESSION,
            "prompt": "from A",
            "steps": [],
            "lease_ttl": TTL,
            **job,
        }


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path)
    try:
        yield s
    finally:
        s.cp.close()


def stopped_past_its_lease(scene: Scene, pid: int, at: str) -> None:
    """Once the child signalled ``at``: SIGSTOP it and wait until its lease has expired."""
    wait_file(scene.folder, at)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: scene.cp.lease_holder(SESSION) is None, "the lease to expire")
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        raise


def continued(procs: ForkServer, scene: Scene, pid: int, go: str) -> dict[str, Any]:
    """SIGCONT the child, let it go on from where it waits; its report once it exited."""
    os.kill(pid, signal.SIGCONT)
    signal_file(scene.folder, go)
    report = result(scene.folder, "A")
    assert 0 == procs.wait(pid), report
    return report


def test_a_turn_stopped_past_its_lease_runs_no_further_tool(
    procs: ForkServer, scene: Scene
) -> None:
    """The child's turn is stopped inside its first of two tool calls; another process takes
    the session and runs a turn; continued, the child runs no second tool (it did before,
    and then only its log writes were refused)."""
    mark = {"name": "mark", "input": {"label": "one", "enter": "in-one", "block": "go-on"}}
    steps = [{"tools": [mark, {"name": "mark", "input": {"label": "two"}}]}, {"text": "A"}]
    pid = procs.start(**scene.job(steps=steps))
    stopped_past_its_lease(scene, pid, "in-one")
    with scene.agent(reply("B done")) as b:
        assert "B done" == b.send("from B", session_id=SESSION).text
        head = scene.cp.head(SESSION)
        report = continued(procs, scene, pid, "go-on")
        assert "LeaseLostError" == report["type"], report
        assert (scene.folder / "tool-one").exists()
        assert not (scene.folder / "tool-two").exists()
        assert head == scene.cp.head(SESSION)


def test_a_delete_stopped_past_its_lease_deletes_nothing(procs: ForkServer, scene: Scene) -> None:
    """The child's delete_session is stopped after taking the lease; another process takes
    the session and has two turns acknowledged; continued, the child's delete raises
    LeaseLostError and the log keeps every turn (it deleted them all)."""
    with scene.agent(reply("first"), reply("B1"), reply("B2")) as b:
        b.send("first", session_id=SESSION)
        pid = procs.start(**scene.job(op="delete", pause=["checkpointer", "delete", 1, "before"]))
        stopped_past_its_lease(scene, pid, "paused")
        b.send("B1", session_id=SESSION)
        b.send("B2", session_id=SESSION)
        events = list(scene.cp.read(SESSION))
        report = continued(procs, scene, pid, "resume")
        assert "LeaseLostError" == report["type"], report
        assert events == list(scene.cp.read(SESSION))


@pytest.mark.parametrize(
    "pause",
    [
        ["liteagent.actors._restore_files", "put_file", 1, "after"],
        ["checkpointer", "truncate", 1, "before"],
    ],
    ids=["after-the-first-file", "before-the-conclusion"],
)
def test_a_restore_stopped_past_its_lease_changes_no_file_and_keeps_the_branch(
    procs: ForkServer, scene: Scene, pause: list[Any]
) -> None:
    """The child's restore is stopped after putting back the first of two files (or with
    both put back, before the truncate that concludes it); another process finishes the
    interrupted restore (which keeps a branch) and writes both files again; continued, the
    child writes no file, puts none back and deletes no branch: before, it wrote its second
    file, then "rolled back" both over the new holder's and deleted the branch the new
    holder's undo needs."""
    for name in ("a.txt", "b.txt"):
        (scene.work / name).write_text("v0")
    writes = [
        call("write_file", {"path": "a.txt", "content": "v1"}),
        call("write_file", {"path": "b.txt", "content": "v1"}),
        reply("wrote v1"),
    ]
    with scene.agent(*writes) as b:
        b.send("write v1", session_id=SESSION)
    pid = procs.start(**scene.job(op="restore", pause=pause))
    stopped_past_its_lease(scene, pid, "paused")
    again = [
        call("write_file", {"path": "a.txt", "content": "v3"}),
        call("write_file", {"path": "b.txt", "content": "v3"}),
        reply("wrote v3"),
    ]
    with scene.agent(*again) as b:
        assert {"a.txt", "b.txt"} == set(b.finish_restore(SESSION).restored_files)
        (branch,) = b.list_branches(SESSION)
        b.send("write v3", session_id=SESSION)
        events = list(scene.cp.read(SESSION))
        report = continued(procs, scene, pid, "resume")
        assert "LeaseLostError" == report["type"], report
        assert ["v3", "v3"] == [(scene.work / n).read_text() for n in ("a.txt", "b.txt")]
        assert [branch.id] == [x.id for x in b.list_branches(SESSION)]
        assert events == list(scene.cp.read(SESSION))
