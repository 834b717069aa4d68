"""Manual compaction: agent.compact() / iter_compact() record a compaction the next requests
use, keep the log, report progress, and leave the session untouched when cancelled."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from liteagent.context import Compactor, CompactResult, PassReport, estimate_tokens
from liteagent.eventlog import CancelToken, memory_checkpointer
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, Message, TextBlock, Usage
from liteagent.providers import scripted
from liteagent.sdk import (
    AgentBusyError,
    CompactionProgress,
    LiveEvent,
    create_async_lite_agent,
    create_lite_agent,
)


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


class KeepLast(Compactor):
    """Keeps the first prompt and the last message pair; records the instructions it got."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.seen: list[str | None] = []

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        self.seen.append(instructions)
        time.sleep(self.delay)
        before = estimate_tokens(messages)
        if len(messages) <= 3:
            return CompactResult(
                messages=tuple(messages), changed=False, tokens_before=before, tokens_after=before
            )
        kept = (Message("user", (TextBlock("[summary of earlier turns]"),)), *messages[-2:])
        after = estimate_tokens(kept)
        return CompactResult(
            messages=kept,
            changed=True,
            tokens_before=before,
            tokens_after=after,
            passes=(
                PassReport(
                    name="snip",
                    changed=True,
                    tokens_before=before,
                    tokens_after=after,
                    detail="kept the last exchange",
                ),
            ),
        )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty workspace."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def _agent(workdir: Path, compactor: Compactor, provider: Any, cp: Any = None) -> Any:
    return create_lite_agent(
        model=provider,
        model_name="m",
        workdir=workdir,
        tools=[],
        checkpointer=cp or memory_checkpointer(),
        compactor=compactor,
    )


def test_compact_records_a_compaction_the_next_request_uses(workdir: Path) -> None:
    """After compact(), the log keeps every event plus a compaction record, and the next
    request carries the compacted view followed by the new prompt."""
    cp = memory_checkpointer()
    provider = scripted([reply("one"), reply("two"), reply("three")])
    compactor = KeepLast()
    with _agent(workdir, compactor, provider, cp) as agent:
        agent.send("first")
        agent.send("second")
        before = list(cp.read(agent.session_id))
        stats = agent.compact("keep the decisions")
        after = list(cp.read(agent.session_id))
        agent.send("third")
    assert stats.changed
    assert stats.after < stats.before
    assert before == after[:-1]
    assert "compaction" == after[-1].kind
    assert ["keep the decisions"] == compactor.seen
    texts = [
        " ".join(getattr(b, "text", "") for b in m.content) for m in provider.requests[-1].messages
    ]
    assert ["[summary of earlier turns] second", "two", "third"] == texts


def test_the_default_compactor_shortens_a_long_task(workdir: Path) -> None:
    """Without a compactor given, compact() drops the middle steps of one long task (real
    file reads), keeps the last steps verbatim, and the next request is smaller."""
    from liteagent.eventlog.types import ToolUseBlock
    from liteagent.tools import read_file

    for k in range(8):
        (workdir / f"f{k}.txt").write_text(f"line {k}\n" * 400)
    steps = [
        AssistantMessage(
            content=(ToolUseBlock(f"t{k}", "read_file", {"path": f"f{k}.txt"}),),
            stop_reason="tool_use",
        )
        for k in range(8)
    ]
    provider = scripted([*steps, reply("read them all"), reply("ok")])
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=workdir,
        tools=[read_file],
        checkpointer=memory_checkpointer(),
    ) as agent:
        agent.send("read every file")
        stats = agent.compact()
        agent.send("and now?")
    assert stats.changed
    assert stats.after < stats.before
    sent = provider.requests[-1].messages
    assert estimate_tokens(sent) < estimate_tokens(provider.requests[-2].messages)
    assert "read every file" == sent[0].content[0].text  # type: ignore[union-attr]
    assert provider.requests[-2].messages[-6:] == sent[-8:-2]  # the last steps, verbatim
    assert 3 == sum(
        1 for m in sent for b in m.content if getattr(b, "content", "").startswith("     1\tline")
    )


def test_nothing_to_reduce_records_nothing(workdir: Path) -> None:
    """A compactor that finds nothing to reduce leaves the log as it was."""
    cp = memory_checkpointer()
    with _agent(workdir, KeepLast(), scripted([reply("one")]), cp) as agent:
        agent.send("only")
        head = cp.head(agent.session_id)
        stats = agent.compact()
        assert head == cp.head(agent.session_id)
    assert not stats.changed
    assert stats.before == stats.after


def test_progress_events(workdir: Path) -> None:
    """compact() publishes start, a progress event per pass, persist, and done."""
    with _agent(workdir, KeepLast(), scripted([reply("a"), reply("b")])) as agent:
        agent.send("x")
        agent.send("y")
        with agent.subscribe() as sub:
            agent.compact()
            events = []
            while (item := sub.get(0)) is not None:
                if isinstance(item, LiveEvent) and isinstance(item.event, CompactionProgress):
                    events.append((item.event.phase, item.event.stage))
    assert [
        ("start", "measure"),
        ("progress", "normalize"),
        ("progress", "persist"),
        ("done", "persist"),
    ] == events


def test_iter_compact_yields_the_same_events(workdir: Path) -> None:
    """iter_compact() yields the progress events and exposes the stats at the end."""
    with _agent(workdir, KeepLast(), scripted([reply("a"), reply("b")])) as agent:
        agent.send("x")
        agent.send("y")
        it = agent.iter_compact()
        phases = [e.phase for e in it]
    assert ["start", "progress", "progress", "done"] == phases
    assert it.stats is not None
    assert it.stats.changed


def test_cancel_leaves_the_session_as_it_was(workdir: Path) -> None:
    """Cancelling a compaction returns at once (not when the compactor ends), appends nothing
    and reports 'cancelled'."""
    cp = memory_checkpointer()
    with _agent(workdir, KeepLast(delay=2.0), scripted([reply("a"), reply("b")]), cp) as agent:
        agent.send("x")
        agent.send("y")
        head = cp.head(agent.session_id)
        cancel = CancelToken()
        threading.Timer(0.1, cancel.cancel).start()
        with agent.subscribe() as sub:
            started = time.monotonic()
            with pytest.raises(OperationCancelledError):
                agent.compact(cancel=cancel)
            assert time.monotonic() - started < 1.5
            phases = []
            while (item := sub.get(0)) is not None:
                if isinstance(item, LiveEvent) and isinstance(item.event, CompactionProgress):
                    phases.append(item.event.phase)
        assert head == cp.head(agent.session_id)
    assert "cancelled" == phases[-1]


def test_compaction_needs_an_idle_session(workdir: Path) -> None:
    """compact() while a background task runs raises AgentBusyError."""
    from liteagent.eventlog.types import ToolUseBlock
    from liteagent.tools import bash

    provider = scripted(
        [
            AssistantMessage(
                content=(
                    ToolUseBlock("t1", "bash", {"command": "sleep 1", "run_in_background": True}),
                ),
                stop_reason="tool_use",
            ),
            reply("started"),
        ]
    )
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=workdir,
        tools=[bash],
        checkpointer=memory_checkpointer(),
        compactor=KeepLast(),
    ) as agent:
        agent.send("go")
        with pytest.raises(AgentBusyError):
            agent.compact()
        deadline = time.monotonic() + 10
        while agent.background_tasks() and time.monotonic() < deadline:
            time.sleep(0.05)


def test_compaction_survives_a_restart(workdir: Path) -> None:
    """A new agent on the same log projects the compacted view."""
    cp = memory_checkpointer()
    with _agent(workdir, KeepLast(), scripted([reply("a"), reply("b")]), cp) as agent:
        agent.send("x")
        agent.send("y")
        agent.compact()
        sid = agent.session_id
    provider = scripted([reply("c")])
    with _agent(workdir, KeepLast(), provider, cp) as agent:
        agent.resume(sid)
        agent.send("z")
    assert 3 == len(provider.requests[0].messages)


def test_async_compact(workdir: Path) -> None:
    """AsyncLiteAgent.compact and iter_compact work as coroutines."""

    async def main() -> list[str]:
        async with create_async_lite_agent(
            model=scripted([reply("a"), reply("b")]),
            model_name="m",
            workdir=workdir,
            tools=[],
            checkpointer=memory_checkpointer(),
            compactor=KeepLast(),
        ) as agent:
            await agent.send("x")
            await agent.send("y")
            return [e.phase async for e in agent.iter_compact()]

    assert ["start", "progress", "progress", "done"] == asyncio.run(main())
