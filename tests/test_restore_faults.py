"""Restore under faults: every refusal reason, SIGKILL in the middle of a restore, a writer in
another process racing the restore, and binary files with unusual names."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _restore_tools import TOOLS, workspace
from _restore_zygote import (
    SID,
    ZYGOTE,
    Round,
    Zygote,
    digest,
    files_of,
    open_checkpointer,
    run_round,
)

from liteagent.actors import _restore_files
from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog._blobs import blob_ref
from liteagent.eventlog.errors import CheckpointConflictError
from liteagent.eventlog.types import (
    AssistantMessage,
    FileSnapshot,
    RestoreFinished,
    TextBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    AgentBusyError,
    InterruptedRestoreError,
    LiteAgent,
    RestoreRefusedError,
    create_lite_agent,
)

_IDS = iter(range(10**9))

# The tails of the refusal reasons (_restore_plan.preflight).
UNAVAILABLE = "; restore with files=False to restore the conversation alone"
FOREIGN = (
    " since the agent last wrote it (by the user, a shell command, another session, or a tool "
    "call that was interrupted)"
)


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(name: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def write(path: str, content: str) -> list[AssistantMessage]:
    """A turn that writes one text file."""
    return [call("write_file", path=path, content=content), reply(f"wrote {path}")]


def agent_on(work: Path, cp: Checkpointer, script: list[Any]) -> LiteAgent:
    """An agent on ``work`` and ``cp``, in the session SID."""
    agent = create_lite_agent(
        model=scripted(script), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
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


def two_prompts(work: Path, cp: Checkpointer) -> int:
    """p1 edits keep.txt and creates sub/b.txt; p2 creates c.txt. Returns p1's seq."""
    with agent_on(
        work,
        cp,
        [
            call("edit_file", path="keep.txt", old_string="own", new_string="edited"),
            call("write_file", path="sub/b.txt", content="b"),
            reply("p1 done"),
            *write("c.txt", "c"),
        ],
    ) as agent:
        agent.send("p1")
        agent.send("p2")
        return agent.list_checkpoints()[0].seq


def refusal(work: Path, cp: Checkpointer, seq: int) -> list[tuple[str, str]]:
    """Restore SID to ``seq`` with a fresh agent; check it is refused and nothing changed;
    return the problems."""
    files, log = workspace(work), list(cp.read(SID))
    with agent_on(work, cp, []) as agent, pytest.raises(RestoreRefusedError) as info:
        agent.restore(SID, seq)
    assert files == workspace(work)
    assert log == list(cp.read(SID))
    return info.value.problems


# -- refusals, one per reason ---------------------------------------------------------------------


def test_refuses_a_tool_call_cut_in_half(work: Path) -> None:
    """A tool_use without its result in the log (a crash mid-call) refuses a file restore."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        cp.append(
            SID,
            [
                AssistantMessage(
                    content=(
                        ToolUseBlock("toolu_cut", "write_file", {"path": "c.txt", "content": "x"}),
                    ),
                    stop_reason="tool_use",
                )
            ],
        )
        problems = refusal(work, cp, seq)
    assert [
        ("", "a tool call after the checkpoint has no result (it was cut in half): toolu_cut")
    ] == problems


def test_refuses_a_snapshot_missing_from_the_blob_store(work: Path, tmp_path: Path) -> None:
    """A pre-image whose blob is gone makes the file unavailable: listed and refused."""
    with file_checkpointer(tmp_path / "store") as cp:
        seq = two_prompts(work, cp)
        ref = blob_ref(b"the user's own file\n")
        (tmp_path / "store" / "blobs" / ref[7:9] / ref[9:]).unlink()
        with agent_on(work, cp, []) as agent:
            assert ("keep.txt",) == agent.list_checkpoints()[0].unavailable_files
        problems = refusal(work, cp, seq)
    assert [
        ("keep.txt", f"its snapshot {ref} is missing from the blob store" + UNAVAILABLE)
    ] == problems


def test_refuses_a_snapshot_over_the_size_cap(work: Path) -> None:
    """A file over the snapshot cap was recorded as truncated: a file restore is refused."""
    (work / "big.bin").write_bytes(b"\x00" * (8 * 1024 * 1024 + 1))
    with memory_checkpointer() as cp:
        with agent_on(
            work, cp, [call("write_bytes", path="big.bin", data_hex="00ff"), reply("shrunk")]
        ) as agent:
            agent.send("shrink it")
            seq = agent.list_checkpoints()[0].seq
        problems = refusal(work, cp, seq)
    assert [
        (
            "big.bin",
            "its snapshot was not kept (the file was over the snapshot size cap)" + UNAVAILABLE,
        )
    ] == problems


def test_refuses_a_truncated_snapshot_blob(work: Path, tmp_path: Path) -> None:
    """A pre-image blob cut short on disk is refused like a missing one, leaving no
    interrupted restore behind."""
    with file_checkpointer(tmp_path / "store") as cp:
        seq = two_prompts(work, cp)
        ref = blob_ref(b"the user's own file\n")
        (tmp_path / "store" / "blobs" / ref[7:9] / ref[9:]).write_bytes(b"the user")
        problems = refusal(work, cp, seq)
    assert ["keep.txt"] == [path for path, _ in problems]


def test_refuses_a_file_replaced_by_a_symlink(work: Path) -> None:
    """A symlink swapped in for a file the agent wrote is refused even with the same content."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "same.txt").write_text("b")
        (work / "sub" / "b.txt").unlink()
        (work / "sub" / "b.txt").symlink_to(work / "same.txt")
        problems = refusal(work, cp, seq)
    assert [
        ("sub/b.txt", "a symlink was swapped in on the path since the agent wrote it")
    ] == problems


def test_refuses_a_path_that_is_now_a_folder(work: Path) -> None:
    """A file the agent wrote that is now a folder is refused."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "c.txt").unlink()
        (work / "c.txt").mkdir()
        (work / "c.txt" / "inside").write_text("x")
        problems = refusal(work, cp, seq)
    assert [("c.txt", "the path is now a folder")] == problems


def test_refuses_a_folder_on_the_path_replaced_by_a_file(work: Path) -> None:
    """A folder the agent wrote into that is now a file is refused, naming the path."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "sub" / "b.txt").unlink()
        (work / "sub").rmdir()
        (work / "sub").write_text("now a file")
        problems = refusal(work, cp, seq)
    assert ["sub/b.txt"] == [path for path, _ in problems]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../escape.txt", "the path is outside the workspace"),
        ("/etc/escape.txt", "the path is not relative to the workspace"),
    ],
)
def test_refuses_a_recorded_path_outside_the_workspace(work: Path, path: str, reason: str) -> None:
    """A snapshot whose path leaves the workspace (a damaged or forged log) is refused."""
    with memory_checkpointer() as cp:
        seq = cp.append(SID, [UserPrompt(content=(TextBlock("p1"),))])
        cp.append(
            SID,
            [
                FileSnapshot(
                    path=path, tool_call_id="toolu_x", pre_image=None, pre_hash=None, post_hash=None
                )
            ],
        )
        problems = refusal(work, cp, seq)
    assert [(path, reason)] == problems


def test_refuses_a_file_changed_since_the_agent_wrote_it(work: Path) -> None:
    """A file changed after the agent's last write is refused as changed."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "keep.txt").write_text("the user again")
        problems = refusal(work, cp, seq)
    assert [("keep.txt", "it was changed" + FOREIGN)] == problems


def test_refuses_a_file_deleted_since_the_agent_wrote_it(work: Path) -> None:
    """A file deleted after the agent's last write is refused as deleted."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "c.txt").unlink()
        problems = refusal(work, cp, seq)
    assert [("c.txt", "it was deleted" + FOREIGN)] == problems


def test_refusal_lists_every_problem(work: Path) -> None:
    """Several unsafe files are all named, in path order, with the session's own problem
    first."""
    with memory_checkpointer() as cp:
        seq = two_prompts(work, cp)
        (work / "keep.txt").write_text("changed")
        (work / "c.txt").unlink()
        cp.append(
            SID,
            [
                AssistantMessage(
                    content=(ToolUseBlock("toolu_open", "bash", {}),), stop_reason="tool_use"
                )
            ],
        )
        problems = refusal(work, cp, seq)
    assert ["", "c.txt", "keep.txt"] == [path for path, _ in problems]


# -- restores that must be exact ------------------------------------------------------------------

ODD_FILES = {
    "-dash ü.bin": bytes(range(256)),
    "nested/.dot dir/日本語.dat": b"\x00\xff\xfe\r\n\x00",
    "..two dots": b"text with\r\nCRLF\n",
}


def test_binary_files_and_unusual_names_are_restored_byte_exactly(work: Path) -> None:
    """Binary content and names with spaces, unicode, dashes and dots come back byte for
    byte, at every checkpoint."""
    for path, content in ODD_FILES.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(content)
    script = [
        call("write_bytes", path="-dash ü.bin", data_hex=b"\x01\x00\x02".hex()),
        call("delete_file", path="nested/.dot dir/日本語.dat"),
        call("write_bytes", path="ünï/--new.bin", data_hex=bytes(range(255, -1, -1)).hex()),
        reply("p1"),
        call("edit_file", path="..two dots", old_string="\r\n", new_string="\n"),
        call("write_bytes", path="nested/.dot dir/日本語.dat", data_hex="00"),
        call("delete_file", path="-dash ü.bin"),
        reply("p2"),
    ]
    states = []
    with memory_checkpointer() as cp, agent_on(work, cp, script) as agent:
        for prompt in ("p1", "p2"):
            states.append(workspace(work))
            agent.send(prompt)
        seqs = [c.seq for c in agent.list_checkpoints()]
        for seq, state in reversed(list(zip(seqs, states, strict=True))):
            agent.restore(SID, seq)
            assert state == workspace(work)
            assert seq - 1 == cp.head(SID)
    assert {"keep.txt": b"the user's own file\n", **ODD_FILES} == states[0]


def test_restore_after_a_files_only_restore(work: Path) -> None:
    """After a files-only restore to p2, a restore to p1 still puts the workspace back as it
    was before p1."""
    before = workspace(work)
    with memory_checkpointer() as cp:
        two_prompts(work, cp)
        with agent_on(work, cp, []) as agent:
            first, second = agent.list_checkpoints()
            agent.restore(SID, second.seq, conversation=False)
            agent.restore(SID, first.seq)
    assert before == workspace(work)


# -- a writer in another process racing the restore -----------------------------------------------

_APPEND = textwrap.dedent(
    """
    import sys
    from liteagent.eventlog import sqlite_checkpointer
    from liteagent.eventlog.types import TextBlock, UserPrompt
    with sqlite_checkpointer(sys.argv[1]) as cp:
        cp.append(sys.argv[2], [UserPrompt(content=(TextBlock("from the other process"),))])
    """
)


@pytest.mark.processes
def test_a_writer_in_another_process_during_the_restore(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process appending between the intent and the truncate makes the restore raise
    CheckpointConflictError: every file goes back, its event stays, nothing is pending."""
    with sqlite_checkpointer(tmp_path / "log.db") as cp:
        seq = two_prompts(work, cp)
        files, log = workspace(work), list(cp.read(SID))
        real = _restore_files.put_file
        calls: list[str] = []

        def racing(root: Path, rel: str, content: bytes | None, mode: int | None = None) -> None:
            if not calls:
                subprocess.run(
                    [sys.executable, "-c", _APPEND, str(tmp_path / "log.db"), SID],
                    check=True,
                    timeout=60,
                )
            calls.append(rel)
            real(root, rel, content, mode)

        monkeypatch.setattr(_restore_files, "put_file", racing)
        with agent_on(work, cp, []) as agent:
            with pytest.raises(CheckpointConflictError):
                agent.restore(SID, seq)
            assert agent.pending_restore() is None
        events = list(cp.read(SID))
    assert files == workspace(work)
    assert log == events[: len(log)]
    assert ["restore_started", "user_prompt", "restore_finished"] == [
        e.kind for e in events[len(log) :]
    ]
    child = events[len(log) + 1].body
    assert isinstance(child, UserPrompt)
    assert "from the other process" == child.text
    finished = events[-1].body
    assert isinstance(finished, RestoreFinished)
    assert (len(log) + 1, "rolled_back") == (finished.started_seq, finished.outcome)
    assert 2 * 3 == len(calls)  # three files to their targets, then back to their backups


# -- SIGKILL in the middle of a restore -----------------------------------------------------------


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


def settle(r: Round, cp: Checkpointer, agent: LiteAgent, rng: random.Random) -> str:
    """Check the state a kill left and settle a pending restore at random; return which."""
    pending = agent.pending_restore()
    log = list(cp.read(SID))
    if pending is None and r.done_digest == digest(log):
        assert r.initial == files_of(r.work)
        return "completed"
    if pending is None:
        assert r.before_digest == digest(log)
        assert r.before == files_of(r.work)
        return "not started"
    assert (r.seq, True) == (pending.to_seq, pending.conversation)
    if rng.random() < 0.5:
        agent.finish_restore()
        assert r.done_digest == digest(list(cp.read(SID)))
        assert r.initial == files_of(r.work)
        return "finished"
    agent.rollback_restore()
    assert r.before_digest == digest(list(cp.read(SID)))  # the intent is cut away again
    assert agent.pending_restore() is None
    assert r.before == files_of(r.work)
    return "rolled back"


@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_sigkill_during_a_restore(zygote: Zygote, tmp_path: Path, backend: str) -> None:
    """After a SIGKILL at a random moment of a restore, a new agent finds it completed, never
    started, or pending - and finish_restore / rollback_restore then reach exactly the
    completed state / the state before the restore."""
    rng = random.Random(f"sigkill-{backend}")
    outcomes: list[str] = []
    durations: list[float] = []
    for n in range(23):  # two rounds to time a whole restore, then 21 random kills
        kill_after = None if n < 2 else rng.uniform(0.0, min(durations) * 1.3)
        r = run_round(zygote, tmp_path / f"round{n}", backend, rng, kill_after=kill_after)
        if n < 2:
            durations.append(float(r.said["restored"][0]))
        with open_checkpointer(backend, r.store) as cp, agent_on(r.work, cp, []) as agent:
            outcomes.append(settle(r, cp, agent, rng))
    assert ["completed", "completed"] == outcomes[:2]
    assert {"finished", "rolled back"} & set(outcomes), outcomes


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_crash_inside_a_file_write_leaves_nothing_behind(zygote: Zygote, tmp_path: Path) -> None:
    """A worker killed inside the first file write leaves a pending restore that
    finish_restore completes to exactly the workspace before the first prompt."""
    r = run_round(zygote, tmp_path, "file", random.Random(7), kill_after=None, mode="die_in_write")
    with file_checkpointer(r.store) as cp, agent_on(r.work, cp, []) as agent:
        assert agent.pending_restore() is not None
        agent.finish_restore()
    assert r.initial == workspace(r.work)


_HOLDER = textwrap.dedent(
    """
    import sys
    from liteagent.eventlog import file_checkpointer, sqlite_checkpointer
    backend, store, sid = sys.argv[1:]
    cp = (file_checkpointer if backend == "file" else sqlite_checkpointer)(store)
    lease = cp.acquire_lease(sid)
    print("held", flush=True)
    sys.stdin.read()
    lease.release()
    cp.close()
    """
)


@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_restore_running_in_another_process_is_not_called_interrupted(
    zygote: Zygote, tmp_path: Path, backend: str
) -> None:
    """While another process holds the session's lease (as a restore, or the finish of one,
    does while it runs), the intent in the log is not an interrupted restore: pending_restore()
    is None, and a preview or a fork is refused as busy, not as interrupted. Once the lease is
    free, the same intent is an interrupted restore."""
    r = run_round(zygote, tmp_path, backend, random.Random(7), kill_after=None, mode="die_in_write")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, backend, str(r.store), SID],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert "held" == holder.stdout.readline().strip()
        with open_checkpointer(backend, r.store) as cp, agent_on(r.work, cp, []) as agent:
            seq = agent.list_checkpoints(SID)[0].seq
            assert agent.pending_restore(SID) is None
            with pytest.raises(AgentBusyError, match="has a restore running"):
                agent.restore(SID, seq, dry_run=True)
            with pytest.raises(AgentBusyError, match="has a restore running"):
                agent.fork(SID, seq)
            with pytest.raises(AgentBusyError):
                agent.finish_restore(SID)
        assert holder.stdin is not None
        holder.stdin.close()
        assert 0 == holder.wait(60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    with open_checkpointer(backend, r.store) as cp, agent_on(r.work, cp, []) as agent:
        assert agent.pending_restore(SID) is not None
        with pytest.raises(InterruptedRestoreError):
            agent.fork(SID, seq)
        agent.finish_restore(SID)
    assert r.initial == workspace(r.work)


@pytest.mark.processes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_compaction_is_refused_on_an_interrupted_restore(
    zygote: Zygote, tmp_path: Path, backend: str
) -> None:
    """compact() on a session with an interrupted restore raises InterruptedRestoreError and
    appends nothing: a compaction after the intent would leave finish_restore() nothing it
    can finish (it cuts the log at the intent)."""
    r = run_round(zygote, tmp_path, backend, random.Random(9), kill_after=None, mode="die_in_write")
    with open_checkpointer(backend, r.store) as cp, agent_on(r.work, cp, []) as agent:
        head = cp.head(SID)
        with pytest.raises(InterruptedRestoreError, match="before compacting it"):
            agent.compact(session_id=SID)
        assert head == cp.head(SID)
        agent.finish_restore(SID)
    assert r.initial == workspace(r.work)
