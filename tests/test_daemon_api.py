"""The API a daemon builds on: every method that takes a session works on it without resume()
and leaves the current session alone, on a fresh agent over an existing store (a daemon that
restarted); AsyncLiteAgent.subscribe() is an async iterator; iter_compact waits for its events
(never polls); each agent owns its pool, which close() stops."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from liteagent.actors import MaintenanceLockActor, _restore_files
from liteagent.actors._envelope import ask
from liteagent.actors._maintenance import IsHeld, held
from liteagent.actors._restore_plan import FilePlan
from liteagent.context import Compactor, CompactResult, PassReport, estimate_tokens
from liteagent.eventlog import CancelToken, Checkpointer, memory_checkpointer, sqlite_checkpointer
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    Compaction,
    Message,
    RestoreFinished,
    RestoreStarted,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from liteagent.providers import scripted
from liteagent.sdk import (
    ActorStoppedError,
    AgentBusyError,
    AgentClosedError,
    AsyncLiteAgent,
    AsyncSubscription,
    CheckpointRestore,
    CompactionProgress,
    LiteAgent,
    LiveEvent,
    Missed,
    SessionsDisabledError,
    Subscription,
    TurnFinished,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.sdk._core import POOL_WORKERS
from liteagent.tools import write_file

PHASES = ["start", "progress", "progress", "done"]  # KeepLast: its one pass, then persist
GUARD = 30  # seconds: a hang guard, never a performance bound


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def write(path: str, content: str) -> AssistantMessage:
    """An assistant message calling write_file."""
    return AssistantMessage(
        content=(
            ToolUseBlock(
                f"toolu_{path}_{content}", "write_file", {"path": path, "content": content}
            ),
        ),
        stop_reason="tool_use",
    )


def _is_prompt(message: Message) -> bool:
    """Whether ``message`` is a user prompt (not a message of tool results)."""
    return message.role == "user" and (
        isinstance(message.content, str)
        or not any(isinstance(b, ToolResultBlock) for b in message.content)
    )


class KeepLast(Compactor):
    """Keeps a summary line and the last message pair. With a ``gate``, it sets ``entered``
    and waits until the gate opens (a cancellation opens it too, then raises)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.entered = threading.Event()

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        self.entered.set()
        if self.gate is not None:
            if cancel is not None:
                cancel.on_cancel(self.gate.set)
            assert self.gate.wait(GUARD)
            if cancel is not None:
                cancel.raise_if_cancelled()
        before = estimate_tokens(messages)
        # the last prompt and what follows it: whole tool call/result pairs, none cut in half
        last = max(i for i, m in enumerate(messages) if _is_prompt(m))
        kept = (Message("user", (TextBlock("[summary]"),)), *messages[last:])
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


@pytest.fixture
def store(tmp_path: Path, workdir: Path) -> Path:
    """A SQLite store an earlier agent left: session s1 (two prompts, each writing a.txt) and
    s2 (two plain exchanges)."""
    path = tmp_path / "sessions.db"
    provider = scripted(
        [
            write("a.txt", "1"),
            reply("one done"),
            write("a.txt", "2"),
            reply("two done"),
            reply("hello"),
            reply("back"),
        ]
    )
    with (
        sqlite_checkpointer(path) as cp,
        create_lite_agent(
            model=provider, model_name="m", workdir=workdir, checkpointer=cp, tools=[write_file]
        ) as agent,
    ):
        agent.send("one", session_id="s1")
        agent.send("two", session_id="s1")
        agent.send("hi", session_id="s2")
        agent.send("again", session_id="s2")
    return path


def _interrupt_a_restore(store: Path, workdir: Path) -> int:
    """Leave s1 with a restore to its first checkpoint cut short (its intent at the end of the
    log, a.txt already gone); return that checkpoint's seq."""
    with (
        sqlite_checkpointer(store) as cp,
        create_lite_agent(
            model=scripted([]), model_name="m", workdir=workdir, checkpointer=cp
        ) as agent,
    ):
        seq = agent.list_checkpoints("s1")[0].seq
        plans = _restore_files.backup_files(
            workdir,
            [FilePlan(path="a.txt", target=None, target_hash=None, last_hash=None)],
            cp.blobs,
        )
        cp.append("s1", [RestoreStarted(to_seq=seq, conversation=True, files=tuple(plans))])
    (workdir / "a.txt").unlink()
    return seq


def _prompts(cp: Checkpointer, sid: str) -> int:
    return sum(e.kind == "user_prompt" for e in cp.read(sid))


def _compactions(cp: Checkpointer, sid: str) -> int:
    return sum(isinstance(e.body, Compaction) for e in cp.read(sid))


class Shell:
    """One agent driven the same way whichever shell it is: an async agent's coroutines and
    iterators run on a loop of the shell's own."""

    def __init__(self, kind: str, agent: LiteAgent | AsyncLiteAgent) -> None:
        self.kind, self.agent = kind, agent
        self.loop = asyncio.new_event_loop() if kind == "async" else None

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.agent, method)(*args, **kwargs)
        if self.loop is not None and inspect.isawaitable(result):
            return self.loop.run_until_complete(result)
        return result

    def collect(self, iterator: Any) -> list[Any]:
        """Every item of a (sync or async) iterator."""
        if self.loop is None:
            return list(iterator)
        return self.loop.run_until_complete(_alist(iterator))

    def drain(self, sub: Subscription | AsyncSubscription) -> list[Any]:
        """What a subscription holds now."""
        items = []
        while (
            item := sub.get(0) if isinstance(sub, Subscription) else sub.get_nowait()
        ) is not None:
            items.append(item)
        return items

    def close(self) -> None:
        if self.loop is None:
            self.agent.close()
            return
        self.loop.run_until_complete(self.agent.close())  # type: ignore[arg-type]
        self.loop.close()


async def _alist(iterator: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in iterator]


@contextmanager
def shell(kind: str, cp: Checkpointer, workdir: Path, **kwargs: Any) -> Iterator[Shell]:
    """A fresh agent of ``kind`` ("sync" or "async") on ``cp``."""
    kwargs.setdefault("model", scripted([]))
    create = create_lite_agent if kind == "sync" else create_async_lite_agent
    s = Shell(
        kind,
        create(
            model_name="m",
            workdir=workdir,
            checkpointer=cp,  # type: ignore[operator]
            tools=[write_file],
            **kwargs,
        ),
    )
    try:
        yield s
    finally:
        s.close()


SHELLS = ["sync", "async"]


# -- every session method on a fresh agent, without resume ---------------------------------------


def _send(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    a("send", "three", session_id="s1")
    first = a.agent._core.provider.requests[0].messages[0]
    assert "one" == first.content[0].text  # the stored conversation, folded from the log
    assert 3 == _prompts(cp, "s1")


def _list_checkpoints(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    assert ["one", "two"] == [c.prompt for c in a("list_checkpoints", "s1")]


def _compact(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    assert a("compact", session_id="s1").changed
    assert 1 == _compactions(cp, "s1")


def _iter_compact(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    iterator = a("iter_compact", session_id="s1")
    assert PHASES == [p.phase for p in a.collect(iterator)]
    assert iterator.stats is not None
    assert iterator.stats.changed
    assert 1 == _compactions(cp, "s1")


def _restore(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    second = a("list_checkpoints", "s1")[1].seq
    assert ("a.txt",) == a("restore", "s1", second).restored_files
    assert "1" == (workdir / "a.txt").read_text()
    assert second - 1 == cp.head("s1")


def _pending_restore(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    assert seq == a("pending_restore", "s1").to_seq
    assert a("pending_restore", "s2") is None


def _finish_restore(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    assert ("a.txt",) == a("finish_restore", "s1").restored_files
    assert seq is not None
    assert seq - 1 == cp.head("s1")
    assert a("pending_restore", "s1") is None


def _rollback_restore(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    assert ["a.txt"] == a("rollback_restore", "s1")
    assert "2" == (workdir / "a.txt").read_text()
    assert a("pending_restore", "s1") is None


def _delete_session(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    a("delete_session", "s1")
    assert ["s2"] == [s.id for s in a("list_sessions")]


def _subscribe(a: Shell, cp: Checkpointer, workdir: Path, seq: int | None) -> None:
    sub = a.agent.subscribe(session_id="s1")
    a("send", "to s2", session_id="s2")
    a("send", "to s1", session_id="s1")
    items = a.drain(sub)
    sub.close()
    assert {"s1"} == {i.session_id for i in items}
    assert isinstance(items[-1].event, TurnFinished)


CASES: dict[str, Callable[[Shell, Checkpointer, Path, int | None], None]] = {
    "send": _send,
    "list_checkpoints": _list_checkpoints,
    "compact": _compact,
    "iter_compact": _iter_compact,
    "restore": _restore,
    "pending_restore": _pending_restore,
    "finish_restore": _finish_restore,
    "rollback_restore": _rollback_restore,
    "delete_session": _delete_session,
    "subscribe": _subscribe,
}
INTERRUPTED = {"pending_restore", "finish_restore", "rollback_restore"}


@pytest.mark.parametrize("kind", SHELLS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_session_method_works_on_a_fresh_agent_without_resume(
    store: Path, workdir: Path, kind: str, case: str
) -> None:
    """On a new agent over a store an earlier one left, each method that takes a session does
    its work on the session named (no resume() first), leaves the agent's current session as
    it was, and touches no other session's log."""
    seq = _interrupt_a_restore(store, workdir) if case in INTERRUPTED else None
    with sqlite_checkpointer(store) as cp:
        other = list(cp.read("s2"))
        with shell(
            kind, cp, workdir, model=scripted([reply("r1"), reply("r2")]), compactor=KeepLast()
        ) as a:
            current = a.agent.session_id
            CASES[case](a, cp, workdir, seq)
            assert current == a.agent.session_id
        if case != "subscribe":  # the one case that sends to s2 too
            assert other == list(cp.read("s2"))


@pytest.mark.parametrize("kind", SHELLS)
def test_compacting_another_session_leaves_the_current_one(
    store: Path, workdir: Path, kind: str
) -> None:
    """compact(session_id=...) compacts that session while another one is current, which stays
    current; compact() without it compacts the current one."""
    with sqlite_checkpointer(store) as cp, shell(kind, cp, workdir, compactor=KeepLast()) as a:
        a("resume", "s2")
        a("compact", session_id="s1")
        assert "s2" == a.agent.session_id
        assert (1, 0) == (_compactions(cp, "s1"), _compactions(cp, "s2"))
        a("compact")
        assert (1, 1) == (_compactions(cp, "s1"), _compactions(cp, "s2"))


@pytest.mark.parametrize("kind", SHELLS)
def test_restore_leaves_the_current_session(store: Path, workdir: Path, kind: str) -> None:
    """restore() of another session does not make it the current one."""
    with sqlite_checkpointer(store) as cp, shell(kind, cp, workdir) as a:
        a("resume", "s2")
        a("restore", "s1", a("list_checkpoints", "s1")[1].seq)
        assert "s2" == a.agent.session_id


def test_compacting_another_session_needs_sessions(workdir: Path) -> None:
    """With sessions=False, compact(session_id=<another id>) raises SessionsDisabledError that
    names compact()."""
    with (
        create_lite_agent(
            model=scripted([]), model_name="m", workdir=workdir, sessions=False
        ) as agent,
        pytest.raises(SessionsDisabledError, match=r"compact\(session_id"),
    ):
        agent.compact(session_id="other")


# -- AsyncLiteAgent.subscribe(): an async iterator ----------------------------------------------


def _turn_script() -> Any:
    return scripted([write("a.txt", "x"), reply("all written down")], stream_chunk=3)


def test_async_subscription_delivers_a_turns_events_in_order(workdir: Path) -> None:
    """``async for`` over AsyncLiteAgent.subscribe() yields the live events of a turn as the
    blocking subscription sees them, in the same order, while the turn runs."""
    with (
        create_lite_agent(
            model=_turn_script(),
            model_name="m",
            workdir=workdir,
            checkpointer=memory_checkpointer(),
            tools=[write_file],
        ) as agent,
        agent.subscribe() as sub,
    ):
        agent.send("go", session_id="s")
        expected = []
        while (item := sub.get(0)) is not None:
            expected.append(item.event)

    async def main() -> list[Any]:
        async with create_async_lite_agent(
            model=_turn_script(),
            model_name="m",
            workdir=workdir,
            checkpointer=memory_checkpointer(),
            tools=[write_file],
        ) as agent:
            sub = agent.subscribe()
            seen: list[Any] = []

            async def consume() -> None:
                async for item in sub:
                    seen.append(item.event)
                    if isinstance(item.event, TurnFinished):
                        return

            consumer = asyncio.ensure_future(consume())
            await agent.send("go", session_id="s")
            await asyncio.wait_for(consumer, GUARD)
            sub.close()
            return seen

    seen = asyncio.run(main())
    assert isinstance(expected[-1], TurnFinished)
    assert len(expected) > 4
    assert expected == seen


def test_async_subscription_ends_on_close_and_on_agent_close(workdir: Path) -> None:
    """An ``async for`` over a subscription ends after the buffered events when it is closed,
    when its ``async with`` block is left, and when the agent closes."""

    async def main() -> tuple[list[Any], list[Any], bool]:
        agent = create_async_lite_agent(
            model=_turn_script(),
            model_name="m",
            workdir=workdir,
            checkpointer=memory_checkpointer(),
            tools=[write_file],
        )
        first, second = agent.subscribe(), agent.subscribe()
        got: dict[int, list[Any]] = {1: [], 2: []}

        async def consume(n: int, sub: AsyncSubscription) -> None:
            async for item in sub:
                got[n].append(item)

        tasks = [
            asyncio.ensure_future(consume(1, first)),
            asyncio.ensure_future(consume(2, second)),
        ]
        await agent.send("go")
        first.close()
        await asyncio.wait_for(tasks[0], GUARD)
        async with agent.subscribe() as third:
            pass
        await agent.close()
        await asyncio.wait_for(tasks[1], GUARD)
        return got[1], got[2], third.closed

    one, two, third_closed = asyncio.run(main())
    assert isinstance(one[-1].event, TurnFinished)
    assert one == two
    assert third_closed


def test_async_subscription_overflow_is_that_of_the_blocking_one(workdir: Path) -> None:
    """A subscriber that does not read keeps its first ``maxsize`` events and is told how many
    it missed, exactly like a blocking one; the session is never slowed down."""

    async def main() -> list[Any]:
        async with create_async_lite_agent(
            model=scripted([reply("x" * 50)], stream_chunk=1),
            model_name="m",
            workdir=workdir,
            checkpointer=memory_checkpointer(),
        ) as agent:
            with_room = agent.subscribe(maxsize=5)
            await agent.send("go")
            with_room.close()
            return [item async for item in with_room]

    items = asyncio.run(main())
    assert 5 == sum(isinstance(i, LiveEvent) for i in items)
    assert [Missed(46)] == [i for i in items if isinstance(i, Missed)]
    assert isinstance(items[-1], Missed)  # the count, once the buffer has run dry


def test_a_cancelled_wait_leaves_the_subscription_usable(workdir: Path) -> None:
    """Cancelling a task waiting in ``get()`` raises CancelledError there; the subscription
    then delivers the next events to the next ``get()``."""

    async def main() -> Any:
        agent = create_async_lite_agent(
            model=scripted([reply("hello")]),
            model_name="m",
            workdir=workdir,
            checkpointer=memory_checkpointer(),
        )
        async with agent, agent.subscribe(session_id="s") as sub:
            waiting = asyncio.ensure_future(sub.get())
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await agent.send("hi", session_id="s")
            return await asyncio.wait_for(sub.get(), GUARD)

    item = asyncio.run(main())
    assert isinstance(item, LiveEvent)
    assert "s" == item.session_id


# -- iter_compact waits for its events ------------------------------------------------------------


@pytest.mark.parametrize("kind", SHELLS)
def test_iter_compact_yields_each_event_while_the_compaction_runs(
    store: Path, workdir: Path, kind: str
) -> None:
    """The first progress event arrives while the compactor is still working (it waits for a
    gate), the rest once it is let go, in order; the iterator ends when the compaction does,
    with its stats."""
    gate = threading.Event()
    compactor = KeepLast(gate)
    with sqlite_checkpointer(store) as cp, shell(kind, cp, workdir, compactor=compactor) as a:
        iterator = a("iter_compact", session_id="s1")
        first = _next(a, iterator)
        assert ("start", "measure") == (first.phase, first.stage)
        assert compactor.entered.wait(GUARD)
        assert 0 == _compactions(cp, "s1")  # still running: its start came as it happened
        gate.set()
        rest = a.collect(iterator)
        assert PHASES == [first.phase, *(p.phase for p in rest)]
        assert iterator.stats is not None
        assert iterator.stats.changed
        assert 1 == _compactions(cp, "s1")


def _next(a: Shell, iterator: Any) -> CompactionProgress:
    if a.loop is None:
        return next(iterator)  # type: ignore[no-any-return]
    return a.loop.run_until_complete(iterator.__anext__())  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", SHELLS)
def test_iter_compact_ends_with_its_compaction_even_without_an_event(
    store: Path, workdir: Path, kind: str
) -> None:
    """An iter_compact whose compaction is refused (the session is held by another one)
    publishes nothing; its iteration still ends at once, raising AgentBusyError."""
    gate = threading.Event()
    compactor = KeepLast(gate)
    with sqlite_checkpointer(store) as cp, shell(kind, cp, workdir, compactor=compactor) as a:
        running = a("iter_compact", session_id="s1")
        assert "start" == _next(a, running).phase
        with pytest.raises(AgentBusyError):
            a.collect(a("iter_compact", session_id="s1"))
        gate.set()
        a.collect(running)
        assert 1 == _compactions(cp, "s1")


def test_leaving_iter_compact_early_cancels_the_compaction(store: Path, workdir: Path) -> None:
    """Leaving the ``with`` block of an iter_compact before its end cancels the compaction,
    which records nothing; the session is free again afterwards."""
    compactor = KeepLast(threading.Event())
    token = CancelToken()
    with sqlite_checkpointer(store) as cp, shell("sync", cp, workdir, compactor=compactor) as a:
        with a.agent.iter_compact(session_id="s1", cancel=token) as iterator:
            assert "start" == next(iterator).phase
        assert token.cancelled
        assert 0 == _compactions(cp, "s1")
        compactor.gate = None
        assert a.agent.compact(session_id="s1").changed


def test_cancelling_the_task_iterating_iter_compact_cancels_the_compaction(
    store: Path, workdir: Path
) -> None:
    """Cancelling the task in ``async for ... in agent.iter_compact(...)`` cancels the
    compaction and waits until it has stopped: nothing recorded, the session free again."""
    compactor = KeepLast(threading.Event())
    token = CancelToken()

    async def main(agent: AsyncLiteAgent) -> bool:
        started = asyncio.Event()

        async def follow() -> None:
            async for _ in agent.iter_compact(session_id="s1", cancel=token):
                started.set()

        task = asyncio.ensure_future(follow())
        await asyncio.wait_for(started.wait(), GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        compactor.gate = None
        return (await agent.compact(session_id="s1")).changed

    with sqlite_checkpointer(store) as cp, shell("async", cp, workdir, compactor=compactor) as a:
        assert a.loop is not None
        before = _compactions(cp, "s1")
        assert a.loop.run_until_complete(main(a.agent))  # type: ignore[arg-type]
    assert token.cancelled
    assert 0 == before


def test_cancelling_an_async_compact_of_another_session(store: Path, workdir: Path) -> None:
    """Cancelling the task awaiting compact(session_id=...) cancels that compaction's token;
    nothing is recorded and the current session is unchanged."""
    compactor = KeepLast(threading.Event())
    token = CancelToken()

    async def main(agent: AsyncLiteAgent) -> None:
        task = asyncio.ensure_future(agent.compact(session_id="s1", cancel=token))
        await asyncio.wait_for(asyncio.to_thread(compactor.entered.wait, GUARD), GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with sqlite_checkpointer(store) as cp, shell("async", cp, workdir, compactor=compactor) as a:
        current = a.agent.session_id
        assert a.loop is not None
        a.loop.run_until_complete(main(a.agent))  # type: ignore[arg-type]
        assert 0 == _compactions(cp, "s1")
        assert current == a.agent.session_id
    assert token.cancelled


def test_close_cancels_a_compaction_in_progress(store: Path, workdir: Path) -> None:
    """close() while a compaction runs on the pool cancels it (nothing recorded) instead of
    waiting for its compactor, then joins the pool's threads."""
    compactor = KeepLast(threading.Event())

    async def main(agent: AsyncLiteAgent) -> BaseException | None:
        task = asyncio.ensure_future(agent.compact(session_id="s1"))
        await asyncio.wait_for(asyncio.to_thread(compactor.entered.wait, GUARD), GUARD)
        await asyncio.wait_for(agent.close(), GUARD)
        done, _ = await asyncio.wait({task}, timeout=GUARD)
        return task.exception() if done else None

    with sqlite_checkpointer(store) as cp, shell("async", cp, workdir, compactor=compactor) as a:
        assert a.loop is not None
        error = a.loop.run_until_complete(main(a.agent))  # type: ignore[arg-type]
        assert [] == _threads(f"{a.agent._core.name}-pool")
        assert 0 == _compactions(cp, "s1")
    assert isinstance(error, OperationCancelledError)


# -- each agent owns its pool ---------------------------------------------------------------------


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_close_stops_the_threads_of_the_agents_pool(store: Path, workdir: Path) -> None:
    """A blocking agent's executor starts a thread to hand an iter_compact's compaction to its
    operation pool, which starts one to run it; close() leaves no thread named for the agent."""
    with sqlite_checkpointer(store) as cp:
        agent = create_lite_agent(
            model=scripted([]),
            model_name="m",
            workdir=workdir,
            checkpointer=cp,
            compactor=KeepLast(),
        )
        name = agent._core.name
        assert [] == _threads(f"{name}-")
        list(agent.iter_compact(session_id="s1"))
        assert [f"{name}-op-1", f"{name}-pool_0"] == sorted(t.name for t in _threads(f"{name}-"))
        agent.close()
        assert [] == _threads(f"{name}-")


def test_async_close_stops_the_pool_and_its_own_thread(workdir: Path) -> None:
    """An async agent starts its pool's threads with itself (never on the loop later); after
    ``await close()`` they are all gone, and so is the thread that closed it once it ends."""
    agent = create_async_lite_agent(
        model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
    )
    name = agent._core.name
    started = sorted(t.name for t in _threads(f"{name}-"))
    asyncio.run(agent.close())
    assert [] == _threads(f"{name}-pool")
    for closer in _threads(f"{name}-close"):
        closer.join(GUARD)
    assert [] == _threads(f"{name}-")
    assert [f"{name}-pool_{i}" for i in range(POOL_WORKERS)] == started


def test_two_agents_do_not_share_a_pool(workdir: Path) -> None:
    """With every thread of one agent's pool busy, another agent's calls still run, while the
    first agent's own call waits for its pool."""
    first = create_async_lite_agent(
        model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
    )
    second = create_async_lite_agent(
        model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
    )
    release = threading.Event()
    busy = [first._core.pool.submit(release.wait, GUARD) for _ in range(POOL_WORKERS)]

    async def main() -> tuple[bool, list[Any]]:
        try:
            waiting = asyncio.ensure_future(first.list_sessions())
            sessions = await asyncio.wait_for(second.list_sessions(), GUARD)
            blocked = not waiting.done()
            release.set()
            await asyncio.wait_for(waiting, GUARD)
            return blocked, sessions
        finally:
            release.set()
            await first.close()
            await second.close()

    blocked, sessions = asyncio.run(main())
    assert blocked
    assert [] == sessions
    assert all(job.result() for job in busy)
    assert first._core.name != second._core.name


def test_calls_after_close_raise_agent_closed(workdir: Path) -> None:
    """After close(), the async methods that would use the pool raise AgentClosedError."""

    async def main() -> None:
        agent = create_async_lite_agent(
            model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
        )
        await agent.close()
        await agent.close()  # a second close is a no-op
        with pytest.raises(AgentClosedError):
            await agent.list_checkpoints("s")
        with pytest.raises(AgentClosedError):
            agent.iter_compact()
        with pytest.raises(AgentClosedError):
            agent.subscribe()

    asyncio.run(main())


def test_close_during_a_restore_waits_for_its_rollback(tmp_path: Path, workdir: Path) -> None:
    """close() while a restore is putting files back cancels it and waits until it has put
    every file it changed back and recorded its rollback: the caller sees
    OperationCancelledError (not an actor stopped under it), every file has the content it had
    before the restore, and the session has no interrupted restore and no lease left."""
    count, size = 150, 1_000

    def writes(version: str) -> AssistantMessage:
        return AssistantMessage(
            content=tuple(
                ToolUseBlock(
                    f"toolu_{version}_{i}",
                    "write_file",
                    {"path": f"f{i}.txt", "content": f"{version} {i}\n" * (size // 8)},
                )
                for i in range(count)
            ),
            stop_reason="tool_use",
        )

    provider = scripted([writes("one"), reply("one done"), writes("two"), reply("two done")])
    with sqlite_checkpointer(tmp_path / "restore.db") as cp:
        agent = create_lite_agent(
            model=provider, model_name="m", workdir=workdir, checkpointer=cp, tools=[write_file]
        )
        try:
            agent.send("write them")
            agent.send("write them again")
            session = agent.session_id
            seq = agent.list_checkpoints()[1].seq
            outcome: list[BaseException | None] = []

            def run() -> None:
                try:
                    agent.restore(session, seq)
                    outcome.append(None)
                except BaseException as e:  # noqa: BLE001 -- the outcome is what is tested
                    outcome.append(e)

            with agent.subscribe(session_id=session) as events:
                thread = threading.Thread(target=run)
                thread.start()
                for event in events:
                    body = getattr(event, "event", None)
                    if isinstance(body, CheckpointRestore) and body.phase == "progress":
                        break
                agent.close()
            thread.join(GUARD)
            assert not thread.is_alive()
        finally:
            agent.close()
        assert 1 == len(outcome)
        assert isinstance(outcome[0], OperationCancelledError), outcome[0]
        for i in range(count):
            assert f"two {i}\n" * (size // 8) == (workdir / f"f{i}.txt").read_text()
        bodies = [e.body for e in cp.read(session)]
        assert [] == [b for b in bodies if isinstance(b, (RestoreStarted, RestoreFinished))]
        assert cp.lease_holder(session) is None


def _core_agent(workdir: Path) -> LiteAgent:
    return create_lite_agent(
        model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
    )


def test_an_operation_that_meets_an_actor_close_stopped_is_cancelled(workdir: Path) -> None:
    """An operation still running when close() stopped the actors (here close() is called from
    the operation's own thread, which close() does not wait for) and that then asks one of them
    raises OperationCancelledError, not ActorStoppedError."""
    agent = _core_agent(workdir)
    core = agent._core

    def operation() -> None:
        with core._until_closed(None) as token:
            core.close()
            assert token.cancelled
            ask(core.lock_ref, IsHeld("s1"), timeout=GUARD)

    with pytest.raises(OperationCancelledError, match="the agent was closed"):
        operation()


def test_a_lock_given_back_to_a_stopped_lock_actor_is_no_error(workdir: Path) -> None:
    """Leaving ``held`` after close() stopped the lock actor raises nothing: the lock went with
    the actor, and the block's own outcome is what its caller sees."""
    agent = _core_agent(workdir)
    core = agent._core
    with held(core.lock_ref, "s1", "test", core.host.is_busy):
        core.close()
    assert not core.lock_ref.is_alive()


def test_an_actor_stopped_outside_close_is_not_a_cancellation(workdir: Path) -> None:
    """ActorStoppedError in an operation of an agent that is not closed is reported as it is."""
    with _core_agent(workdir) as agent:
        core = agent._core
        stopped = MaintenanceLockActor.start()
        stopped.stop()
        with pytest.raises(ActorStoppedError), core._until_closed(None):
            ask(stopped, IsHeld("s1"), timeout=GUARD)


def test_close_waits_only_a_bounded_while_for_an_operation(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation that does not end when close() cancels it holds close() up for at most
    CLOSE_WAIT_S (then close() logs it and goes on); one that ends is waited for."""
    monkeypatch.setattr("liteagent.sdk._core.CLOSE_WAIT_S", 0.3)
    agent = _core_agent(workdir)
    core = agent._core
    inside, leave = threading.Event(), threading.Event()

    def operation() -> None:
        with core._until_closed(None):
            inside.set()
            leave.wait(GUARD)

    thread = threading.Thread(target=operation)
    thread.start()
    assert inside.wait(GUARD)
    try:
        with structlog.testing.capture_logs() as logs:
            core.close()
        assert thread.is_alive()  # close() went on without it
        assert ["agent.close_operations_running"] == [e["event"] for e in logs]
    finally:
        leave.set()
        thread.join(GUARD)


def test_async_close_returns_once_every_thread_of_the_agent_has_ended(tmp_path: Path) -> None:
    """``await agent.close()`` returns after the agent's own close thread has ended too (it
    used to return while that thread was finishing, in about half the closes): twenty agents
    each send a turn and close, and no thread they started is alive when close returns."""

    async def once(n: int) -> list[str]:
        before = set(threading.enumerate())
        agent = create_async_lite_agent(
            model=scripted([AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")]),
            model_name="m",
            workdir=tmp_path,
            checkpointer=memory_checkpointer(),
        )
        await agent.send("hi", session_id=f"s{n}")
        await agent.close()
        return [t.name for t in threading.enumerate() if t not in before]

    async def main() -> list[list[str]]:
        return [await once(n) for n in range(20)]

    assert [[]] * 20 == asyncio.run(main())
