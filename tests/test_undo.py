"""Undoable restore: a restore keeps what it takes away as a branch; undo_restore brings back the
events and the files, refuses over a foreign change, and is itself undoable."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from _restore_tools import TOOLS, workspace

from liteagent.actors import _restore_files
from liteagent.actors._switch import Switch
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    StoredEvent,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog._branches import branch_prefix, is_branch_session
from liteagent.eventlog._gc import referenced_blobs
from liteagent.eventlog.errors import InvalidSessionIdError
from liteagent.eventlog.types import (
    AssistantMessage,
    BranchCreated,
    RestoreFinished,
    TextBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    InterruptedRestoreError,
    LiteAgent,
    NoBranchError,
    OperationCancelledError,
    RestoreRefusedError,
    create_async_lite_agent,
    create_lite_agent,
)

SID = "undo"
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


def content(events: list[StoredEvent]) -> list[tuple[int, str, object]]:
    """A log without its times (events brought back carry the time of the undo)."""
    return [(e.seq, e.kind, e.body) for e in events]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A workspace with one file the user already had."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "keep.txt").write_text("the user's own file\n")
    return path


SCRIPT = [
    call("edit_file", path="keep.txt", old_string="own", new_string="edited"),
    call("write_file", path="sub/b.txt", content="b"),
    reply("p1 done"),
    call("write_file", path="c.txt", content="c"),
    call("delete_file", path="sub/b.txt"),
    reply("p2 done"),
]


def two_prompts(work: Path, cp: Checkpointer) -> list[int]:
    """p1 edits keep.txt and creates sub/b.txt; p2 creates c.txt and deletes sub/b.txt.
    Returns the checkpoints' seqs."""
    with agent_on(work, cp, SCRIPT) as agent:
        agent.send("p1")
        agent.send("p2")
        return [c.seq for c in agent.list_checkpoints()]


def branch_ids(cp: Checkpointer) -> list[str]:
    """The branch sessions of SID."""
    return sorted(i.id for i in cp.list() if i.id.startswith(branch_prefix(SID)))


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_undo_brings_back_the_events_and_the_files(
    work: Path, tmp_path: Path, backend: str
) -> None:
    """After a restore, undo_restore brings back every event it removed (same seqs, kinds
    and bodies) and the files as they were just before it; the branch session is gone, and a
    new branch (made by the undo) can take it all away again."""
    cp = {
        "memory": memory_checkpointer,
        "file": lambda: file_checkpointer(tmp_path / "store"),
        "sqlite": lambda: sqlite_checkpointer(tmp_path / "log.db"),
    }[backend]()
    with cp:
        first, _ = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            result = agent.restore(SID, first)
            assert result.branch is not None
            assert [result.branch] == branch_ids(cp)
            (branch,) = agent.list_branches(SID)
            assert (result.branch, "restore", first, len(log) - first + 1) == (
                branch.id,
                branch.made_by,
                branch.at_seq,
                branch.events,
            )
            assert (("p1", "p2"), True) == (branch.prompts, branch.available)
            assert ("c.txt", "keep.txt", "sub/b.txt") == branch.files
            undone = agent.undo_restore(SID)
            assert before == workspace(work)
            assert content(log) == content(list(cp.read(SID)))
            assert [undone.branch] == branch_ids(cp)
            (again,) = agent.list_branches(SID)
            assert ("undo", 0, True) == (again.made_by, again.events, again.available)
            assert [SID] == [s.id for s in agent.list_sessions()]
        assert any(is_branch_session(s.id) for s in cp.list())


def test_an_undo_is_undoable(work: Path) -> None:
    """Undoing the undo takes the events away again and puts the restored files back; a third
    undo brings them back once more."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            restored, restored_log = workspace(work), list(cp.read(SID))
            agent.undo_restore(SID)
            agent.undo_restore(SID)
            assert restored == workspace(work)
            assert content(restored_log) == content(list(cp.read(SID)))
            agent.undo_restore(SID)
            assert before == workspace(work)
            assert content(log) == content(list(cp.read(SID)))
            assert 1 == len(branch_ids(cp))


def test_a_branch_id_is_not_a_session_the_agent_uses(work: Path) -> None:
    """Every method that takes a session refuses a branch's reserved id (InvalidSessionIdError,
    nothing written): a prompt sent into a branch would come back with its undo."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp, [reply("unused")]) as agent:
            branch = agent.restore(SID, first).branch
            assert branch is not None
            kept = content(list(cp.read(branch)))
            for use in [
                lambda: agent.send("hello", session_id=branch),
                lambda: agent.resume(branch),
                lambda: agent.restore(branch, 2),
                lambda: agent.list_checkpoints(branch),
                lambda: agent.delete_session(branch),
                lambda: agent.compact(session_id=branch),
                lambda: agent.undo_restore(branch),
            ]:
                with pytest.raises(InvalidSessionIdError, match="is a branch"):
                    use()
            assert kept == content(list(cp.read(branch)))
            agent.undo_restore(SID)
            assert ["p1", "p2"] == [c.prompt for c in agent.list_checkpoints(SID)]


def test_two_restores_undo_in_reverse_order(work: Path) -> None:
    """Restore to p2, then to p1: undo brings back p1's prompt, a second undo p2's (a
    restore's branch goes before an undo's)."""
    with memory_checkpointer() as cp:
        first, second = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, second)
            middle, middle_log = workspace(work), list(cp.read(SID))
            agent.restore(SID, first)
            agent.undo_restore(SID)
            assert middle == workspace(work)
            assert content(middle_log) == content(list(cp.read(SID)))
            agent.undo_restore(SID)
            assert before == workspace(work)
            assert content(log) == content(list(cp.read(SID)))


def test_undo_refuses_a_file_changed_since_and_changes_nothing(work: Path) -> None:
    """A file changed (or deleted) after the restore put it back is named, and neither the
    files nor any log (nor the branch) change."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            (work / "keep.txt").write_text("the user again")
            files, log, branches = workspace(work), list(cp.read(SID)), branch_ids(cp)
            with pytest.raises(RestoreRefusedError) as info:
                agent.undo_restore(SID)
            assert files == workspace(work)
            assert log == list(cp.read(SID))
            assert branches == branch_ids(cp)
    assert [
        (
            "keep.txt",
            "it was changed since the restore put it back (by the user, a shell command, the "
            "agent or another session)",
        )
    ] == info.value.problems


def test_undo_refuses_when_the_session_moved_on(work: Path) -> None:
    """A prompt sent after the restore makes the branch unavailable (its events would not
    follow on): the undo is refused, saying why; restoring to before that prompt makes it
    available again."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp, [reply("new")]) as agent:
            agent.restore(SID, first)
            agent.send("a new prompt")
            (branch,) = agent.list_branches(SID)
            assert not branch.available
            assert branch.reason.startswith("the session moved on since")
            log = list(cp.read(SID))
            with pytest.raises(RestoreRefusedError) as info:
                agent.undo_restore(SID)
            assert log == list(cp.read(SID))
            assert [("", f"branch {branch.id}: {branch.reason}")] == info.value.problems
            newest = agent.list_checkpoints()[-1].seq
            agent.restore(SID, newest)
            assert {branch.id} < {b.id for b in agent.list_branches(SID) if b.available}
            agent.undo_restore(SID, branch=branch.id)
            assert ["p1", "p2"] == [c.prompt for c in agent.list_checkpoints()]


def test_undo_without_a_branch(work: Path) -> None:
    """No restore: NoBranchError; a branch id that is not one of the session's: likewise."""
    with memory_checkpointer() as cp:
        two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            with pytest.raises(NoBranchError):
                agent.undo_restore(SID)
            with pytest.raises(NoBranchError):
                agent.undo_restore(SID, branch="branch..nothing")


def test_undo_of_a_files_only_and_a_conversation_only_restore(work: Path) -> None:
    """A files-only restore's undo puts the files back and keeps the log (with the records of
    both); a conversation-only restore's undo brings the events back and touches no file."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, first, conversation=False)
            assert before != workspace(work)
            agent.undo_restore(SID)
            assert before == workspace(work)
            kinds = [e.kind for e in cp.read(SID)][len(log) :]
            assert ["restore_started", "restore_finished"] * 2 == kinds
            after_files_only = list(cp.read(SID))
            agent.restore(SID, first, files=False)
            assert before == workspace(work)
            (branch,) = [b for b in agent.list_branches(SID) if b.available]
            assert () == branch.files
            agent.undo_restore(SID)
            assert before == workspace(work)
            assert content(after_files_only) == content(list(cp.read(SID)))


def test_undo_that_fails_writing_a_file_changes_nothing(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing in the middle of an undo puts the files back, takes the events it
    appended away again, and keeps the branch: a later undo succeeds."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before = workspace(work)
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            files, log, branches = workspace(work), list(cp.read(SID)), branch_ids(cp)
            real = _restore_files.put_file
            calls: list[str] = []

            def failing(root: Path, rel: str, data: bytes | None, mode: int | None = None) -> None:
                calls.append(rel)
                if len(calls) == 2:
                    raise OSError(28, "No space left on device")
                real(root, rel, data, mode)

            monkeypatch.setattr(_restore_files, "put_file", failing)
            with pytest.raises(_restore_files.RestoreFailedError):
                agent.undo_restore(SID)
            monkeypatch.undo()
            assert files == workspace(work)
            assert log == list(cp.read(SID))
            assert branches == branch_ids(cp)
            assert agent.pending_restore() is None
            agent.undo_restore(SID)
            assert before == workspace(work)


@pytest.mark.parametrize("how", ["a failed write", "a cancel"])
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_restore_that_fails_leaves_the_restore_before_it_undoable(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, backend: str
) -> None:
    """Restore to p2, then a restore to p1 that fails half way (a write fails, or its token is
    cancelled after the first file): the files and the log are as the first restore left
    them, nothing is pending, and the first restore can still be undone."""
    cp = (
        file_checkpointer(tmp_path / "s")
        if backend == "file"
        else sqlite_checkpointer(tmp_path / "s.db")
    )
    with cp:
        first, second = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, second)
            middle, middle_log = workspace(work), list(cp.read(SID))
            real = _restore_files.put_file
            token = CancelToken()
            calls: list[str] = []

            def failing(root: Path, rel: str, data: bytes | None, mode: int | None = None) -> None:
                calls.append(rel)
                if len(calls) == 2 and how == "a failed write":
                    raise OSError(28, "No space left on device")
                real(root, rel, data, mode)
                if how == "a cancel":
                    token.cancel("stop")

            monkeypatch.setattr(_restore_files, "put_file", failing)
            error = (
                _restore_files.RestoreFailedError
                if how == "a failed write"
                else OperationCancelledError
            )
            with pytest.raises(error):
                agent.restore(SID, first, cancel=token)
            monkeypatch.undo()
            assert middle == workspace(work)
            assert content(middle_log) == content(list(cp.read(SID)))
            assert agent.pending_restore() is None
            assert [True] == [b.available for b in agent.list_branches(SID)]
            agent.undo_restore(SID)
            assert before == workspace(work)
            assert content(log) == content(list(cp.read(SID)))


def test_a_cancelled_undo_changes_nothing(work: Path) -> None:
    """An undo whose token is cancelled before it starts raises and changes nothing."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            files, log = workspace(work), list(cp.read(SID))
            token = CancelToken()
            token.cancel("changed my mind")
            with pytest.raises(OperationCancelledError):
                agent.undo_restore(SID, cancel=token)
            assert (files, log) == (workspace(work), list(cp.read(SID)))


def _crash_before_the_branch(agent: LiteAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start an undo that stops (as a crash would) right after its intent was appended."""

    def crash(*_: Any) -> None:
        raise SystemExit("killed")

    with monkeypatch.context() as m:
        m.setattr(Switch, "_write_branch", crash)
        with pytest.raises(SystemExit):
            agent.undo_restore(SID)


def test_an_interrupted_undo_is_finished_or_rolled_back(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undo's intent left at the end of the log (a crash) makes the session report an
    interrupted restore: rollback takes the events away again and keeps the branch; finish
    completes the undo, writing its branch since the crash came before."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            restored, restored_log = workspace(work), list(cp.read(SID))
            (branch,) = branch_ids(cp)
            _crash_before_the_branch(agent, monkeypatch)
            assert agent.pending_restore() is not None
            with pytest.raises(InterruptedRestoreError):
                agent.restore(SID, first)
            agent.rollback_restore()
            assert restored == workspace(work)
            assert content(restored_log) == content(list(cp.read(SID)))
            assert [branch] == branch_ids(cp)
            _crash_before_the_branch(agent, monkeypatch)
            agent.finish_restore()
            assert before == workspace(work)
            assert content(log) == content(list(cp.read(SID)))
            (made,) = branch_ids(cp)
            assert branch != made
            header = next(iter(cp.read(made))).body
            assert isinstance(header, BranchCreated)
            assert ("undo", branch) == (header.made_by, header.undo_of)


def test_undo_racing_a_writer_records_its_completion(work: Path) -> None:
    """A writer appending between the undo's intent and its conclusion: the events and files
    are back, so the undo records its completion after the writer's event."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            real = _restore_files.put_file
            done: list[str] = []

            def racing(root: Path, rel: str, data: bytes | None, mode: int | None = None) -> None:
                if not done:
                    cp.append(SID, [UserPrompt(content=(TextBlock("from elsewhere"),))])
                done.append(rel)
                real(root, rel, data, mode)

            with pytest.MonkeyPatch.context() as m:
                m.setattr(_restore_files, "put_file", racing)
                agent.undo_restore(SID)
            events = list(cp.read(SID))
            assert before == workspace(work)
            assert content(log) == content(events[: len(log)])
            assert ["restore_started", "user_prompt", "restore_finished"] == [
                e.kind for e in events[len(log) :]
            ]
            finished = events[-1].body
            assert isinstance(finished, RestoreFinished)
            assert "completed" == finished.outcome
            assert agent.pending_restore() is None


def test_delete_session_removes_its_branches(work: Path) -> None:
    """Deleting a session deletes its branch sessions too."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            agent.restore(SID, first)
            assert branch_ids(cp)
            agent.delete_session(SID)
            assert [] == branch_ids(cp)
            assert [] == cp.list()


def test_async_undo_and_branches(work: Path) -> None:
    """The asyncio shell: list_branches and undo_restore work off the loop."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        before = workspace(work)

        async def main() -> None:
            agent = create_async_lite_agent(
                model=scripted([]), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
            )
            async with agent:
                await agent.restore(SID, first)
                (branch,) = await agent.list_branches(SID)
                assert branch.available
                result = await agent.undo_restore(SID, branch=branch.id)
                assert result.conversation_restored

        asyncio.run(main())
        assert before == workspace(work)


def test_a_restore_touches_the_blobs_its_branch_references(work: Path) -> None:
    """The blobs the branch references get a fresh write time from the restore (a garbage
    collection that started before the branch existed keeps them: see eventlog._gc)."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            start = time.time()
            result = agent.restore(SID, first)
            assert result.branch is not None
            refs = referenced_blobs(cp, result.branch)
            assert refs
            written = {b.ref: b.written for b in cp.blobs.list_blobs()}
            assert all(written[r] >= start for r in refs)


@pytest.mark.parametrize("user_removes_the_folder", [False, True])
def test_a_file_that_became_a_folder_is_restored_and_undone(
    work: Path, user_removes_the_folder: bool
) -> None:
    """The user's file ``d``; the agent deletes it and writes ``d/x.txt`` (so ``d`` is now a
    folder), then deletes that too. A restore to the first checkpoint deletes ``d/x.txt``
    first, removes the folder it empties (or finds it gone) and puts the file ``d`` back; the
    preview agrees; the undo gives the folder back. Restores in the other direction (to when
    ``d/x.txt`` existed) work the same way."""
    (work / "d").write_text("the user's d\n")
    script = [
        call("delete_file", path="d"),
        reply("p1 done"),
        call("write_file", path="d/x.txt", content="x"),
        reply("p2 done"),
        call("delete_file", path="d/x.txt"),
        reply("p3 done"),
    ]
    with memory_checkpointer() as cp, agent_on(work, cp, script) as agent:
        for prompt in ("p1", "p2", "p3"):
            agent.send(prompt)
        if user_removes_the_folder:
            (work / "d").rmdir()
        after = workspace(work)
        p1, p2, p3 = (c.seq for c in agent.list_checkpoints())
        preview = agent.restore(SID, p1, dry_run=True)
        assert () == preview.refused
        agent.restore(SID, p1)
        assert "the user's d\n" == (work / "d").read_text()
        agent.undo_restore(SID)
        assert after == workspace(work)
        agent.restore(SID, p3)  # back to when d/x.txt was there
        assert "x" == (work / "d" / "x.txt").read_text()
        agent.restore(SID, p1)  # from a folder holding d/x.txt to the file d
        assert "the user's d\n" == (work / "d").read_text()
        agent.undo_restore(SID)
        assert "x" == (work / "d" / "x.txt").read_text()
        del p2
