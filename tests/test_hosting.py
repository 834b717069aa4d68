"""Hosting many sessions in one process: nothing is lost between the host and its actors, live
actors are bounded, sends beyond the bound wait in FIFO order (bounded, cancellable), idle
sessions are passivated without new traffic, and the load is readable."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pykka
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.actors._envelope import ActorBase, ActorMessage, Envelope, ask, start_actor, tell
from liteagent.actors._gate import GATE, CpuGate
from liteagent.actors._host_slots import Request
from liteagent.actors._pool import ThreadPool
from liteagent.actors._reply import Reply
from liteagent.actors._turn import LiteAgentResult
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import (
    ActorStoppedError,
    ActorTimeoutError,
    AgentBusyError,
    AsyncLiteAgent,
    HostSaturatedError,
    HostStats,
    LiteAgent,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import bash, tool, write_file

WAIT = 60.0  # a bound on waiting for a condition (never asserted as a timing)


def _prompt_text(request: ModelRequest) -> str | None:
    """The prompt the request ends with, or None when it ends with tool results."""
    last = request.messages[-1]
    if any(isinstance(b, ToolResultBlock) for b in last.content):
        return None
    return " ".join(b.text for b in last.content if isinstance(b, TextBlock))


class ToolThenReply:
    """A scripted model: a prompt gets one write_file call, its result gets "ok". ``sleep``
    seconds per call (time.sleep releases the GIL, as an HTTP call would); a prompt listed in
    ``hold`` waits for ``release``; every prompt is recorded in call order."""

    def __init__(self, sleep: float = 0.0, hold: frozenset[str] = frozenset()) -> None:
        self.sleep = sleep
        self.hold = hold
        self.release = threading.Event()
        self.prompts: list[str] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        if self.sleep:
            time.sleep(self.sleep)
        prompt = _prompt_text(request)
        if prompt is None:
            return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
        with self._lock:
            self.prompts.append(prompt)
            n = next(self._ids)
        if prompt in self.hold:
            self.release.wait(WAIT)
        call = ToolUseBlock(f"toolu_{n}", "write_file", {"path": f"f{n}.txt", "content": "x"})
        return AssistantMessage(content=(call,), stop_reason="tool_use")

    def provider(self, calls: int) -> Any:
        """A scripted provider answering ``calls`` calls with this model."""
        return scripted([self] * calls)


def _agent(workdir: Path, model: ToolThenReply, calls: int, **kw: Any) -> LiteAgent:
    kw.setdefault("checkpointer", memory_checkpointer())
    return create_lite_agent(
        model=model.provider(calls), model_name="m", workdir=workdir, tools=[write_file], **kw
    )


def _async_agent(workdir: Path, model: ToolThenReply, calls: int, **kw: Any) -> AsyncLiteAgent:
    kw.setdefault("checkpointer", memory_checkpointer())
    return create_async_lite_agent(
        model=model.provider(calls), model_name="m", workdir=workdir, tools=[write_file], **kw
    )


def _until(condition: Callable[[], bool], wait: float = WAIT) -> bool:
    """Poll ``condition`` until it holds (True) or ``wait`` seconds pass (False)."""
    deadline = time.monotonic() + wait
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


async def _until_async(condition: Callable[[], bool]) -> bool:
    """:func:`_until` on an event loop."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def _prompts(cp: Checkpointer, session_id: str) -> list[str]:
    return [e.body.content[0].text for e in cp.read(session_id) if isinstance(e.body, UserPrompt)]


async def _run_sessions(agent: AsyncLiteAgent, sessions: int, turns: int) -> list[Any]:
    """``sessions`` concurrent sessions of ``turns`` sends each; every outcome (a result or an
    exception), or the task itself when it had not finished within WAIT."""

    async def session(i: int) -> list[Any]:
        return [await agent.send(f"turn {t}", session_id=f"s{i}") for t in range(turns)]

    tasks = [asyncio.ensure_future(session(i)) for i in range(sessions)]
    await asyncio.wait(tasks, timeout=WAIT * 3)
    outcomes: list[Any] = []
    for task in tasks:
        if not task.done():
            task.cancel()
            outcomes.append(task)
        elif task.exception() is not None:
            outcomes.append(task.exception())
        else:
            outcomes.extend(task.result())
    return outcomes


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty workspace."""
    path = tmp_path / "work"
    path.mkdir()
    return path


# -- nothing is lost between host and actor -------------------------------------------------------


@pytest.mark.parametrize(("sessions", "cap"), [(40, 4), (300, 256)])
def test_eviction_race_every_send_completes(workdir: Path, sessions: int, cap: int) -> None:
    """Many concurrent sessions over few slots, 3 turns each: every send completes, and each
    log holds its three prompts."""
    model = ToolThenReply(sleep=0.002)
    cp = memory_checkpointer()
    agent = _async_agent(workdir, model, sessions * 3 * 2, checkpointer=cp, max_live_sessions=cap)

    async def main() -> list[Any]:
        async with agent:
            return await _run_sessions(agent, sessions, 3)

    outcomes = asyncio.run(main())
    assert [] == [o for o in outcomes if not hasattr(o, "text")]
    assert sessions * 3 == len(outcomes)
    assert [["turn 0", "turn 1", "turn 2"]] * sessions == [
        _prompts(cp, f"s{i}") for i in range(sessions)
    ]


class Hold(ActorMessage, tag="hold", frozen=True):
    """Block until the test's event is set."""


class _Blocking(ActorBase):
    decoder = msgspec.msgpack.Decoder(Hold)

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def handle(self, message: Any, envelope: Envelope) -> Any:
        self.gate.wait(WAIT)
        return "held"


def test_a_message_queued_behind_a_stop_fails_instead_of_vanishing() -> None:
    """A message that reaches an actor after its stop fails with ActorStoppedError (pykka drops
    such a tell silently)."""
    gate = threading.Event()
    ref = _Blocking.start(gate)
    first = tell(ref, Hold())
    ref.stop(block=False)
    late = tell(ref, Hold())
    gate.set()
    assert "held" == first.reply.result(WAIT)
    with pytest.raises(ActorStoppedError):
        late.reply.result(WAIT)


class _NoThread(_Blocking):
    """An actor whose thread cannot start, as when the process has no threads left."""

    def _start_actor_loop(self) -> None:
        raise RuntimeError("can't start new thread")


def test_an_actor_whose_thread_cannot_start_is_not_left_registered() -> None:
    """start_actor raises the thread error and leaves no half-started actor in pykka's registry
    (whose stop_all would wait on it forever)."""
    with pytest.raises(RuntimeError):
        start_actor(_NoThread, threading.Event(), on_stopped=lambda: None)
    assert [] == pykka.ActorRegistry.get_by_class(_NoThread)


def test_an_ask_without_reply_raises_a_library_timeout() -> None:
    """An ask that gets no reply in time raises ActorTimeoutError, a LiteAgentError and a
    TimeoutError."""
    gate = threading.Event()
    ref = _Blocking.start(gate)
    try:
        with pytest.raises(ActorTimeoutError) as caught:
            ask(ref, Hold(), timeout=0.05)
    finally:
        gate.set()
        ref.stop()
    assert isinstance(caught.value, LiteAgentError)
    assert isinstance(caught.value, TimeoutError)


# -- the queue ------------------------------------------------------------------------------------


def _send_in_thread(
    agent: LiteAgent, text: str, sid: str, cancel: CancelToken | None = None
) -> concurrent.futures.Future[Any]:
    """``agent.send`` in a thread; its outcome in the returned future."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(agent.send(text, session_id=sid, cancel=cancel))
        except BaseException as e:  # noqa: BLE001 -- handed to the test
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future


@pytest.fixture
def held_agent(workdir: Path) -> Iterator[tuple[LiteAgent, ToolThenReply, Checkpointer]]:
    """An agent with one slot and two queue places whose slot is taken by session "a", its turn
    held in the model until the model's ``release`` is set."""
    model = ToolThenReply(hold=frozenset({"A"}))
    cp = memory_checkpointer()
    agent = _agent(workdir, model, 40, checkpointer=cp, max_live_sessions=1, max_queued_sends=2)
    first = _send_in_thread(agent, "A", "a")
    assert _until(lambda: model.prompts == ["A"])
    try:
        yield agent, model, cp
    finally:
        model.release.set()
        first.exception(WAIT)
        agent.close()


def test_waiting_sends_run_in_fifo_order(held_agent: Any) -> None:
    """With every slot running, sends wait and run in the order they arrived."""
    agent, model, _ = held_agent
    waiting = []
    for n, text in enumerate(["B", "C"], start=1):
        waiting.append(_send_in_thread(agent, text, text.lower()))
        assert _until(lambda n=n: n == agent.host_stats().queued)
    model.release.set()
    assert ["ok", "ok"] == [f.result(WAIT).text for f in waiting]
    assert ["A", "B", "C"] == model.prompts


def test_host_stats_show_live_running_and_queued(held_agent: Any) -> None:
    """host_stats counts the live, running and queued sessions, with the bounds."""
    agent, _, _ = held_agent
    waiting = _send_in_thread(agent, "B", "b")
    assert _until(lambda: 1 == agent.host_stats().queued)
    stats = agent.host_stats()
    held_agent[1].release.set()
    waiting.result(WAIT)
    assert (
        HostStats(
            live=1,
            running=1,
            queued=1,
            stopping=0,
            background_tasks=0,
            max_live_sessions=1,
            max_queued_sends=2,
            max_background_tasks=64,
            operations=0,
            queued_operations=0,
            max_operations=8,
        )
        == stats
    )


def test_a_returned_send_is_no_longer_counted_as_running(workdir: Path) -> None:
    """When send returns, host_stats no longer counts its turn as running (the host frees the
    session before it answers): one session after another, read at once, never polled."""
    model = ToolThenReply()
    with _agent(workdir, model, 200 * 2, max_live_sessions=4) as agent:
        for i in range(200):
            agent.send("go", session_id=f"s{i % 7}")
            stats = agent.host_stats()
            assert (0, 0) == (stats.running, stats.queued), (i, stats)


def test_after_many_concurrent_sends_nothing_is_counted_running(workdir: Path) -> None:
    """Async: once every one of many concurrent sends (more sessions than slots) has returned,
    host_stats shows nothing running or queued, read at once, in each of several rounds."""
    model = ToolThenReply()

    async def rounds() -> None:
        async with _async_agent(workdir, model, 10 * 40 * 2, max_live_sessions=4) as agent:
            for r in range(10):
                await asyncio.gather(*(agent.send("go", session_id=f"s{i}") for i in range(40)))
                stats = agent.host_stats()
                assert (0, 0) == (stats.running, stats.queued), (r, stats)

    asyncio.run(rounds())


def test_beyond_max_queued_sends_a_send_is_refused_at_once(held_agent: Any) -> None:
    """With the queue full, a send raises HostSaturatedError at once and records nothing."""
    agent, _, cp = held_agent
    waiting = [_send_in_thread(agent, t, t.lower()) for t in ("B", "C")]
    assert _until(lambda: 2 == agent.host_stats().queued)
    with pytest.raises(HostSaturatedError):
        agent.send("D", session_id="d")
    held_agent[1].release.set()
    for f in waiting:
        f.result(WAIT)
    assert 0 == cp.head("d")


def test_a_second_send_on_a_waiting_session_is_busy(held_agent: Any) -> None:
    """A send on a session whose send waits in the queue raises AgentBusyError (not queued)."""
    agent, _, _ = held_agent
    waiting = _send_in_thread(agent, "B", "b")
    assert _until(lambda: 1 == agent.host_stats().queued)
    with pytest.raises(AgentBusyError):
        agent.send("again", session_id="b")
    assert 1 == agent.host_stats().queued
    held_agent[1].release.set()
    waiting.result(WAIT)


def test_a_second_send_on_a_running_session_is_busy_not_queued(held_agent: Any) -> None:
    """A send on the running session raises AgentBusyError at once; the queue stays empty."""
    agent, _, _ = held_agent
    with pytest.raises(AgentBusyError):
        agent.send("again", session_id="a")
    assert 0 == agent.host_stats().queued


def test_cancel_token_takes_a_waiting_send_out_of_the_queue(held_agent: Any) -> None:
    """Cancelling a waiting send's token: it raises OperationCancelledError, leaves the queue
    and records nothing."""
    agent, _, cp = held_agent
    token = CancelToken()
    waiting = _send_in_thread(agent, "B", "b", token)
    assert _until(lambda: 1 == agent.host_stats().queued)
    token.cancel("changed my mind")
    with pytest.raises(OperationCancelledError):
        waiting.result(WAIT)
    assert 0 == agent.host_stats().queued
    assert 0 == cp.head("b")


@pytest.mark.parametrize("operation", ["compact", "iter_compact"])
def test_cancel_token_takes_a_waiting_compaction_out_of_the_queue(
    held_agent: Any, operation: str
) -> None:
    """A compaction of a session without an actor waits for a slot like a send; cancelling its
    token takes it out of the queue at once (not when the running turn gives its slot back),
    and it changes nothing."""
    agent, model, cp = held_agent
    token = CancelToken()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            if operation == "compact":
                future.set_result(agent.compact(session_id="a2", cancel=token))
            else:
                future.set_result(list(agent.iter_compact(session_id="a2", cancel=token)))
        except BaseException as e:  # noqa: BLE001 -- handed to the test
            future.set_exception(e)

    cp.append("a2", [UserPrompt(content=(TextBlock("hello"),))], expected_head=0)
    threading.Thread(target=run, daemon=True).start()
    assert _until(lambda: 1 == agent.host_stats().queued)
    token.cancel("changed my mind")
    with pytest.raises(OperationCancelledError):
        future.result(WAIT)
    assert (0, 1, []) == (agent.host_stats().queued, agent.host_stats().running, model.prompts[1:])
    model.release.set()
    assert 1 == cp.head("a2")


def test_task_cancel_takes_a_waiting_async_send_out_of_the_queue(workdir: Path) -> None:
    """Cancelling the task awaiting a waiting send: it leaves the queue, records nothing, and
    the running send is unaffected."""
    model = ToolThenReply(hold=frozenset({"A"}))
    cp = memory_checkpointer()
    agent = _async_agent(workdir, model, 10, checkpointer=cp, max_live_sessions=1)

    async def main() -> tuple[int, str]:
        async with agent:
            first = asyncio.ensure_future(agent.send("A", session_id="a"))
            assert await _until_async(lambda: model.prompts == ["A"])
            waiting = asyncio.ensure_future(agent.send("B", session_id="b"))
            assert await _until_async(lambda: 1 == agent.host_stats().queued)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            queued = agent.host_stats().queued
            model.release.set()
            return queued, (await first).text

    assert (0, "ok") == asyncio.run(main())
    assert 0 == cp.head("b")
    assert ["A"] == model.prompts


def test_close_fails_waiting_sends(held_agent: Any) -> None:
    """close() while a send waits: the waiting send fails with ActorStoppedError at once (the
    running turn still holds its slot), instead of hanging."""
    agent, model, cp = held_agent
    waiting = _send_in_thread(agent, "B", "b")
    assert _until(lambda: 1 == agent.host_stats().queued)
    closing = threading.Thread(target=agent.close)
    closing.start()
    try:
        with pytest.raises(ActorStoppedError):
            waiting.result(WAIT)
    finally:
        model.release.set()
        closing.join(WAIT)
    assert 0 == cp.head("b")


# -- passivation ----------------------------------------------------------------------------------


class BackgroundThenReply:
    """A scripted model: the prompt "bg" starts a background command that runs until the file
    ``go`` exists in the workspace; any other prompt, and every tool result, gets "ok"."""

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        if _prompt_text(request) != "bg":
            return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
        command = "while [ ! -e go ]; do sleep 0.02; done"
        call = ToolUseBlock("toolu_bg", "bash", {"command": command, "run_in_background": True})
        return AssistantMessage(content=(call,), stop_reason="tool_use")


def _background_agent(workdir: Path, **kw: Any) -> LiteAgent:
    """An agent with one slot whose session "a" runs a background command until ``go``."""
    agent = create_lite_agent(
        model=scripted([BackgroundThenReply()] * 10),
        model_name="m",
        workdir=workdir,
        tools=[bash],
        checkpointer=memory_checkpointer(),
        max_live_sessions=1,
        idle_timeout_s=None,
        **kw,
    )
    agent.send("bg", session_id="a")
    assert 1 == len(agent.background_tasks())
    return agent


def test_a_send_waiting_behind_a_background_task_runs_when_the_task_ends(workdir: Path) -> None:
    """A slot kept by a session's background task is given to a waiting send as soon as the task
    has ended (the host is told; it does not wait for its own clock)."""
    agent = _background_agent(workdir)
    try:
        waiting = _send_in_thread(agent, "B", "b")
        assert _until(lambda: 1 == agent.host_stats().queued)
        stats = agent.host_stats()
        (workdir / "go").touch()
        # the dispatcher's own clock would serve the queue only after a minute
        result = waiting.result(WAIT / 3)
    finally:
        (workdir / "go").touch()
        agent.close()
    assert (1, 0, 1) == (stats.live, stats.running, stats.queued)
    assert "ok" == result.text


def test_saturation_by_background_tasks_names_them(workdir: Path) -> None:
    """HostSaturatedError says what holds the slots: here a background task, not a turn."""
    agent = _background_agent(workdir, max_queued_sends=0)
    try:
        with pytest.raises(HostSaturatedError) as caught:
            agent.send("B", session_id="b")
    finally:
        (workdir / "go").touch()
        agent.close()
    assert "0 running a turn, 1 with background tasks" in str(caught.value)


def test_close_leaves_no_background_task_thread(workdir: Path) -> None:
    """close() cancels a running background task and returns only once its thread has ended
    (no thread of the agent outlives it)."""
    agent = _background_agent(workdir)
    (task,) = agent.background_tasks()
    agent.close()
    left = [t.name for t in threading.enumerate() if t.name == f"liteagent-{task.task_id}"]
    assert [] == left


def _bash_results(cp: Checkpointer, session_id: str) -> list[tuple[str, bool]]:
    """The text and error flag of every tool result of the session, in log order."""
    return [
        (str(e.body.block.content), e.body.block.is_error is True)
        for e in cp.read(session_id)
        if isinstance(e.body, ToolResult)
    ]


def _bounded_background_agent(workdir: Path, cp: Checkpointer, bound: int) -> LiteAgent:
    return create_lite_agent(
        model=scripted([BackgroundThenReply()] * 200),
        model_name="m",
        workdir=workdir,
        tools=[bash],
        checkpointer=cp,
        max_live_sessions=8,
        idle_timeout_s=None,
        max_background_tasks=bound,
    )


def test_background_tasks_beyond_the_agent_bound_are_refused_to_the_model(workdir: Path) -> None:
    """max_background_tasks bounds the task threads of the whole agent: while session a's task
    runs, session b asking for one more gets an error result naming the bound (its turn goes on,
    nothing raises); once a's task has ended, c gets its place."""
    cp = memory_checkpointer()
    agent = _bounded_background_agent(workdir, cp, 1)
    try:
        agent.send("bg", session_id="a")
        refused = agent.send("bg", session_id="b")
        stats = agent.host_stats()
        (workdir / "go").touch()
        assert _until(lambda: 0 == agent.host_stats().background_tasks)
        agent.send("bg", session_id="c")
        assert _until(lambda: [] == agent.background_tasks())
    finally:
        (workdir / "go").touch()
        agent.close()
    assert "ok" == refused.text
    assert (1, 1) == (stats.background_tasks, stats.max_background_tasks)
    ((text, is_error),) = _bash_results(cp, "b")
    assert is_error
    assert "too many background tasks" in text
    assert "max_background_tasks" in text
    assert [False] == [err for _, err in _bash_results(cp, "c")][:1]


def test_no_background_tasks_at_all_with_a_bound_of_zero(workdir: Path) -> None:
    """max_background_tasks=0: every background command is refused to the model."""
    cp = memory_checkpointer()
    agent = _bounded_background_agent(workdir, cp, 0)
    try:
        agent.send("bg", session_id="a")
        assert 0 == agent.host_stats().background_tasks
    finally:
        agent.close()
    assert [True] == [err for _, err in _bash_results(cp, "a")]


@pytest.mark.parametrize("bound", [-1, 1.5, True, "2", None])
def test_a_bad_background_bound_is_refused(workdir: Path, bound: Any) -> None:
    """max_background_tasks must be an int >= 0."""
    with pytest.raises(InvalidArgumentError, match="max_background_tasks"):
        _bounded_background_agent(workdir, memory_checkpointer(), bound)


def test_many_sessions_with_background_tasks_keep_threads_bounded(workdir: Path) -> None:
    """Sixty sessions each asking for a long background command: at most max_background_tasks
    task threads exist at once (the rest are refused to the model), so the agent's threads stay
    within max_live_sessions + max_background_tasks + its fixed few."""
    cp = memory_checkpointer()
    bound = 4
    before = set(threading.enumerate())
    agent = _bounded_background_agent(workdir, cp, bound)
    peak = 0
    try:
        for i in range(60):
            agent.send("bg", session_id=f"s{i}")
            peak = max(peak, len(set(threading.enumerate()) - before))
            assert agent.host_stats().background_tasks <= bound
        started = sum(1 for i in range(60) for _, err in _bash_results(cp, f"s{i}")[:1] if not err)
    finally:
        (workdir / "go").touch()
        agent.close()
    assert bound == started
    assert peak <= 8 + bound + 16


def test_idle_timeout_returns_threads_to_the_baseline(workdir: Path) -> None:
    """After idle_timeout_s without traffic, every session's actor is stopped: the thread count
    is back to what it was before the turns."""
    model = ToolThenReply(sleep=0.01)
    with _agent(workdir, model, 8 * 2, idle_timeout_s=0.2) as agent:
        before = set(threading.enumerate())
        futures = [_send_in_thread(agent, "go", f"s{i}") for i in range(8)]
        assert ["ok"] * 8 == [f.result(WAIT).text for f in futures]
        assert _until(lambda: set(threading.enumerate()) <= before)
        assert 0 == agent.host_stats().live


def test_idle_compaction_does_not_start_a_thread_per_session(workdir: Path) -> None:
    """With idle compaction on, sessions that finished a turn wait for it without a thread
    each (one timer thread serves the agent)."""
    model = ToolThenReply()
    with _agent(workdir, model, 20 * 2, context={"idle_compact_after": 60}) as agent:
        before = set(threading.enumerate())
        for i in range(20):
            agent.send("go", session_id=f"s{i}")
        assert _until(lambda: agent.host_stats().running == 0)
        new = [t.name for t in threading.enumerate() if t not in before]
        live = agent.host_stats().live
    actors = [name for name in new if name.startswith("liteagent-session")]
    assert (live, []) == (len(actors), [name for name in new if name not in actors])


def test_a_passivated_session_comes_back_with_its_conversation(workdir: Path) -> None:
    """A session passivated by the idle timeout folds its log on its next send."""
    model = ToolThenReply()
    provider = model.provider(4)
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=workdir,
        tools=[write_file],
        checkpointer=memory_checkpointer(),
        idle_timeout_s=0.05,
    ) as agent:
        agent.send("first", session_id="s")
        assert _until(lambda: 0 == agent.host_stats().live)
        agent.send("second", session_id="s")
    texts = [
        b.text
        for m in provider.requests[-1].messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    assert ["first", "second"] == texts


# -- many sessions on real storage ----------------------------------------------------------------


def _thousand(workdir: Path, checkpointer: Checkpointer | None, home: Path) -> list[Any]:
    model = ToolThenReply()
    agent = create_async_lite_agent(
        model=model.provider(1000 * 2),
        model_name="m",
        workdir=workdir,
        tools=[write_file],
        checkpointer=checkpointer,
        home=home,
    )

    async def main() -> list[Any]:
        async with agent:
            return await _run_sessions(agent, 1000, 1)

    return asyncio.run(main())


def test_a_thousand_concurrent_sessions_on_the_file_backend(workdir: Path, tmp_path: Path) -> None:
    """1,000 concurrent sessions with the default settings on the file backend: all complete."""
    outcomes = _thousand(workdir, None, tmp_path / "home")
    assert [] == [o for o in outcomes if not hasattr(o, "text")]
    assert 1000 == len(outcomes)
    cp = file_checkpointer(workdir=workdir, home=tmp_path / "home")
    with cp:
        assert 1000 == len(cp.list())


def test_a_thousand_concurrent_sessions_on_sqlite(workdir: Path, tmp_path: Path) -> None:
    """1,000 concurrent sessions with the default settings on one SQLite file: all complete."""
    with sqlite_checkpointer(tmp_path / "log.db") as cp:
        outcomes = _thousand(workdir, cp, tmp_path / "home")
        sessions = len(cp.list())
    assert [] == [type(o).__name__ for o in outcomes if not hasattr(o, "text")]
    assert 1000 == sessions


def _busy_daemon(workdir: Path, checkpointer: Checkpointer | None, home: Path) -> list[Any]:
    model = ToolThenReply(sleep=0.05)
    agent = create_async_lite_agent(
        model=model.provider(1000 * 3 * 2),
        model_name="m",
        workdir=workdir,
        tools=[write_file],
        checkpointer=checkpointer,
        home=home,
    )

    async def main() -> list[Any]:
        async with agent:
            return await _run_sessions(agent, 1000, 3)

    return asyncio.run(main())


@pytest.mark.soak
def test_a_thousand_busy_sessions_on_the_file_backend(workdir: Path, tmp_path: Path) -> None:
    """1,000 concurrent sessions x 3 turns, a 50 ms model, file backend: 3,000 turns."""
    outcomes = _busy_daemon(workdir, None, tmp_path / "home")
    assert [] == [type(o).__name__ for o in outcomes if not hasattr(o, "text")]
    assert 3000 == len(outcomes)


@pytest.mark.soak
def test_a_thousand_busy_sessions_on_sqlite(workdir: Path, tmp_path: Path) -> None:
    """1,000 concurrent sessions x 3 turns, a 50 ms model, one SQLite file: 3,000 turns."""
    with sqlite_checkpointer(tmp_path / "log.db") as cp:
        outcomes = _busy_daemon(workdir, cp, tmp_path / "home")
    assert [] == [type(o).__name__ for o in outcomes if not hasattr(o, "text")]
    assert 3000 == len(outcomes)


# -- property: every send completes or raises a library error -------------------------------------


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limits=st.tuples(st.integers(1, 4), st.integers(0, 20), st.sampled_from([None, 0.001, 0.05])),
    plan=st.lists(
        st.lists(st.sampled_from(["ok", "ok", "ok", "token", "task"]), min_size=1, max_size=4),
        min_size=2,
        max_size=24,
    ),
    delays=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_every_send_completes_or_raises(
    workdir: Path, limits: tuple[int, int, float | None], plan: list[list[str]], delays: list[int]
) -> None:
    """Concurrent sessions of a few turns each over few slots (``max_live_sessions``,
    ``max_queued_sends``, ``idle_timeout_s`` in ``limits``), some sends cancelled (token or
    task) while waiting or running: every send ends with a result, HostSaturatedError, or a
    cancellation (never a lost message), and each session's log holds the prompts of its
    answered sends, in order, and none of its refused ones."""
    cap, queue_bound, idle = limits
    model = ToolThenReply(sleep=0.001)
    cp = memory_checkpointer()
    calls = sum(len(turns) for turns in plan) * 2
    agent = _async_agent(
        workdir,
        model,
        calls,
        checkpointer=cp,
        max_live_sessions=cap,
        max_queued_sends=queue_bound,
        idle_timeout_s=idle,
    )
    ticks = itertools.cycle(delays)
    outcomes: dict[str, Any] = {}

    async def turn(prompt: str, session: int, action: str) -> None:
        token = CancelToken()
        task = asyncio.ensure_future(agent.send(prompt, session_id=f"s{session}", cancel=token))
        if action != "ok":
            for _ in range(next(ticks)):
                await asyncio.sleep(0.001)
            token.cancel() if action == "token" else task.cancel()
        try:
            outcomes[prompt] = await task
        except asyncio.CancelledError:
            outcomes[prompt] = "cancelled"
        except Exception as e:  # noqa: BLE001 -- checked below
            outcomes[prompt] = e

    async def session(i: int, actions: list[str]) -> None:
        for t, action in enumerate(actions):
            await turn(f"s{i}t{t}", i, action)

    async def main() -> None:
        async with agent:
            await asyncio.wait(
                [asyncio.ensure_future(session(i, actions)) for i, actions in enumerate(plan)],
                timeout=WAIT,
            )

    asyncio.run(main())
    assert sum(len(turns) for turns in plan) == len(outcomes)
    assert [] == [
        o
        for o in outcomes.values()
        if isinstance(o, BaseException)
        and not isinstance(o, (OperationCancelledError, HostSaturatedError))
    ]
    for i, actions in enumerate(plan):
        sent = [f"s{i}t{t}" for t in range(len(actions))]
        answered = [p for p in sent if hasattr(outcomes[p], "text")]
        refused = {p for p in sent if isinstance(outcomes[p], HostSaturatedError)}
        recorded = _prompts(cp, f"s{i}")
        assert recorded == [p for p in sent if p in recorded]
        assert answered == [p for p in recorded if p in answered]
        assert set() == refused & set(recorded)


# -- the CPU gate ---------------------------------------------------------------------------------


def _gate_free() -> bool:
    return (0, 0) == GATE.stats()


class Observed:
    """A model that calls the ``probe`` tool for a prompt and answers "ok" to its result,
    recording whether its thread held the CPU gate during each call (and failing every call
    when ``fail`` is set)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.holding: list[bool] = []

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.holding.append(GATE.holding())
        if self.fail:
            raise RuntimeError("the model failed")
        if _prompt_text(request) is None:
            return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
        call = ToolUseBlock(f"toolu_{len(self.holding)}", "probe", {})
        return AssistantMessage(content=(call,), stop_reason="tool_use")


def _probe_agent(workdir: Path, model: Observed, in_tool: list[bool]) -> LiteAgent:
    @tool
    def probe() -> str:
        """Report whether the tool's thread holds the CPU gate."""
        in_tool.append(GATE.holding())
        return "probed"

    return create_lite_agent(
        model=scripted([model] * 4),
        model_name="m",
        workdir=workdir,
        tools=[probe],
        checkpointer=memory_checkpointer(),
    )


def test_model_calls_and_tools_run_outside_the_cpu_gate(workdir: Path) -> None:
    """A turn gives the gate back around its model calls and its tool runs, and no permit is
    left taken once it returns."""
    model = Observed()
    in_tool: list[bool] = []
    with _probe_agent(workdir, model, in_tool) as agent:
        assert "ok" == agent.send("go").text
    assert ([False, False], [False]) == (model.holding, in_tool)
    assert _gate_free()


def test_a_failing_turn_gives_the_cpu_gate_back(workdir: Path) -> None:
    """A turn whose model call raises records its abort and leaves no permit taken."""
    model = Observed(fail=True)
    with _probe_agent(workdir, model, []) as agent, pytest.raises(LiteAgentError):
        agent.send("go")
    assert ([False], True) == (model.holding, _gate_free())


def test_a_turn_cancelled_while_waiting_for_the_cpu_gate_leaves_it_free(workdir: Path) -> None:
    """A send whose token fires while every permit is taken waits for one, then stops with
    OperationCancelledError (its abort recorded) and gives it back."""
    model = ToolThenReply()
    token = CancelToken()
    with _agent(workdir, model, 4) as agent:
        agent.send("warm up")  # the session's actor exists: the next turn goes straight in
        for _ in range(GATE.permits):
            GATE.acquire()
        try:
            pending = _send_in_thread(agent, "go", agent.session_id, token)
            assert _until(lambda: 1 == GATE.stats()[1])
            token.cancel("stop")
        finally:
            for _ in range(GATE.permits):
                GATE.release()
        with pytest.raises(OperationCancelledError):
            pending.result(WAIT)
    assert ["warm up"] == model.prompts
    assert _gate_free()


def test_the_cpu_gate_serves_in_arrival_order() -> None:
    """Threads queued at the gate get its permit in the order they arrived, one at a time."""
    gate = CpuGate(1)
    order: list[int] = []
    inside = [0, 0]  # now, most at once
    gate.acquire()

    def work(n: int) -> None:
        with gate.held():
            inside[0] += 1
            inside[1] = max(inside)
            order.append(n)
            time.sleep(0.001)
            inside[0] -= 1

    threads = []
    for n in range(8):
        threads.append(threading.Thread(target=work, args=(n,)))
        threads[-1].start()
        assert _until(lambda n=n: n + 1 == gate.stats()[1])
    gate.release()
    for t in threads:
        t.join(WAIT)
    assert (list(range(8)), 1, (0, 0)) == (order, inside[1], gate.stats())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["held", "released", "raise", "nest"]), max_size=6),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 3),
)
def test_the_cpu_gate_is_free_after_any_mix_of_holds_releases_and_errors(
    plans: list[list[str]], permits: int
) -> None:
    """Threads nesting held() and released() blocks, some raising from inside, never hold more
    permits than there are, hold one exactly while inside held() and outside released(), and
    leave every permit free."""
    gate = CpuGate(permits)
    wrong: list[str] = []

    def step(actions: list[str]) -> None:
        if not actions:
            return
        action, rest = actions[0], actions[1:]
        if action == "raise":
            raise ValueError("boom")
        block = gate.released() if action == "released" else gate.held()
        with block:
            expected = action != "released"
            if gate.holding() != expected:
                wrong.append(f"{action}: holding {gate.holding()}")
            if gate.stats()[0] > permits:
                wrong.append("more holders than permits")
            step(rest)

    def run(actions: list[str]) -> None:
        with contextlib.suppress(ValueError), gate.held():
            step(actions)
        if gate.holding():
            wrong.append("still holding after held()")

    threads = [threading.Thread(target=run, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert ([], (0, 0)) == (wrong, gate.stats())


# -- garbage --------------------------------------------------------------------------------------


def _cyclic_garbage(run: Callable[[], None]) -> list[str]:
    """The requests, replies, cancel tokens and turn results that only the cyclic collector
    would free, once ``run`` has returned (with the collector off meanwhile)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [
            type(o).__name__
            for o in gc.garbage
            if isinstance(o, (Request, Reply, CancelToken, LiteAgentResult))
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_finished_async_sends_leave_no_cyclic_garbage(workdir: Path) -> None:
    """A finished async send's request, reply, token and result are freed by reference
    counting, not left for the cyclic collector (whose full collections pause the event loop
    too)."""
    model = ToolThenReply()

    async def main() -> None:
        async with _async_agent(workdir, model, 20) as agent:
            for i in range(5):
                await agent.send(f"turn {i}", session_id=f"s{i}")

    assert [] == _cyclic_garbage(lambda: asyncio.run(main()))


def test_finished_sends_leave_no_cyclic_garbage(workdir: Path) -> None:
    """A finished blocking send's request, reply, token and result are freed by reference
    counting."""
    model = ToolThenReply()

    def main() -> None:
        with _agent(workdir, model, 20) as agent:
            for i in range(5):
                agent.send(f"turn {i}", session_id=f"s{i}")

    assert [] == _cyclic_garbage(main)


# -- the reply of a request -----------------------------------------------------------------------


def test_a_reply_takes_one_outcome_and_runs_each_callback_once() -> None:
    """A reply's first outcome stands: a later one is refused with InvalidStateError, a waiter
    blocked on it wakes with it, and a callback added before or after runs exactly once."""
    reply = Reply()
    seen: list[Any] = []
    reply.add_done_callback(lambda r: seen.append(r.result()))
    waiter = concurrent.futures.ThreadPoolExecutor(1)
    try:
        waited = waiter.submit(reply.result, WAIT)
        reply.set_result("first")
        with pytest.raises(concurrent.futures.InvalidStateError):
            reply.set_exception(ValueError("second"))
        assert not reply.cancel()
        reply.add_done_callback(lambda r: seen.append(r.result()))
        assert ("first", ["first", "first"]) == (waited.result(WAIT), seen)
    finally:
        waiter.shutdown()


def test_a_cancelled_or_unfinished_reply_raises_library_neutral_errors() -> None:
    """result() of an unfinished reply times out with TimeoutError, of a cancelled one raises
    CancelledError, and of a failed one raises its exception."""
    pending, cancelled, failed = Reply(), Reply(), Reply()
    with pytest.raises(concurrent.futures.TimeoutError):
        pending.result(0.01)
    assert cancelled.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result()
    failed.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        failed.result()


# -- the session threads --------------------------------------------------------------------------


def test_a_pool_thread_runs_the_next_job_and_idles_out() -> None:
    """A job started while a thread of the pool is free runs on that thread; a thread left
    without work ends after ``idle_s``, and close() ends the idle ones at once."""
    pool = ThreadPool("test-pool", idle_s=0.05)
    names: list[str] = []
    done = threading.Event()
    pool.run(lambda: (names.append(threading.current_thread().name), done.set()))
    assert done.wait(WAIT)
    assert _until(lambda: 1 == pool.idle())
    done.clear()
    pool.run(lambda: (names.append(threading.current_thread().name), done.set()))
    assert done.wait(WAIT)
    assert 1 == len(set(names))
    assert _until(lambda: 0 == pool.idle())
    kept = ThreadPool("test-kept", idle_s=WAIT)
    kept.run(lambda: None)
    assert _until(lambda: 1 == kept.idle())
    kept.close()
    assert 0 == kept.idle()
    assert _until(lambda: not any(t.name.startswith("test-") for t in threading.enumerate()))


def test_passivated_sessions_leave_their_threads_to_the_next_ones(workdir: Path) -> None:
    """With more sessions than slots, a session started after another was passivated runs on
    that session's thread: the threads the agent started stay within max_live_sessions."""
    model = ToolThenReply()
    started: set[str] = set()

    def record(request: ModelRequest) -> AssistantMessage:
        started.add(threading.current_thread().name)
        return model(request)

    agent = create_lite_agent(
        model=scripted([record] * 40),
        model_name="m",
        workdir=workdir,
        tools=[write_file],
        checkpointer=memory_checkpointer(),
        max_live_sessions=2,
    )
    with agent:
        for i in range(10):
            assert "ok" == agent.send(f"turn {i}", session_id=f"s{i}").text
    assert 1 <= len(started) <= 2
