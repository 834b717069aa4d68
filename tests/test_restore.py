"""Time travel: checkpoints, safe restore of conversation and files, refusals, rollback."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from liteagent.actors import _restore_files
from liteagent.actors._restore_plan import FilePlan
from liteagent.eventlog import CancelToken, memory_checkpointer
from liteagent.eventlog.types import (
    AssistantMessage,
    RestoreStarted,
    TextBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    AgentBusyError,
    CheckpointRestore,
    InterruptedRestoreError,
    InvalidCheckpointError,
    LiteAgent,
    LiveEvent,
    RestoreFailedError,
    RestoreRefusedError,
    create_lite_agent,
)


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


_IDS = iter(range(10**9))


def call(tool: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", tool, input),), stop_reason="tool_use"
    )


def write(path: str, content: str) -> list[AssistantMessage]:
    """A turn that writes one file."""
    return [call("write_file", path=path, content=content), reply(f"wrote {path}")]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workspace with one file the user already had."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "keep.txt").write_text("user's own file\n")
    return path


def _agent(workdir: Path, script: list[Any], cp: Any = None) -> LiteAgent:
    return create_lite_agent(
        model=scripted(script),
        model_name="m",
        workdir=workdir,
        checkpointer=cp or memory_checkpointer(),
    )


def _three_prompts(workdir: Path, cp: Any = None) -> LiteAgent:
    """p1 creates a.txt; p2 edits it and creates b.txt; p3 deletes a.txt."""
    agent = _agent(
        workdir,
        [
            *write("a.txt", "v1"),
            call("write_file", path="a.txt", content="v2"),
            call("write_file", path="sub/b.txt", content="b"),
            reply("p2 done"),
            call("delete_file", path="a.txt"),
            reply("p3 done"),
        ],
        cp,
    )
    agent.send("p1")
    agent.send("p2")
    agent.send("p3")
    return agent


def test_checkpoints_are_user_prompts_with_their_files(workdir: Path) -> None:
    """One checkpoint per user prompt, oldest first, with the files a restore puts back."""
    with _three_prompts(workdir) as agent:
        cps = agent.list_checkpoints()
    assert ["p1", "p2", "p3"] == [c.prompt for c in cps]
    assert [("a.txt", "sub/b.txt"), ("a.txt", "sub/b.txt"), ("a.txt",)] == [c.files for c in cps]
    assert all(c.unavailable_files == () for c in cps)
    assert cps[0].seq < cps[1].seq < cps[2].seq


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, {"keep.txt": "user's own file\n"}),
        (1, {"keep.txt": "user's own file\n", "a.txt": "v1"}),
        (2, {"keep.txt": "user's own file\n", "a.txt": "v2", "sub/b.txt": "b"}),
    ],
)
def test_restore_puts_the_workspace_back(
    workdir: Path, index: int, expected: dict[str, str]
) -> None:
    """Restoring to a checkpoint gives exactly the workspace as it was before that prompt, and
    a log whose head is seq - 1."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        target = agent.list_checkpoints()[index]
        result = agent.restore(agent.session_id, target.seq)
        assert target.seq - 1 == cp.head(agent.session_id)
    files = {str(p.relative_to(workdir)): p.read_text() for p in workdir.rglob("*") if p.is_file()}
    assert expected == files
    assert result.conversation_restored


def test_conversation_only(workdir: Path) -> None:
    """files=False truncates the log and leaves the workspace alone."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        seq = agent.list_checkpoints()[1].seq
        result = agent.restore(agent.session_id, seq, files=False)
        assert seq - 1 == cp.head(agent.session_id)
    assert () == result.restored_files
    assert not (workdir / "a.txt").exists()  # p3's delete stays


def test_files_only_keeps_the_log(workdir: Path) -> None:
    """conversation=False puts files back and keeps the conversation (recording the restore)."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        head = cp.head(agent.session_id)
        seq = agent.list_checkpoints()[1].seq
        agent.restore(agent.session_id, seq, conversation=False)
        kinds = [e.kind for e in cp.read(agent.session_id)]
        assert head + 2 == cp.head(agent.session_id)
        assert ["restore_started", "restore_finished"] == kinds[-2:]
        assert agent.pending_restore() is None
    assert "v1" == (workdir / "a.txt").read_text()


def test_the_session_continues_after_a_restore(workdir: Path) -> None:
    """After a restore the next send sees only the conversation before the checkpoint."""
    script = [*write("a.txt", "v1"), *write("a.txt", "v2"), reply("fresh")]
    provider = scripted(script)
    with create_lite_agent(
        model=provider, model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
    ) as agent:
        agent.send("first")
        agent.send("second")
        agent.restore(agent.session_id, agent.list_checkpoints()[1].seq)
        agent.send("instead")
    texts = [
        " ".join(getattr(b, "text", "") for b in m.content) for m in provider.requests[-1].messages
    ]
    assert "instead" in texts[-1]
    assert not any("second" in t for t in texts)


# -- refusals -------------------------------------------------------------------------------------


def test_not_a_checkpoint(workdir: Path) -> None:
    """A seq that is not a user prompt is refused with InvalidCheckpointError."""
    with _three_prompts(workdir) as agent, pytest.raises(InvalidCheckpointError):
        agent.restore(agent.session_id, 3)


def test_refuses_a_file_changed_by_someone_else(workdir: Path) -> None:
    """A file the user changed after the agent is named in the refusal; nothing changes."""
    with _three_prompts(workdir) as agent:
        (workdir / "sub" / "b.txt").write_text("the user's edit")
        with pytest.raises(RestoreRefusedError) as info:
            agent.restore(agent.session_id, agent.list_checkpoints()[0].seq)
    assert ["sub/b.txt"] == [p for p, _ in info.value.problems]
    assert "the user's edit" == (workdir / "sub" / "b.txt").read_text()
    assert not (workdir / "a.txt").exists()


def test_refuses_a_file_recreated_after_the_agent_deleted_it(workdir: Path) -> None:
    """A file the agent deleted and someone recreated blocks the restore."""
    with _three_prompts(workdir) as agent:
        (workdir / "a.txt").write_text("recreated")
        with pytest.raises(RestoreRefusedError):
            agent.restore(agent.session_id, agent.list_checkpoints()[2].seq)
    assert "recreated" == (workdir / "a.txt").read_text()


def test_refuses_a_symlink_swapped_in(workdir: Path, tmp_path: Path) -> None:
    """A folder replaced by a symlink since the agent wrote there is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with _three_prompts(workdir) as agent:
        (outside / "b.txt").write_text("b")
        (workdir / "sub" / "b.txt").unlink()
        (workdir / "sub").rmdir()
        (workdir / "sub").symlink_to(outside)
        with pytest.raises(RestoreRefusedError) as info:
            agent.restore(agent.session_id, agent.list_checkpoints()[1].seq)
    assert "symlink" in dict(info.value.problems)["sub/b.txt"]
    assert "b" == (outside / "b.txt").read_text()


def test_truncated_snapshot_blocks_files_but_not_conversation(workdir: Path) -> None:
    """A file over the snapshot cap is unavailable: a file restore is refused (saying that
    files=False restores the conversation), a conversation restore works."""
    big = "x" * (8 * 1024 * 1024 + 1)
    (workdir / "big.txt").write_text(big)
    with _agent(workdir, write("big.txt", "small")) as agent:
        agent.send("shrink it")
        (cp1,) = agent.list_checkpoints()
        assert ("big.txt",) == cp1.unavailable_files
        with pytest.raises(RestoreRefusedError) as info:
            agent.restore(agent.session_id, cp1.seq)
        assert "files=False" in str(info.value)
        agent.restore(agent.session_id, cp1.seq, files=False)


def test_refuses_while_a_turn_runs(workdir: Path) -> None:
    """A restore while the session runs a background task raises AgentBusyError."""
    with _agent(
        workdir, [call("bash", command="sleep 2", run_in_background=True), reply("started")]
    ) as agent:
        agent.send("start something")
        with pytest.raises(AgentBusyError):
            agent.restore(agent.session_id, agent.list_checkpoints()[0].seq)
        deadline = time.monotonic() + 10
        while agent.background_tasks() and time.monotonic() < deadline:
            time.sleep(0.05)


# -- failures -------------------------------------------------------------------------------------


def test_a_failed_write_puts_everything_back(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If writing one file fails, the files already restored go back and the log is kept (the
    restore is recorded as rolled back)."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        before = {p.name: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
        real = _restore_files.put_file

        def failing(root: Path, rel: str, content: bytes | None, mode: int | None = None) -> None:
            if rel == "sub/b.txt" and content is None:
                raise OSError(28, "No space left on device")
            real(root, rel, content, mode)

        monkeypatch.setattr(_restore_files, "put_file", failing)
        head = cp.head(agent.session_id)
        with pytest.raises(RestoreFailedError):
            agent.restore(agent.session_id, agent.list_checkpoints()[0].seq)
        after = {p.name: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
        assert before == after
        kinds = [e.kind for e in cp.read(agent.session_id)]
        assert "restore_started" not in kinds
        assert head == cp.head(agent.session_id)  # the log is as it was before the restore
        assert agent.pending_restore() is None


def _plan(path: str) -> FilePlan:
    """A file to put back to absent, as a restore plans it."""
    return FilePlan(path=path, target=None, target_hash=None, last_hash=None)


def test_interrupted_restore_is_reported_and_can_be_finished(workdir: Path) -> None:
    """An intent left at the end of the log (a crash mid-restore) is reported by the next agent
    on the session, blocks send, and can be finished."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        sid = agent.session_id
        seq = agent.list_checkpoints()[0].seq
    plans = _restore_files.backup_files(workdir, [_plan("a.txt"), _plan("sub/b.txt")], cp.blobs)
    cp.append(sid, [RestoreStarted(to_seq=seq, conversation=True, files=tuple(plans))])
    (workdir / "sub" / "b.txt").unlink()  # the crash came after one of the two files
    with _agent(workdir, [reply("unused")], cp) as agent:
        agent.resume(sid)
        assert agent.pending_restore() is not None
        with pytest.raises(InterruptedRestoreError):
            agent.send("hello")
        result = agent.finish_restore()
        assert seq - 1 == cp.head(sid)
        assert agent.pending_restore() is None
    assert ("a.txt", "sub/b.txt") == result.restored_files
    assert not (workdir / "sub" / "b.txt").exists()


def test_interrupted_restore_can_be_rolled_back(workdir: Path) -> None:
    """rollback_restore returns every file to its backup and records the outcome."""
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        seq = agent.list_checkpoints()[0].seq
        plans = _restore_files.backup_files(workdir, [_plan("sub/b.txt")], cp.blobs)
        cp.append(
            agent.session_id, [RestoreStarted(to_seq=seq, conversation=True, files=tuple(plans))]
        )
        (workdir / "sub" / "b.txt").unlink()
        assert ["sub/b.txt"] == agent.rollback_restore()
        assert agent.pending_restore() is None
    assert "b" == (workdir / "sub" / "b.txt").read_text()


def _interrupted(workdir: Path, cp: Any) -> tuple[str, int]:
    """A session whose restore to its first checkpoint was interrupted before it changed a
    file (its intent is the last record): its id and the checkpoint."""
    with _three_prompts(workdir, cp) as agent:
        sid, seq = agent.session_id, agent.list_checkpoints()[0].seq
    plans = _restore_files.backup_files(workdir, [_plan("sub/b.txt")], cp.blobs)
    cp.append(sid, [RestoreStarted(to_seq=seq, conversation=True, files=tuple(plans))])
    return sid, seq


@pytest.mark.parametrize("settle", ["finish_restore", "rollback_restore"])
def test_settling_an_interrupted_restore_never_overwrites_a_later_edit(
    workdir: Path, settle: str
) -> None:
    """A file the user changed after the interruption (it holds neither what the restore puts
    there nor what it found) is refused by name, and nothing changes; once the user moves it
    away, the same call settles the restore."""
    cp = memory_checkpointer()
    sid, _ = _interrupted(workdir, cp)
    (workdir / "sub" / "b.txt").write_text("the user's later edit")
    head = cp.head(sid)
    with _agent(workdir, [reply("unused")], cp) as agent:
        with pytest.raises(RestoreRefusedError, match=r"sub/b\.txt: it was changed after"):
            getattr(agent, settle)(sid)
        assert "the user's later edit" == (workdir / "sub" / "b.txt").read_text()
        assert (head, True) == (cp.head(sid), agent.pending_restore(sid) is not None)
        (workdir / "sub" / "b.txt").rename(workdir / "moved.txt")
        getattr(agent, settle)(sid)
        assert agent.pending_restore(sid) is None
    assert (settle == "rollback_restore") == (workdir / "sub" / "b.txt").exists()


@pytest.mark.parametrize("settle", ["finish_restore", "rollback_restore"])
def test_settling_an_interrupted_restore_never_follows_a_swapped_in_symlink(
    workdir: Path, tmp_path: Path, settle: str
) -> None:
    """A folder on a file's path replaced by a symlink to a folder outside the workspace:
    refused by name, and nothing outside is written or deleted."""
    cp = memory_checkpointer()
    sid, _ = _interrupted(workdir, cp)
    outside = tmp_path / "outside"
    (workdir / "sub").rename(outside)
    (workdir / "sub").symlink_to(outside, target_is_directory=True)
    with (
        _agent(workdir, [reply("unused")], cp) as agent,
        pytest.raises(RestoreRefusedError, match="a symlink was swapped in"),
    ):
        getattr(agent, settle)(sid)
    assert "b" == (outside / "b.txt").read_text()


def test_cancel_before_any_change(workdir: Path) -> None:
    """A cancelled token stops the restore before anything changes."""
    cancel = CancelToken()
    cancel.cancel()
    cp = memory_checkpointer()
    with _three_prompts(workdir, cp) as agent:
        head = cp.head(agent.session_id)
        with pytest.raises(Exception, match="cancel"):
            agent.restore(agent.session_id, agent.list_checkpoints()[0].seq, cancel=cancel)
        assert head == cp.head(agent.session_id)


def test_progress_events(workdir: Path) -> None:
    """A restore publishes checkpoint_restore start, progress and done."""
    with _three_prompts(workdir) as agent, agent.subscribe() as sub:
        agent.restore(agent.session_id, agent.list_checkpoints()[0].seq)
        phases = []
        while (item := sub.get(0)) is not None:
            if isinstance(item, LiveEvent) and isinstance(item.event, CheckpointRestore):
                phases.append((item.event.phase, item.event.completed, item.event.total))
    assert [("start", 0, 2), ("progress", 1, 2), ("progress", 2, 2), ("done", 2, 2)] == phases


def test_prompts_of_other_origins_are_not_checkpoints(workdir: Path) -> None:
    """Reminders, repairs and background notices are not checkpoints."""
    cp = memory_checkpointer()
    with _agent(workdir, [reply("a")], cp) as agent:
        agent.send("real")
        for origin in ("reminder", "repair", "background"):
            cp.append(agent.session_id, [UserPrompt(content=(TextBlock(origin),), origin=origin)])
        assert ["real"] == [c.prompt for c in agent.list_checkpoints()]
