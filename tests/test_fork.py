"""Fork: a new session whose log is the original's events before a checkpoint, with a forked
record; the original untouched; files shared, or put back into another folder."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from _restore_tools import TOOLS, workspace

from liteagent.eventlog import Checkpointer, fold, memory_checkpointer, sqlite_checkpointer
from liteagent.eventlog.types import (
    AssistantMessage,
    FileSnapshot,
    Forked,
    RestoreStarted,
    TextBlock,
    ToolUseBlock,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    InterruptedRestoreError,
    InvalidArgumentError,
    InvalidCheckpointError,
    LiteAgent,
    RestoreRefusedError,
    create_async_lite_agent,
    create_lite_agent,
)

SID = "original"
_IDS = iter(range(10**9))


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(name: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def agent_on(work: Path, cp: Checkpointer, script: list[Any] | None = None) -> LiteAgent:
    """An agent on ``work`` and ``cp``, in the session SID."""
    agent = create_lite_agent(
        model=scripted(script or []), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
    )
    agent.resume(SID)
    return agent


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A workspace with one file the user already had."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "keep.txt").write_text("the user's own file\n")
    return path


def three_prompts(work: Path, cp: Checkpointer) -> list[int]:
    """p1 creates a.txt; p2 edits keep.txt; p3 deletes a.txt. Returns the checkpoints."""
    script = [
        call("write_file", path="a.txt", content="a"),
        reply("p1"),
        call("edit_file", path="keep.txt", old_string="own", new_string="edited"),
        reply("p2"),
        call("delete_file", path="a.txt"),
        reply("p3"),
    ]
    with agent_on(work, cp, script) as agent:
        for p in ("p1", "p2", "p3"):
            agent.send(p)
        return [c.seq for c in agent.list_checkpoints()]


def test_fork_copies_the_log_before_the_checkpoint(work: Path, tmp_path: Path) -> None:
    """The fork's log is the original's events before the checkpoint (same seqs, kinds and
    bodies) and a forked record; the original and the files are untouched; the fork goes on
    on its own."""
    with sqlite_checkpointer(tmp_path / "log.db") as cp:
        _, second, _ = three_prompts(work, cp)
        log, files = list(cp.read(SID)), workspace(work)
        with agent_on(work, cp, [reply("in the fork")]) as agent:
            fork = agent.fork(SID, second)
            assert SID == agent.session_id
            events = list(cp.read(fork))
            assert [(e.seq, e.kind, e.body) for e in log[: second - 1]] == [
                (e.seq, e.kind, e.body) for e in events[:-1]
            ]
            assert Forked(origin=SID, at_seq=second) == events[-1].body
            assert log == list(cp.read(SID))
            assert files == workspace(work)
            assert ["p1"] == [c.prompt for c in agent.list_checkpoints(fork)]
            assert fold(events).forked_from == events[-1].body
            agent.send("go on", session_id=fork)
            assert ["p1", "go on"] == [c.prompt for c in agent.list_checkpoints(fork)]
            assert log == list(cp.read(SID))
            assert {SID, fork} == {s.id for s in agent.list_sessions()}


def test_a_fork_shares_the_workspace_and_the_blobs(work: Path) -> None:
    """Forked before p2 on the shared workspace, the fork restores to p1 only once the files
    are as its own history left them: its snapshots' blobs are the original's."""
    with memory_checkpointer() as cp:
        first, _, third = three_prompts(work, cp)
        with agent_on(work, cp) as agent:
            fork = agent.fork(SID, third)
            # the workspace holds p3's deletion of a.txt, which the fork's history lacks
            with pytest.raises(RestoreRefusedError) as info:
                agent.restore(fork, first)
            assert ["a.txt"] == [path for path, _ in info.value.problems]
            (work / "a.txt").write_text("a")  # as the fork's history left it
            result = agent.restore(fork, first)
            assert ("a.txt", "keep.txt") == result.restored_files
            assert {"keep.txt": b"the user's own file\n"} == workspace(work)
            refs = {
                e.body.pre_image
                for e in cp.read(SID)
                if isinstance(e.body, FileSnapshot) and e.body.pre_image is not None
            }
            assert refs
            assert all(cp.blobs.has(r) for r in refs)


def test_fork_into_another_workdir_puts_the_files_back_there(work: Path, tmp_path: Path) -> None:
    """With a workdir (a copy of the workspace), the files changed since the checkpoint are
    put back in the copy; the original workspace is untouched; a copy that is not as the agent
    left the files is refused, naming them, and nothing is created."""
    with memory_checkpointer() as cp:
        _, second, _ = three_prompts(work, cp)
        files = workspace(work)
        copy = tmp_path / "copy"
        shutil.copytree(work, copy)
        (copy / "keep.txt").write_text("changed in the copy")
        with agent_on(work, cp) as agent:
            sessions = cp.list()
            with pytest.raises(RestoreRefusedError) as info:
                agent.fork(SID, second, workdir=copy)
            assert ["keep.txt"] == [path for path, _ in info.value.problems]
            assert sessions == cp.list()
            (copy / "keep.txt").write_text((work / "keep.txt").read_text())
            fork = agent.fork(SID, second, workdir=copy)
            assert {"keep.txt": b"the user's own file\n", "a.txt": b"a"} == workspace(copy)
            assert files == workspace(work)
            last = list(cp.read(fork))[-1].body
            assert Forked(origin=SID, at_seq=second, workdir=str(copy.resolve())) == last


def test_fork_refusals(work: Path) -> None:
    """A seq that is not a checkpoint, a workdir that is not a folder, and a session with an
    interrupted restore are refused; nothing is created."""
    with memory_checkpointer() as cp:
        first, _, _ = three_prompts(work, cp)
        with agent_on(work, cp) as agent:
            sessions = cp.list()
            with pytest.raises(InvalidCheckpointError):
                agent.fork(SID, first + 1)
            with pytest.raises(InvalidArgumentError):
                agent.fork(SID, first, workdir=work / "missing")
            cp.append(SID, [RestoreStarted(to_seq=first, conversation=True)])
            with pytest.raises(InterruptedRestoreError):
                agent.fork(SID, first)
            assert [s.id for s in sessions] == [s.id for s in cp.list()]


def test_async_fork(work: Path) -> None:
    """The asyncio shell forks off the loop."""
    with memory_checkpointer() as cp:
        _, second, _ = three_prompts(work, cp)

        async def main() -> str:
            agent = create_async_lite_agent(
                model=scripted([]), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
            )
            async with agent:
                return await agent.fork(SID, second)

        fork = asyncio.run(main())
        assert isinstance(list(cp.read(fork))[-1].body, Forked)
