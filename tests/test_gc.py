"""Garbage collection through the agent: deleting a session reclaims its blobs, branches are
kept or pruned, arguments are checked, a damaged session stops it, a store without the hooks
says so, and the asyncio shell cancels it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _restore_tools import TOOLS

from liteagent.eventlog import (
    BlobStore,
    CancelToken,
    Checkpointer,
    collect_garbage,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog._gc import referenced_blobs
from liteagent.eventlog.errors import BlobCollectionUnsupportedError, CorruptLogError
from liteagent.eventlog.types import (
    AssistantMessage,
    RestoreStarted,
    TextBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    InvalidArgumentError,
    LiteAgent,
    OperationCancelledError,
    create_async_lite_agent,
    create_lite_agent,
)

_IDS = iter(range(10**9))


def call(name: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def agent_on(work: Path, cp: Checkpointer, script: list[Any] | None = None) -> LiteAgent:
    """An agent with the file tools."""
    return create_lite_agent(
        model=scripted(script or []), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
    )


def edit_twice(work: Path, cp: Checkpointer, sid: str) -> int:
    """Session ``sid`` overwrites ``<sid>.txt`` in two prompts; returns the first checkpoint."""
    (work / f"{sid}.txt").write_text(f"{sid} as the user wrote it\n")
    script = [
        call("write_file", path=f"{sid}.txt", content=f"{sid} one\n"),
        reply("one"),
        call("write_file", path=f"{sid}.txt", content=f"{sid} two\n"),
        reply("two"),
    ]
    with agent_on(work, cp, script) as agent:
        agent.send("one", session_id=sid)
        agent.send("two", session_id=sid)
        return agent.list_checkpoints(sid)[0].seq


def test_deleting_a_session_reclaims_its_blobs(tmp_path: Path) -> None:
    """After a restore, the session's blobs are referenced by it and its branch; deleting the
    session deletes the branch too, and the next collection reclaims exactly the blobs only
    they referenced, keeping the other session's."""
    work = tmp_path / "work"
    work.mkdir()
    with file_checkpointer(tmp_path / "store") as cp:
        first = edit_twice(work, cp, "gone")
        edit_twice(work, cp, "kept")
        with agent_on(work, cp) as agent:
            agent.restore("gone", first)
            before = agent.collect_garbage(grace=0)
            assert (0, 0) == (before.deleted, before.young)
            kept = referenced_blobs(cp, "kept")
            gone = {b.ref for b in cp.blobs.list_blobs()} - kept
            assert gone
            agent.delete_session("gone")
            report = agent.collect_garbage(grace=0)
            assert (len(gone), ()) == (report.deleted, report.branches_deleted)
            assert kept == {b.ref for b in cp.blobs.list_blobs()}


def test_branch_retention(tmp_path: Path) -> None:
    """Without a retention branches stay; with one they go once older, and an undo then has
    nothing to bring back."""
    work = tmp_path / "work"
    work.mkdir()
    with memory_checkpointer() as cp:
        first = edit_twice(work, cp, "s")
        with agent_on(work, cp) as agent:
            agent.restore("s", first)
            assert () == agent.collect_garbage(grace=0).branches_deleted
            (branch,) = agent.list_branches("s")
            pruned = agent.collect_garbage(grace=0, branch_retention=0)
            assert (branch.id,) == pruned.branches_deleted
            assert [] == agent.list_branches("s")


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_session_restored_to_empty_keeps_its_branch(tmp_path: Path, backend: str) -> None:
    """A session whose first prompt is its first event (written with the Checkpointer API)
    and is restored to it holds no event, yet it exists: its branch is not pruned as a deleted
    session's, and the undo brings the prompt back."""
    work = tmp_path / "work"
    work.mkdir()
    cp = (
        file_checkpointer(tmp_path / "store")
        if backend == "file"
        else sqlite_checkpointer(tmp_path / "s.db")
    )
    with cp:
        cp.append("s", [UserPrompt(content=(TextBlock("hello"),))])
        cp.append("s", [reply("hi")], expected_head=1)
        with agent_on(work, cp) as agent:
            agent.restore("s", 1)
            assert 0 == cp.head("s")
            assert () == agent.collect_garbage(grace=0).branches_deleted
            assert [True] == [b.available for b in agent.list_branches("s")]
            agent.undo_restore("s")
            assert 2 == cp.head("s")


def test_retention_keeps_the_branch_an_interrupted_undo_brings_back(tmp_path: Path) -> None:
    """An undo interrupted half way still needs the branch it brings back: a collection with
    any retention keeps it, so that a rollback of the undo can be undone again."""
    work = tmp_path / "work"
    work.mkdir()
    with memory_checkpointer() as cp:
        first = edit_twice(work, cp, "s")
        with agent_on(work, cp) as agent:
            agent.restore("s", first)
            (branch,) = agent.list_branches("s")
            head = cp.head("s")  # an undo's intent, as if its process died right after it
            intent = RestoreStarted(
                to_seq=head + 1, conversation=True, undo_of=branch.id, rollback_to=head
            )
            cp.append("s", [intent], expected_head=head)
            assert () == agent.collect_garbage(grace=0, branch_retention=0).branches_deleted
            agent.rollback_restore("s")
            assert [branch.id] == [b.id for b in agent.list_branches("s")]
            agent.undo_restore("s")
            assert "s two\n" == (work / "s.txt").read_text()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"grace": -1},
        {"grace": True},
        {"grace": float("nan")},
        {"grace": "1h"},
        {"branch_retention": -5},
        {"grace": 10**400},
        {"branch_retention": 10**5000},
        {"dry_run": 1},
        {"cancel": "no"},
    ],
)
def test_arguments_are_checked(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """Bad arguments are refused before anything is read or deleted."""
    with memory_checkpointer() as cp, agent_on(tmp_path, cp) as agent:
        stray = cp.blobs.put(b"stray")
        with pytest.raises(InvalidArgumentError):
            agent.collect_garbage(**kwargs)
        with pytest.raises(InvalidArgumentError):
            collect_garbage(cp, **kwargs)
        assert cp.blobs.has(stray)


def test_a_damaged_session_stops_the_collection(tmp_path: Path) -> None:
    """A session whose log cannot be read: nothing is deleted (its references are unknown)."""
    with file_checkpointer(tmp_path / "store") as cp:
        cp.append("s", [reply("a")])
        stray = cp.blobs.put(b"stray")
    log = tmp_path / "store" / "s.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF
    log.write_bytes(bytes(data))
    with file_checkpointer(tmp_path / "store") as cp:
        with pytest.raises(CorruptLogError):
            collect_garbage(cp, grace=0)
        assert cp.blobs.has(stray)


@pytest.mark.parametrize("keep", [1, 8, 31])
def test_a_log_cut_below_its_header_stops_the_collection(tmp_path: Path, keep: int) -> None:
    """A log cut shorter than its header is a damaged session, listed and refused like any
    other (it used to be taken for no session at all, and its blobs collected)."""
    with file_checkpointer(tmp_path / "store") as cp:
        cp.append("s", [reply("a")])
        stray = cp.blobs.put(b"stray")
    log = tmp_path / "store" / "s.log"
    log.write_bytes(log.read_bytes()[:keep])
    with file_checkpointer(tmp_path / "store") as cp:
        assert ["s"] == [i.id for i in cp.list()]
        with pytest.raises(CorruptLogError):
            collect_garbage(cp, grace=0)
        assert cp.blobs.has(stray)


def test_rows_without_their_session_record_stop_the_collection(tmp_path: Path) -> None:
    """SQLite: events whose sessions row is lost are listed nowhere, but a repair brings them
    back; the blobs they reference must survive a collection, which refuses until then."""
    import apsw

    file = str(tmp_path / "s.db")
    with sqlite_checkpointer(file) as cp:
        ref = cp.blobs.put(b"referenced only by the orphaned rows")
        cp.append("s", [reply(f"see {ref}")])
    conn = apsw.Connection(file)
    conn.execute("DELETE FROM sessions WHERE id = 's'")
    conn.close()
    with sqlite_checkpointer(file) as cp:
        assert [] == cp.list()
        with pytest.raises(CorruptLogError, match="garbage collection refused"):
            collect_garbage(cp, grace=0)
        assert cp.blobs.has(ref)
        assert cp.repair("s").repaired
        assert 0 == collect_garbage(cp, grace=0).deleted
        assert cp.blobs.has(ref)


class _Plain(BlobStore):
    """A third-party blob store without the collection hooks."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        from liteagent.eventlog.backend import blob_ref

        ref = blob_ref(data)
        self.data[ref] = data
        return ref

    def get(self, ref: str) -> bytes:
        return self.data[ref]

    def has(self, ref: str) -> bool:
        return ref in self.data


def test_a_store_without_the_hooks_cannot_collect() -> None:
    """list_blobs and delete_blobs raise BlobCollectionUnsupportedError by default; touch
    only reports what is missing."""
    store = _Plain()
    ref = store.put(b"x")
    assert [] == store.touch([ref])
    with pytest.raises(BlobCollectionUnsupportedError):
        list(store.list_blobs())
    with pytest.raises(BlobCollectionUnsupportedError):
        store.delete_blobs([ref], written_before=0.0)
    assert ([], 0) == (store.interrupted_deletes(), store.restore_interrupted_deletes())


def test_a_cancelled_collection_deletes_nothing(tmp_path: Path) -> None:
    """A token cancelled before the collection starts: OperationCancelledError, nothing
    deleted."""
    with memory_checkpointer() as cp, agent_on(tmp_path, cp) as agent:
        stray = cp.blobs.put(b"stray")
        token = CancelToken()
        token.cancel("not now")
        with pytest.raises(OperationCancelledError):
            agent.collect_garbage(grace=0, cancel=token)
        assert cp.blobs.has(stray)


def test_async_collect_garbage(tmp_path: Path) -> None:
    """The asyncio shell collects off the loop."""
    with memory_checkpointer() as cp:
        stray = cp.blobs.put(b"stray")

        async def main() -> int:
            agent = create_async_lite_agent(
                model=scripted([]), model_name="m", workdir=tmp_path, checkpointer=cp
            )
            async with agent:
                return (await agent.collect_garbage(grace=0)).deleted

        assert 1 == asyncio.run(main())
        assert not cp.blobs.has(stray)
