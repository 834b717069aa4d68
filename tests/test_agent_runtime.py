"""The agent under real conditions: the real Anthropic client over HTTP, real OS processes
(restart, SIGKILL, a second writer), asyncio with many sessions, live subscriptions."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import CancelToken, memory_checkpointer, sqlite_checkpointer
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, TextBlock, UserPrompt
from liteagent.providers import AnthropicProvider, scripted
from liteagent.providers._contract import ModelRequest, TextDelta
from liteagent.providers.testing import (
    FakeMessagesServer,
    message,
    stalled_stream,
    text,
    tool_use,
)
from liteagent.sdk import (
    LiveEvent,
    Missed,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import write_file


def reply(value: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(value),), stop_reason="end_turn")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty workspace."""
    path = tmp_path / "work"
    path.mkdir()
    return path


# -- with the real client -------------------------------------------------------------------------


def test_turn_with_the_real_client_and_fake_server(workdir: Path) -> None:
    """A tool-using turn over real HTTP + SSE: the tool runs, the follow-up request carries the
    tool result, and live deltas reach a subscriber."""
    with FakeMessagesServer() as server:
        server.add(
            message(
                [
                    text("Writing."),
                    tool_use(
                        "toolu_1", "write_file", {"path": "hello.py", "content": "print(1)\n"}
                    ),
                ]
            ),
            message([text("Done: hello.py")]),
        )
        provider = AnthropicProvider(server.client(), ())
        with (
            provider,
            create_lite_agent(
                model=provider,
                model_name="claude-test",
                workdir=workdir,
                checkpointer=memory_checkpointer(),
                tools=[write_file],
            ) as agent,
            agent.subscribe() as sub,
        ):
            result = agent.send("write hello.py")
            events = []
            while (item := sub.get(0)) is not None:
                events.append(item)
        second = server.requests[1].body["messages"]
    assert "Done: hello.py" == result.text
    assert "print(1)\n" == (workdir / "hello.py").read_text()
    sent_result = second[-1]["content"][0]
    assert ("tool_result", "toolu_1") == (sent_result["type"], sent_result["tool_use_id"])
    assert "hello.py" in sent_result["content"]
    kinds = [type(e.event) for e in events if isinstance(e, LiveEvent)]
    assert TextDelta in kinds
    assert [ToolCallStarted, ToolCallFinished, TurnFinished] == [
        k for k in kinds if k in (ToolCallStarted, ToolCallFinished, TurnFinished)
    ]


def test_cancel_mid_stream(workdir: Path) -> None:
    """Cancelling while the model streams returns within a second, records the abort, and the
    session continues."""
    cp = memory_checkpointer()
    with FakeMessagesServer() as server:
        server.add(stalled_stream(seconds=30, after=4), message([text("again")]))
        provider = AnthropicProvider(server.client(), ())
        with (
            provider,
            create_lite_agent(
                model=provider, model_name="m", workdir=workdir, checkpointer=cp
            ) as agent,
        ):
            cancel = CancelToken()
            timer = threading.Timer(0.3, cancel.cancel)
            timer.start()
            start = time.monotonic()
            with pytest.raises(OperationCancelledError):
                agent.send("hello", cancel=cancel)
            assert time.monotonic() - start < 10  # a hang guard: the stall lasts 30 s
            assert "turn_aborted" == [e.kind for e in cp.read(agent.session_id)][-1]
            assert "again" == agent.send("retry").text


# -- real processes -------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    from liteagent.eventlog import sqlite_checkpointer
    from liteagent.eventlog.types import AssistantMessage, TextBlock
    from liteagent.providers import scripted
    from liteagent.sdk import create_lite_agent
    db, work, session, mode = sys.argv[1:5]
    answer = AssistantMessage(content=(TextBlock("child answer"),), stop_reason="end_turn")
    agent = create_lite_agent(model=scripted([answer]), model_name="m", workdir=work,
                              checkpointer=sqlite_checkpointer(db))
    agent.resume(session)
    agent.send("from the child")
    print("sent", flush=True)
    if mode == "hang":
        time.sleep(60)
    agent.close()
    """
)


def _child(db: Path, work: Path, session: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db), str(work), session, mode],
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.processes
def test_restart_after_exit_and_after_sigkill(workdir: Path, tmp_path: Path) -> None:
    """A process that ran a turn exits, another is SIGKILLed after its turn; a new agent resumes
    and its next request carries the whole prior conversation."""
    db = tmp_path / "log.db"
    for mode in ("exit", "hang"):
        proc = _child(db, workdir, "shared", mode)
        assert proc.stdout is not None
        assert "sent" == proc.stdout.readline().strip()
        if mode == "hang":
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    provider = scripted([reply("parent answer")])
    with (
        sqlite_checkpointer(db) as cp,
        create_lite_agent(
            model=provider, model_name="m", workdir=workdir, checkpointer=cp
        ) as agent,
    ):
        agent.resume("shared")
        agent.send("from the parent")
    texts = [
        " ".join(getattr(b, "text", "") for b in m.content) for m in provider.requests[0].messages
    ]
    assert [
        "from the child",
        "child answer",
        "from the child",
        "child answer",
        "from the parent",
    ] == texts


@pytest.mark.processes
def test_a_turn_after_another_process_turn_continues_from_it(workdir: Path, tmp_path: Path) -> None:
    """With the SQLite backend, a process that ran a turn on the session in between (under the
    session's lease): this agent's next turn folds it first, and its request carries it."""
    db = tmp_path / "log.db"
    provider = scripted([reply("one"), reply("three")])
    with (
        sqlite_checkpointer(db) as cp,
        create_lite_agent(
            model=provider,
            model_name="m",
            workdir=workdir,
            checkpointer=cp,
        ) as agent,
    ):
        agent.resume("s")
        agent.send("first")
        proc = _child(db, workdir, "s", "exit")
        assert proc.stdout is not None
        assert "sent" == proc.stdout.readline().strip()
        proc.wait(30)
        proc.stdout.close()
        agent.send("second")
        events = list(cp.read("s"))
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]
    assert ["first", "from the child", "second"] == [
        e.body.text for e in events if isinstance(e.body, UserPrompt)
    ]
    texts = [
        " ".join(getattr(b, "text", "") for b in m.content) for m in provider.requests[1].messages
    ]
    assert ["first", "one", "from the child", "child answer", "second"] == texts


# -- asyncio --------------------------------------------------------------------------------------


def test_fifty_sessions_from_asyncio_never_stall_the_loop(workdir: Path) -> None:
    """50 concurrent sessions through AsyncLiteAgent: every turn completes and the event loop
    never stalls more than 50 ms."""

    delays = iter([0.02 + 0.004 * i for i in range(50)])  # spread like real model latency
    lock = threading.Lock()

    def slow_reply(request: ModelRequest) -> AssistantMessage:
        with lock:
            delay = next(delays)
        time.sleep(delay)  # a model that takes a while, on the session's thread
        return reply(f"answer {len(request.messages)}")

    provider = scripted([slow_reply] * 50)

    async def main() -> tuple[float, list[str]]:
        agent = create_async_lite_agent(
            model=provider, model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
        )
        lag = 0.0
        done = asyncio.Event()

        async def heartbeat() -> None:
            nonlocal lag
            while not done.is_set():
                start = time.monotonic()
                await asyncio.sleep(0.005)
                lag = max(lag, time.monotonic() - start - 0.005)

        async with agent:
            beat = asyncio.create_task(heartbeat())
            results = await asyncio.gather(
                *(agent.send(f"hi {i}", session_id=f"s{i}") for i in range(50))
            )
            done.set()
            await beat
            sessions = await agent.list_sessions()
        assert 50 == len(sessions)
        return lag, [r.text for r in results]

    gc.collect()
    gc.freeze()  # other tests' leftovers must not turn a GC pass into the loop stall we measure
    try:
        lag, texts = asyncio.run(main())
    finally:
        gc.unfreeze()
    assert ["answer 1"] * 50 == texts
    assert lag < 0.05, f"the event loop stalled for {lag * 1000:.1f} ms"


def test_cancelling_the_awaiting_task_cancels_the_turn(workdir: Path) -> None:
    """Cancelling the asyncio task awaiting send() cancels the turn in its actor."""
    started = threading.Event()

    def blocking(request: ModelRequest) -> AssistantMessage:
        started.set()
        time.sleep(0.3)
        return reply("late")

    cp = memory_checkpointer()

    async def main() -> None:
        async with create_async_lite_agent(
            model=scripted([blocking, reply("next")]),
            model_name="m",
            workdir=workdir,
            checkpointer=cp,
        ) as agent:
            task = asyncio.create_task(agent.send("slow"))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    assert "next" == (await agent.send("again")).text
                    break
                except Exception:  # noqa: BLE001 -- busy until the cancelled turn unwinds
                    await asyncio.sleep(0.05)

    asyncio.run(main())
    kinds = [e.kind for e in cp.read(cp.list()[0].id)]
    assert "turn_aborted" in kinds


# -- subscriptions --------------------------------------------------------------------------------


def test_slow_subscriber_is_told_what_it_missed(workdir: Path) -> None:
    """A subscriber with a tiny buffer never blocks the session and learns how many events it
    missed."""
    provider = scripted([reply("x" * 50)], stream_chunk=1)
    items: list[Any] = []
    with (
        create_lite_agent(
            model=provider, model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
        ) as agent,
        agent.subscribe(maxsize=5) as sub,
    ):
        agent.send("go")
        while (item := sub.get(0)) is not None:
            items.append(item)
    missed = sum(i.count for i in items if isinstance(i, Missed))
    delivered = sum(isinstance(i, LiveEvent) for i in items)
    assert 51 == missed + delivered  # 50 one-character deltas and the turn's end
    assert missed > 0
    assert 5 == delivered
