"""A restore's preview (dry_run=True): what it would put back, refuse and take away, and the
ledger of side effects it cannot undo; each checkpoint's count of those."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from _restore_tools import TOOLS, workspace

from liteagent.eventlog import Checkpointer, memory_checkpointer
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog.types import (
    AssistantMessage,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    FileChange,
    InvalidArgumentError,
    LiteAgent,
    RestorePreview,
    SideEffect,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import ToolContext, bash, tool

SID = "preview"
_IDS = iter(range(10**9))


@tool
def notify(message: Annotated[str, msgspec.Meta(description="What to say.")]) -> str:
    """Send a message to the team (a custom tool that declares no paths)."""
    return f"sent {message!r}"


@tool(read_only=True)
def count_lines(
    path: Annotated[str, msgspec.Meta(description="The file.")], *, ctx: ToolContext
) -> str:
    """Count the lines of a file (read-only)."""
    return str(len((ctx.workdir / path).read_text().splitlines()))


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(name: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def agent_on(work: Path, cp: Checkpointer, script: list[Any] | None = None) -> LiteAgent:
    """An agent with the file tools, bash and two custom tools, in the session SID."""
    agent = create_lite_agent(
        model=scripted(script or []),
        model_name="m",
        workdir=work,
        checkpointer=cp,
        tools=[*TOOLS, bash, notify, count_lines],
    )
    agent.resume(SID)
    return agent


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A workspace with a text file and a binary file."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "notes.txt").write_text("one\ntwo\nthree\n")
    (path / "data.bin").write_bytes(b"\x00\x01\x02")
    return path


SCRIPT = [
    call("edit_file", path="notes.txt", old_string="two\n", new_string="2\n2b\n"),
    call("write_bytes", path="data.bin", data_hex="00ff"),
    call("write_file", path="new.txt", content="x\ny\n"),
    call("bash", command="echo built > out.txt"),
    call("bash", command="exit 3"),
    call("count_lines", path="notes.txt"),
    reply("p1"),
    call("notify", message="done"),
    call("delete_file", path="notes.txt"),
    reply("p2"),
]


def two_prompts(work: Path, cp: Checkpointer) -> list[int]:
    """p1 edits, overwrites, creates, runs two commands and a read-only tool; p2 notifies and
    deletes. Returns the checkpoints."""
    with agent_on(work, cp, SCRIPT) as agent:
        agent.send("p1")
        agent.send("p2")
        return [c.seq for c in agent.list_checkpoints()]


def test_preview_lists_changes_and_side_effects_and_changes_nothing(work: Path) -> None:
    """The preview of a restore to p1: each file with its action, sizes and line counts
    (binary: sizes only), the events it would remove, and the two commands and the custom tool
    (not the file tools, nor the read-only tool) with times and statuses; nothing changes and
    no branch is made."""
    with memory_checkpointer() as cp:
        first, second = two_prompts(work, cp)
        files, log = workspace(work), list(cp.read(SID))
        with agent_on(work, cp) as agent:
            preview = agent.restore(SID, first, dry_run=True)
            assert isinstance(preview, RestorePreview)
            assert files == workspace(work)
            assert log == list(cp.read(SID))
            assert not any(is_branch_session(s.id) for s in cp.list())
            counts = [c.side_effects for c in agent.list_checkpoints()]
    assert [3, 1] == counts
    assert (SID, first, len(log) - first + 1, ()) == (
        preview.session_id,
        preview.seq,
        preview.events_removed,
        preview.refused,
    )
    assert not preview.would_refuse
    assert (
        FileChange(path="data.bin", action="overwrite", size_now=2, size_after=3, binary=True),
        FileChange(
            path="new.txt",
            action="delete",
            size_now=4,
            size_after=None,
            added_lines=0,
            removed_lines=2,
        ),
        FileChange(
            path="notes.txt",
            action="create",
            size_now=None,
            size_after=14,
            added_lines=3,
            removed_lines=0,
        ),
    ) == preview.changes
    effects = preview.side_effects
    assert [
        ("bash", "echo built > out.txt", "exit code 0", 0, False),
        ("bash", "exit 3", "exit code 3", 3, True),
        ("notify", '{"message": "done"}', "ok", None, False),
    ] == [(e.tool, e.summary, e.status, e.exit_code, e.is_error) for e in effects]
    results = {e.seq: e.ts for e in log if isinstance(e.body, ToolResult)}
    assert [results[e.seq] for e in effects] == [e.ts for e in effects]
    assert all(e.seq > first for e in effects)
    assert [e for e in effects if e.seq > second] == list(effects[2:])


def test_preview_of_a_refused_restore_names_the_files(work: Path) -> None:
    """A file changed since the agent wrote it is in ``refused``, with the restore's reason,
    and has no line counts."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        (work / "new.txt").write_text("the user's")
        with agent_on(work, cp) as agent:
            preview = agent.restore(SID, first, dry_run=True)
    assert preview.would_refuse
    assert ["new.txt"] == [path for path, _ in preview.refused]
    (change,) = [c for c in preview.changes if c.path == "new.txt"]
    assert (None, None) == (change.added_lines, change.removed_lines)


def test_preview_of_a_conversation_only_restore(work: Path) -> None:
    """files=False: no file changes; the side effects are listed all the same."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent:
            preview = agent.restore(SID, first, files=False, dry_run=True)
    assert ((), 3) == (preview.changes, len(preview.side_effects))


def test_the_ledger_goes_by_the_recorded_flag_not_the_tool_name(work: Path) -> None:
    """Only results recorded with ``untracked=True`` are side effects, whatever the tool's name:
    a result without the flag (false by default) is not one, even of bash."""
    with memory_checkpointer() as cp:
        cp.append(SID, [UserPrompt(content=(TextBlock("go"),))])
        for name, untracked in (("bash", False), ("write_file", True), ("mytool", False)):
            block = ToolResultBlock(f"t_{name}", "ok")
            cp.append(SID, [ToolResult(block=block, tool_name=name, untracked=untracked)])
        cp.append(SID, [ToolResult(block=ToolResultBlock("t_unflagged", "ok"), tool_name="bash")])
        with agent_on(work, cp) as agent:
            (checkpoint,) = agent.list_checkpoints()
            preview = agent.restore(SID, checkpoint.seq, dry_run=True)
    assert (1, [("write_file", "t_write_file")]) == (
        checkpoint.side_effects,
        [(e.tool, e.tool_call_id) for e in preview.side_effects],
    )


def test_dry_run_is_checked(work: Path) -> None:
    """dry_run must be a bool."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)
        with agent_on(work, cp) as agent, pytest.raises(InvalidArgumentError):
            agent.restore(SID, first, dry_run="yes")  # type: ignore[call-overload]


def test_async_preview(work: Path) -> None:
    """The asyncio shell previews off the loop."""
    with memory_checkpointer() as cp:
        first, _ = two_prompts(work, cp)

        async def main() -> RestorePreview:
            agent = create_async_lite_agent(
                model=scripted([]), model_name="m", workdir=work, checkpointer=cp
            )
            async with agent:
                return await agent.restore(SID, first, dry_run=True)

        preview = asyncio.run(main())
    assert all(isinstance(e, SideEffect) for e in preview.side_effects)
    assert 3 == len(preview.side_effects)
