"""The agent kernel end to end: turns with tools and snapshots, sessions across restarts,
conflicts, busy sessions, errors and cancellation, background tasks, passivation."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from liteagent.context import view_hash
from liteagent.eventlog import CancelToken, memory_checkpointer, sqlite_checkpointer
from liteagent.eventlog.errors import CheckpointConflictError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    FileSnapshot,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    TurnAborted,
    UserPrompt,
)
from liteagent.providers import ContextOverflowError, scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import (
    AgentBusyError,
    LiteAgent,
    SessionsDisabledError,
    create_agent,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import bash, default_tools, write_file


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(tool: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{tool}_{len(input)}_{time.monotonic_ns()}", tool, input),),
        stop_reason="tool_use",
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty workspace."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def _agent(workdir: Path, provider: Any, **kw: Any) -> LiteAgent:
    kw.setdefault("checkpointer", memory_checkpointer())
    return create_lite_agent(model=provider, model_name="m", workdir=workdir, **kw)


def _kinds(agent: LiteAgent, cp: Any) -> list[str]:
    return [e.kind for e in cp.read(agent.session_id)]


# -- a turn -------------------------------------------------------------------------------------


def test_turn_runs_tools_and_records_snapshots(workdir: Path) -> None:
    """A tool call writes the file, and the log holds the snapshot in the result's append."""
    cp = memory_checkpointer()
    provider = scripted([call("write_file", path="a.txt", content="hi"), reply("done")])
    with _agent(workdir, provider, checkpointer=cp) as agent:
        result = agent.send("make a.txt")
        events = list(cp.read(agent.session_id))
    assert "done" == result.text
    assert "end_turn" == result.stop_reason
    assert "hi" == (workdir / "a.txt").read_text()
    assert [
        "session_started",
        "user_prompt",
        "context_status",
        "model_request",
        "assistant_message",
        "file_snapshot",
        "tool_result",
        "context_status",
        "model_request",
        "assistant_message",
    ] == [e.kind for e in events]
    snap = events[5].body
    assert isinstance(snap, FileSnapshot)
    assert ("a.txt", None, None, hashlib.sha256(b"hi").hexdigest()) == (
        snap.path,
        snap.pre_image,
        snap.pre_hash,
        snap.post_hash,
    )
    assert events[5].ts == events[6].ts  # one append
    provider.assert_all_used()


def test_snapshot_keeps_the_pre_image(workdir: Path) -> None:
    """Overwriting a file stores its old content in the blob store."""
    (workdir / "a.txt").write_text("old")
    cp = memory_checkpointer()
    provider = scripted([call("write_file", path="a.txt", content="new"), reply("ok")])
    with _agent(workdir, provider, checkpointer=cp) as agent:
        agent.send("change it")
        (snap,) = [e.body for e in cp.read(agent.session_id) if e.kind == "file_snapshot"]
    assert isinstance(snap, FileSnapshot)
    assert snap.pre_image is not None
    assert b"old" == cp.blobs.get(snap.pre_image)


def test_result_carries_new_messages_and_usage(workdir: Path) -> None:
    """The result holds this send's messages (prompt, calls, results, answer) and its usage."""
    provider = scripted([call("write_file", path="b.txt", content="x"), reply("fine")])
    with _agent(workdir, provider) as agent:
        result = agent.send("go")
    assert ["user", "assistant", "user", "assistant"] == [m.role for m in result.messages]
    assert agent.session_id == result.session_id


def test_the_model_sees_the_whole_conversation(workdir: Path) -> None:
    """The second send's request carries the first exchange."""
    provider = scripted([reply("one"), reply("two")])
    with _agent(workdir, provider) as agent:
        agent.send("first")
        agent.send("second")
    texts = [[getattr(b, "text", "") for b in m.content] for m in provider.requests[1].messages]
    assert [["first"], ["one"], ["second"]] == texts


def test_unknown_tool_is_an_error_result(workdir: Path) -> None:
    """A call to a tool that does not exist becomes an is_error result the model reads."""
    cp = memory_checkpointer()
    provider = scripted([call("nope"), reply("sorry")])
    with _agent(workdir, provider, checkpointer=cp) as agent:
        agent.send("x")
        (result,) = [e.body for e in cp.read(agent.session_id) if e.kind == "tool_result"]
    assert isinstance(result, ToolResult)
    assert result.block.is_error is True


def test_max_turns_stops_the_loop(workdir: Path) -> None:
    """A model that keeps calling tools is stopped after max_turns calls."""
    provider = scripted([call("write_file", path=f"{i}.txt", content="x") for i in range(3)])
    with _agent(workdir, provider, max_turns=3) as agent:
        result = agent.send("loop")
    assert "max_turns" == result.stop_reason


# -- sessions -----------------------------------------------------------------------------------


def test_restart_resumes_with_the_full_conversation(workdir: Path, tmp_path: Path) -> None:
    """A new agent on the same home resumes the session; its next request has the history."""
    home = tmp_path / "home"
    with _agent(workdir, scripted([reply("hello")]), checkpointer=None, home=home) as agent:
        agent.send("hi")
        sid = agent.session_id
    provider = scripted([reply("again")])
    with _agent(workdir, provider, checkpointer=None, home=home) as agent:
        agent.resume(sid)
        agent.send("more")
        assert [sid] == [s.id for s in agent.list_sessions()]
    assert ["user", "assistant", "user"] == [m.role for m in provider.requests[0].messages]


def test_clear_starts_a_new_session_and_keeps_the_old(workdir: Path) -> None:
    """clear() gives a new empty session; the old one stays listed."""
    with _agent(workdir, scripted([reply("a"), reply("b")])) as agent:
        agent.send("one")
        old = agent.session_id
        new = agent.clear()
        agent.send("two")
        ids = {s.id for s in agent.list_sessions()}
    assert new != old
    assert {old, new} == ids


def test_delete_session(workdir: Path) -> None:
    """delete_session removes the log; the current session moves to a new id."""
    cp = memory_checkpointer()
    with _agent(workdir, scripted([reply("a")]), checkpointer=cp) as agent:
        agent.send("one")
        old = agent.session_id
        agent.delete_session(old)
        assert [] == agent.list_sessions()
        assert old != agent.session_id


def test_sessions_disabled(workdir: Path) -> None:
    """With sessions=False, send works in memory and the session methods refuse."""
    with create_lite_agent(
        model=scripted([reply("a")]), model_name="m", workdir=workdir, sessions=False
    ) as agent:
        assert "a" == agent.send("x").text
        for method in (
            agent.list_sessions,
            lambda: agent.resume("s1"),
            lambda: agent.delete_session("s1"),
        ):
            with pytest.raises(SessionsDisabledError):
                method()


def test_a_turn_continues_after_another_agents_turn(workdir: Path, tmp_path: Path) -> None:
    """Two agents on one store take turns on a session: each turn holds the session's lease and
    first folds what the other appended, so nothing conflicts and nothing is lost."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp_a, sqlite_checkpointer(db) as cp_b:
        a = _agent(workdir, scripted([reply("a1"), reply("a2")]), checkpointer=cp_a)
        b = _agent(workdir, scripted([reply("b1")]), checkpointer=cp_b)
        with a, b:
            a.send("from a")
            b.resume(a.session_id)
            b.send("from b")
            a.send("again a")
            events = list(cp_a.read(a.session_id))
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]
    prompts = [e.body.text for e in events if isinstance(e.body, UserPrompt)]
    assert ["from a", "from b", "again a"] == prompts


def test_a_writer_without_the_lease_gives_a_conflict_then_recovers(
    workdir: Path, tmp_path: Path
) -> None:
    """A writer that appends during a turn without the session's lease makes the turn's next
    append conflict (nothing overwritten); the next send folds again and continues."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp, sqlite_checkpointer(db) as other:
        sid = "s1"

        def intruding(request: ModelRequest) -> AssistantMessage:
            other.append(sid, [UserPrompt(content=(TextBlock("intruder"),))])
            return AssistantMessage(content=(TextBlock("late"),), stop_reason="end_turn")

        agent = _agent(workdir, scripted([reply("a1"), intruding, reply("a3")]), checkpointer=cp)
        with agent:
            agent.resume(sid)
            agent.send("first")
            with pytest.raises(CheckpointConflictError):
                agent.send("stale")
            agent.send("fresh")
            events = list(cp.read(sid))
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]
    prompts = [e.body.text for e in events if isinstance(e.body, UserPrompt)]
    assert ["first", "stale", "intruder", "fresh"] == prompts


def test_busy_session_refuses_a_second_send(workdir: Path) -> None:
    """send() on a session that is running raises AgentBusyError."""
    started, release = threading.Event(), threading.Event()

    def slow(request: ModelRequest) -> AssistantMessage:
        started.set()
        release.wait(10)
        return reply("slow")

    with _agent(workdir, scripted([slow])) as agent:
        worker = threading.Thread(target=agent.send, args=("first",))
        worker.start()
        assert started.wait(10)
        with pytest.raises(AgentBusyError):
            agent.send("second")
        release.set()
        worker.join(10)


# -- errors and cancellation --------------------------------------------------------------------


def test_provider_error_aborts_the_turn_and_the_session_continues(workdir: Path) -> None:
    """A provider error is raised, the log records the abort and closes the dangling call, and
    the next send works."""
    cp = memory_checkpointer()
    provider = scripted(
        [
            call("write_file", path="a.txt", content="x"),
            ContextOverflowError("too long", tokens=10, maximum=5),
            reply("ok"),
        ]
    )
    with _agent(workdir, provider, checkpointer=cp) as agent:
        with pytest.raises(ContextOverflowError):
            agent.send("go")
        assert "turn_aborted" == _kinds(agent, cp)[-1]
        assert "ok" == agent.send("again").text
        state_roles = [m.role for m in provider.requests[-1].messages]
    assert "user" == state_roles[-1]


def test_cancel_mid_tool(workdir: Path) -> None:
    """Cancelling while a command runs stops it, records the abort, and raises."""
    cp = memory_checkpointer()
    provider = scripted([call("bash", command="sleep 30"), reply("after")])
    cancel = CancelToken()
    with _agent(workdir, provider, checkpointer=cp, tools=[bash]) as agent:
        timer = threading.Timer(0.5, cancel.cancel)
        timer.start()
        start = time.monotonic()
        with pytest.raises(OperationCancelledError):
            agent.send("wait", cancel=cancel)
        assert time.monotonic() - start < 5
        kinds = _kinds(agent, cp)
        assert ["tool_result", "turn_aborted"] == kinds[-2:]
        assert "after" == agent.send("go on").text


def test_crash_mid_tool_is_repaired_on_next_send(workdir: Path) -> None:
    """A log ending in a tool call without a result (a killed process) gets a synthetic
    interrupted result before the next prompt, so the model sees a valid conversation."""
    cp = memory_checkpointer()
    cp.append(
        "s1",
        [
            SessionStarted(workdir=str(workdir), model="m"),
            UserPrompt(content=(TextBlock("go"),)),
            call("bash", command="sleep 1"),
        ],
    )
    provider = scripted([reply("recovered")])
    with _agent(workdir, provider, checkpointer=cp) as agent:
        agent.resume("s1")
        agent.send("continue")
    roles = [m.role for m in provider.requests[0].messages]
    assert ["user", "assistant", "user"] == roles
    blocks = provider.requests[0].messages[2].content
    assert "tool_result" == blocks[0].__struct_config__.tag
    assert any(isinstance(e.body, TurnAborted) for e in cp.read("s1"))


# -- background tasks ---------------------------------------------------------------------------


def test_background_task_completion_is_seen_next_turn(workdir: Path) -> None:
    """A background command's completion is recorded and shown to the model on the next turn,
    not as a checkpoint."""
    cp = memory_checkpointer()
    provider = scripted(
        [
            call("bash", command="echo background-done", run_in_background=True),
            reply("started"),
            reply("seen"),
        ]
    )
    with _agent(workdir, provider, checkpointer=cp, tools=[bash]) as agent:
        agent.send("run it in the background")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            isinstance(e.body, BackgroundCompleted) for e in cp.read(agent.session_id)
        ):
            time.sleep(0.05)
        assert [] == agent.background_tasks()
        agent.send("what happened?")
    seen = provider.requests[-1].messages[-1]
    text = " ".join(getattr(b, "text", "") for b in seen.content)
    assert "background-done" in text
    prompts = [e.body for e in cp.read(agent.session_id) if isinstance(e.body, UserPrompt)]
    assert ["user", "user", "background"] == sorted(
        (p.origin for p in prompts), key=lambda o: o == "background"
    )


# -- hosting ------------------------------------------------------------------------------------


def test_idle_sessions_are_passivated_and_come_back(workdir: Path) -> None:
    """With max_live_sessions=2, five sessions keep at most two actors; an early session comes
    back from its log with its whole conversation."""
    provider = scripted([reply(f"r{i}") for i in range(6)])
    with _agent(workdir, provider, max_live_sessions=2) as agent:
        ids = []
        for i in range(5):
            ids.append(agent.clear())
            agent.send(f"p{i}")
            assert len(agent._core.host.live_sessions) <= 2
        agent.resume(ids[0])
        agent.send("back")
    assert [["p0"], ["r0"], ["back"]] == [
        [getattr(b, "text", "") for b in m.content] for m in provider.requests[-1].messages
    ]


def test_create_agent_runs_middleware(workdir: Path) -> None:
    """create_agent applies before_model and wrap_model_call around each model call."""
    seen: list[str] = []

    class Tag:
        def before_model(self, request: ModelRequest, state: Any) -> ModelRequest:
            seen.append("before")
            return request

        def wrap_model_call(self, request: ModelRequest, call_next: Any) -> Any:
            seen.append("wrap")
            return call_next(request)

    with create_agent(
        model=scripted([reply("x")]), model_name="m", tools=[], use=[Tag()], workdir=workdir
    ) as agent:
        assert "x" == agent.send("hi").text
    assert ["before", "wrap"] == seen


def test_default_tools_are_offered(workdir: Path) -> None:
    """create_lite_agent offers the default tools to the model, and the context tool that
    reads archived and spilled results (the ContextEngine is on, or without it the default
    compactor spills); without the engine and with a compactor that never spills, only the
    defaults."""
    from liteagent.context import token_budget_compactor

    provider = scripted([reply("x"), reply("y"), reply("z")])
    with _agent(workdir, provider) as agent:
        agent.send("hi")
    with _agent(workdir, provider, context=False) as agent:
        agent.send("hi")
    with _agent(workdir, provider, context=False, compactor=token_budget_compactor(1000)) as agent:
        agent.send("hi")
    names = {t.name for t in default_tools()}
    assert names | {"context"} == {t.name for t in provider.requests[0].tools}
    assert names | {"context"} == {t.name for t in provider.requests[1].tools}
    assert names == {t.name for t in provider.requests[2].tools}
    assert write_file.name in {t.name for t in provider.requests[0].tools}


def test_recorded_view_hash_is_the_hash_of_what_the_model_got(workdir: Path) -> None:
    """Each model_request record holds view_hash of the exact request the provider received."""
    cp = memory_checkpointer()
    provider = scripted([call("write_file", path="a.txt", content="x"), reply("ok"), reply("2")])
    with _agent(workdir, provider, checkpointer=cp) as agent:
        agent.send("one")
        agent.send("two")
        records = [e.body for e in cp.read(agent.session_id) if e.kind == "model_request"]
    assert [view_hash(r) for r in provider.requests] == [r.view_hash for r in records]
    assert 3 == len({r.view_hash for r in records})


def test_close_cancels_a_running_turn(workdir: Path) -> None:
    """close() while a turn runs a long command cancels the turn and returns promptly."""
    provider = scripted([call("bash", command="sleep 30")])
    agent = _agent(workdir, provider, tools=[bash])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            agent.send("wait")
        except BaseException as e:  # noqa: BLE001 -- checked below
            errors.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 10
    while not agent._core.host.is_busy(agent.session_id) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    start = time.monotonic()
    agent.close()
    worker.join(10)
    assert time.monotonic() - start < 5
    assert [OperationCancelledError] == [type(e) for e in errors]


# -- async cancellation ---------------------------------------------------------------------------


def _block_the_pool(agent: Any) -> tuple[threading.Event, list[Any]]:
    """Occupy every worker of the agent's own pool until the returned event is set."""
    from liteagent.sdk._core import POOL_WORKERS

    release = threading.Event()
    started = [threading.Event() for _ in range(POOL_WORKERS)]
    jobs = [agent._core.pool.submit(lambda s=s: (s.set(), release.wait(30))) for s in started]
    for s in started:
        assert s.wait(10)
    return release, jobs


def test_cancelling_an_async_restore_cancels_its_token(workdir: Path) -> None:
    """Cancelling the task awaiting restore() cancels the restore's token, and a restore that
    had not started never runs: the log is unchanged."""
    cp = memory_checkpointer()
    agent = create_async_lite_agent(
        model=scripted([reply("a"), reply("b")]), model_name="m", workdir=workdir, checkpointer=cp
    )
    token = CancelToken()

    async def main() -> int:
        async with agent:
            await agent.send("one")
            await agent.send("two")
            sid = agent.session_id
            seq = (await agent.list_checkpoints())[-1].seq
            head = cp.head(sid)
            release, jobs = _block_the_pool(agent)
            task = asyncio.ensure_future(agent.restore(sid, seq, cancel=token))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            release.set()
            for job in jobs:
                job.result(10)
            assert 2 == len(await agent.list_checkpoints())
            return head

    head = asyncio.run(main())
    assert token.cancelled
    assert head == cp.head(agent.session_id)


@pytest.mark.processes
def test_a_forked_childs_copy_of_an_agent_refuses_work_and_closes_at_once(
    tmp_path: Path,
) -> None:
    """In a child forked from a process running an agent (its threads stayed in the parent),
    ``send`` raises AgentClosedError saying why, and ``close()`` returns at once (it waited
    for the absent threads and then raised); the parent's agent goes on."""
    import os

    from liteagent.sdk import AgentClosedError

    with create_lite_agent(
        model=scripted([reply("one"), reply("two")]),
        model_name="m",
        workdir=tmp_path,
        checkpointer=memory_checkpointer(),
    ) as agent:
        assert "one" == agent.send("first").text
        pid = os.fork()
        if pid == 0:  # pragma: no cover -- in the child
            code = 1
            try:
                agent.send("from the child")
            except AgentClosedError as e:
                code = 0 if "forked child" in str(e) else 2
            started = time.monotonic()
            agent.close()
            os._exit(code if time.monotonic() - started < 5 else 3)
        _, status = os.waitpid(pid, 0)
        assert 0 == os.waitstatus_to_exitcode(status)
        assert "two" == agent.send("second").text
