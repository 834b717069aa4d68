"""An agent's operations (compactions, restores, collections, the asyncio shell's work off the
loop): compactions of different sessions run at once, one stuck compactor delays no other
session, reads never wait behind operations, at most ``MAX_OPERATIONS`` run at once and the
rest wait in order, a queued one that is cancelled never starts, idle threads end, and when no
thread can start the caller gets an error instead of a wait that never ends."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pykka
import pytest

from liteagent.actors import CompactorActor
from liteagent.context import Compactor, CompactResult
from liteagent.eventlog import CancelToken, memory_checkpointer
from liteagent.eventlog.errors import InvalidArgumentError, OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, Message, TextBlock, Usage
from liteagent.providers import scripted
from liteagent.sdk import (
    AsyncLiteAgent,
    HostSaturatedError,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.sdk._core import MAX_OPERATIONS
from liteagent.sdk._operations import OperationPool

GUARD = 30.0  # a bound on every wait: a failure never hangs the run


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def first_text(messages: Sequence[Message]) -> str:
    """The text of the conversation's first block (the session's first prompt)."""
    block = messages[0].content[0]
    assert isinstance(block, TextBlock)
    return block.text


class Gated(Compactor):
    """Calls ``wait`` with the session's first prompt (and with ``with_cancel``, the
    compaction's cancel token), then reports nothing to reduce; counts the compactions
    running at once and records the order they started in."""

    def __init__(self, wait: Callable[..., object], *, with_cancel: bool = False) -> None:
        self.wait = wait
        self.with_cancel = with_cancel
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.started: list[str] = []

    @property
    def spills(self) -> bool:
        return False

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        name = first_text(messages)
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started.append(name)
        try:
            if self.with_cancel:
                self.wait(name, cancel)
            else:
                self.wait(name)
        finally:
            with self.lock:
                self.running -= 1
        return CompactResult(
            messages=tuple(messages), changed=False, tokens_before=1, tokens_after=1
        )


def wait_until(check: Callable[[], bool]) -> None:
    """Wait (bounded by GUARD) until ``check()`` holds."""
    deadline = time.monotonic() + GUARD
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _sessions(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def test_compactions_of_different_sessions_run_at_once(workdir: Path) -> None:
    """Four sessions compacted from four threads meet at a barrier inside the compactor: they
    only get there when the four compactions run at once (one at a time, the barrier breaks)."""
    barrier = threading.Barrier(4, timeout=GUARD)
    compactor = Gated(lambda _: barrier.wait())
    ids = _sessions(4)
    with create_lite_agent(
        model=scripted([reply("ok")] * 4),
        model_name="m",
        workdir=workdir,
        checkpointer=memory_checkpointer(),
        compactor=compactor,
    ) as agent:
        for sid in ids:
            agent.send(sid, session_id=sid)
        results: dict[str, Any] = {}

        def compact(sid: str) -> None:
            try:
                results[sid] = agent.compact(session_id=sid)
            except Exception as e:  # noqa: BLE001 -- reported below
                results[sid] = e

        threads = [threading.Thread(target=compact, args=(sid,)) for sid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(GUARD)
    assert dict.fromkeys(ids, False) == {sid: r.changed for sid, r in results.items()}
    assert 4 == compactor.peak


def test_a_stuck_compactor_delays_no_other_session(workdir: Path) -> None:
    """A compactor that ignores its cancellation and never returns on one session: another
    session's compaction completes meanwhile, and cancelling the stuck one returns at once."""
    release = threading.Event()
    compactor = Gated(lambda name: release.wait(GUARD) if name == "stuck" else None)
    agent = create_lite_agent(
        model=scripted([reply("ok")] * 2),
        model_name="m",
        workdir=workdir,
        checkpointer=memory_checkpointer(),
        compactor=compactor,
    )
    try:
        agent.send("stuck", session_id="a")
        agent.send("fine", session_id="b")
        token = CancelToken()
        outcome: list[BaseException] = []

        def stuck() -> None:
            try:
                agent.compact(session_id="a", cancel=token)
            except BaseException as e:  # noqa: BLE001 -- checked below
                outcome.append(e)

        thread = threading.Thread(target=stuck)
        thread.start()
        wait_until(lambda: "stuck" in compactor.started)
        late = CancelToken()  # fires long after b's compaction would end, unless it waits
        timer = threading.Timer(GUARD / 2, late.cancel)
        timer.start()
        try:
            assert not agent.compact(session_id="b", cancel=late).changed  # not behind a's
        finally:
            timer.cancel()
        token.cancel("enough")
        thread.join(GUARD)
        assert [OperationCancelledError] == [type(e) for e in outcome]
        assert compactor.running == 1  # it still runs: the caller did not wait for it
    finally:
        release.set()
        agent.close()


def _async_agent(workdir: Path, compactor: Compactor, turns: int, **kw: Any) -> AsyncLiteAgent:
    """An asyncio agent on a memory store whose model answers ``turns`` prompts with "ok"."""
    return create_async_lite_agent(
        model=scripted([reply("ok")] * turns),
        model_name="m",
        workdir=workdir,
        checkpointer=memory_checkpointer(),
        compactor=compactor,
        **kw,
    )


def test_operations_beyond_the_limit_wait_in_order_and_reads_do_not(workdir: Path) -> None:
    """With MAX_OPERATIONS compactions running, further ones wait (at most MAX_OPERATIONS run
    at once) and start in the order they were asked for as slots free up one by one; a read
    meanwhile is not queued behind them; a queued compaction whose awaiting task is cancelled
    never starts; every other compaction completes."""
    ids = _sessions(MAX_OPERATIONS + 4)
    gates = {sid: threading.Event() for sid in ids}
    compactor = Gated(lambda name: gates[name].wait(GUARD))
    agent = _async_agent(workdir, compactor, len(ids))
    queued = agent._core.operations.stats

    async def until(check: Callable[[], bool]) -> None:
        await asyncio.to_thread(wait_until, check)

    async def main() -> list[Any]:
        try:
            for sid in ids:
                await agent.send(sid, session_id=sid)
            first = [asyncio.ensure_future(agent.compact(session_id=s)) for s in ids[:-4]]
            await until(lambda: compactor.running == MAX_OPERATIONS)
            later: list[asyncio.Future[Any]] = []
            for n, sid in enumerate(ids[-4:], start=1):  # queued one by one: a known order
                later.append(asyncio.ensure_future(agent.compact(session_id=sid)))
                await until(lambda n=n: queued()[1] == n)  # type: ignore[misc]
            stats = agent.host_stats()
            assert (MAX_OPERATIONS, 4, MAX_OPERATIONS) == (
                stats.operations,
                stats.queued_operations,
                stats.max_operations,
            )
            checkpoints = await asyncio.wait_for(agent.list_checkpoints(session_id="s0"), GUARD)
            assert 1 == len(checkpoints)
            later[1].cancel()  # ids[-3]: queued, so it never starts
            await asyncio.wait({later[1]}, timeout=GUARD)
            for k, expected in enumerate([ids[-4], ids[-2], ids[-1]]):  # one slot at a time
                gates[ids[k]].set()
                await until(lambda n=MAX_OPERATIONS + k + 1: len(compactor.started) == n)  # type: ignore[misc]
                assert expected == compactor.started[-1]
            for gate in gates.values():
                gate.set()
            return await asyncio.wait_for(
                asyncio.gather(*first, *later, return_exceptions=True), GUARD
            )
        finally:
            for gate in gates.values():
                gate.set()
            await agent.close()

    results = asyncio.run(main())
    assert MAX_OPERATIONS == compactor.peak
    assert isinstance(results[-3], asyncio.CancelledError)
    assert [False] * (len(ids) - 1) == [
        r.changed for k, r in enumerate(results) if k != len(ids) - 3
    ]
    assert ids[-3] not in compactor.started


def test_close_cancels_queued_operations_and_waits_a_bounded_while_in_all(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() with MAX_OPERATIONS compactors that ignore their cancellation and two more
    compactions queued: every compaction raises OperationCancelledError, the queued ones never
    reach the compactor, and close() waits COMPACTOR_STOP_S for the stuck compactors in all,
    not once for each."""
    import liteagent.sdk._core as core

    monkeypatch.setattr(core, "COMPACTOR_STOP_S", 1.0)
    release = threading.Event()
    compactor = Gated(lambda _: release.wait(GUARD))
    ids = _sessions(MAX_OPERATIONS + 2)
    agent = _async_agent(workdir, compactor, len(ids))

    async def main() -> tuple[list[Any], float]:
        try:
            for sid in ids:
                await agent.send(sid, session_id=sid)
            tasks = [asyncio.ensure_future(agent.compact(session_id=s)) for s in ids]
            await asyncio.to_thread(
                wait_until,
                lambda: (
                    agent._core.operations.stats()[1] == 2
                    and len(compactor.started) == MAX_OPERATIONS
                ),
            )  # (an admitted compaction reaches its compactor a moment after it starts)
            started = time.monotonic()
            await asyncio.wait_for(agent.close(), GUARD)
            took = time.monotonic() - started
            return await asyncio.gather(*tasks, return_exceptions=True), took
        finally:
            release.set()

    results, took = asyncio.run(main())
    wait_until(lambda: not pykka.ActorRegistry.get_by_class(CompactorActor))  # released: they end
    assert [OperationCancelledError] * len(ids) == [type(r) for r in results]
    assert sorted(ids[:MAX_OPERATIONS]) == sorted(compactor.started)
    assert took < MAX_OPERATIONS  # 1 s in all; one second for each would be 8


def test_max_operations_bounds_the_operations_at_once(workdir: Path) -> None:
    """create_async_lite_agent(max_operations=2): two compactions run at once, the others
    wait; every one completes; host_stats shows the bound. Zero or a non-int is refused."""
    release = threading.Event()
    compactor = Gated(lambda _: release.wait(GUARD))
    ids = _sessions(5)
    agent = _async_agent(workdir, compactor, len(ids), max_operations=2)

    async def main() -> list[Any]:
        try:
            for sid in ids:
                await agent.send(sid, session_id=sid)
            tasks = [asyncio.ensure_future(agent.compact(session_id=s)) for s in ids]
            await asyncio.to_thread(wait_until, lambda: agent.host_stats().queued_operations == 3)
            assert (2, 2) == (agent.host_stats().operations, agent.host_stats().max_operations)
            release.set()
            return await asyncio.wait_for(asyncio.gather(*tasks), GUARD)
        finally:
            release.set()
            await agent.close()

    assert [False] * len(ids) == [r.changed for r in asyncio.run(main())]
    assert 2 == compactor.peak
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidArgumentError, match="max_operations"):
            create_lite_agent(
                model=scripted([]),
                model_name="m",
                workdir=workdir,
                checkpointer=memory_checkpointer(),
                max_operations=bad,
            )


# -- the pool itself --------------------------------------------------------------------------


@pytest.fixture
def pool() -> Iterator[OperationPool]:
    p = OperationPool("test-ops", limit=2, idle_s=0.2)
    yield p
    p.close(GUARD)


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_the_pool_runs_queued_jobs_in_order(pool: OperationPool) -> None:
    """With every thread busy, jobs wait and run in the order they came."""
    release = threading.Event()
    done: list[int] = []
    finished = threading.Semaphore(0)

    def job(k: int) -> None:
        if k < 2:
            release.wait(GUARD)
        done.append(k)
        finished.release()

    for k in range(8):
        pool.run(partial(job, k))
    assert (2, 6) == pool.stats()
    release.set()
    for _ in range(8):
        assert finished.acquire(timeout=GUARD)
    assert list(range(2, 8)) == [k for k in done if k >= 2]


def test_idle_threads_end(pool: OperationPool) -> None:
    """A thread left without a job for idle_s ends: an idle agent returns to its baseline."""
    ran = threading.Event()
    pool.run(ran.set)
    assert ran.wait(GUARD)
    wait_until(lambda: pool.stats() == (0, 0))
    wait_until(lambda: not _threads("test-ops-"))


def test_an_idle_thread_woken_meanwhile_still_ends_after_idle_s(pool: OperationPool) -> None:
    """A thread's idle time counts from its last job, however often it is woken without a
    job meanwhile (as every thread that ends wakes the others): poked every 0.05 s, a thread
    with idle_s 0.2 still ends, long before the pokes stop (each poke restarted its wait)."""
    ran = threading.Event()
    pool.run(ran.set)
    assert ran.wait(GUARD)
    ended_while_poked = False
    for _ in range(60):  # 3 s of pokes, 15 times idle_s
        with pool._cond:
            pool._cond.notify_all()
        if not _threads("test-ops-"):
            ended_while_poked = True
            break
        time.sleep(0.05)
    assert ended_while_poked


def test_a_job_answers_its_caller_after_it_stops_counting_as_running(
    pool: OperationPool,
) -> None:
    """What a job returns (callable) runs once the job no longer counts in load(): a caller
    answered there reads no job running."""
    seen: list[tuple[int, int]] = []
    answered = threading.Event()

    def answer() -> None:
        seen.append(pool.load())
        answered.set()

    def job() -> Callable[[], None]:
        seen.append(pool.load())
        return answer

    pool.run(job)
    assert answered.wait(GUARD)
    assert [(1, 0), (0, 0)] == seen


def test_operations_are_not_counted_once_awaited(workdir: Path) -> None:
    """host_stats().operations is 0 right after each awaited operation returns (one after
    another, nothing else running)."""

    async def main() -> list[int]:
        counts = []
        async with create_async_lite_agent(
            model=scripted([]), model_name="m", workdir=workdir, checkpointer=memory_checkpointer()
        ) as agent:
            for _ in range(50):
                await agent.compact(session_id="s")
                stats = agent.host_stats()
                counts.append(stats.operations + stats.queued_operations)
        return counts

    assert [0] * 50 == asyncio.run(main())


def test_close_waits_for_the_queued_jobs_and_joins_the_threads() -> None:
    """close() lets the queued jobs run, then no thread of the pool is left."""
    pool = OperationPool("test-close", limit=1, idle_s=60)
    done: list[int] = []

    def job(k: int) -> None:
        time.sleep(0.01)
        done.append(k)

    for k in range(5):
        pool.run(partial(job, k))
    pool.close(GUARD)
    assert [0, 1, 2, 3, 4] == done
    assert [] == _threads("test-close-")


def test_a_job_no_thread_can_run_is_refused(
    pool: OperationPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When its thread cannot start (the process is out of threads), run() raises and the job
    is not left in the queue, where nothing would ever run it."""
    real = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("test-ops-"):
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(RuntimeError):
        pool.run(lambda: None)
    assert (0, 0) == pool.stats()


def test_an_operation_without_a_thread_fails_with_host_saturated(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async compaction when no thread can start, for the operation or for its compactor:
    HostSaturatedError (a LiteAgentError), nothing recorded; once threads start again, the
    same compaction runs."""
    compactor = Gated(lambda _: None)
    cp = memory_checkpointer()
    agent = create_async_lite_agent(
        model=scripted([reply("ok")]),
        model_name="m",
        workdir=workdir,
        checkpointer=cp,
        compactor=compactor,
    )
    real = threading.Thread.start
    refused: list[str] = []

    def start(self: threading.Thread) -> None:
        if any(self.name.startswith(p) for p in refused):
            raise RuntimeError("can't start new thread")
        real(self)

    async def main() -> list[Any]:
        try:
            await agent.send("x", session_id="s")
            head = cp.head("s")
            monkeypatch.setattr(threading.Thread, "start", start)
            errors = []
            for prefix in (f"{agent._core.name}-op-", "CompactorActor"):
                refused[:] = [prefix]
                with pytest.raises(HostSaturatedError) as caught:
                    await asyncio.wait_for(agent.compact(session_id="s"), GUARD)
                errors.append(str(caught.value))
                assert head == cp.head("s")
            refused.clear()
            assert not (await asyncio.wait_for(agent.compact(session_id="s"), GUARD)).changed
            return errors
        finally:
            refused.clear()
            await agent.close()

    errors = asyncio.run(main())
    assert all("thread" in e for e in errors)
    assert ["x"] == compactor.started  # once: the refused compactions never reached it


def test_an_executor_without_a_thread_is_not_mistaken_for_a_closed_agent(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking agent's executor starts its first thread at its first job: when none can
    start, iter_compact raises HostSaturatedError (the agent is open, and works once threads
    start again), not AgentClosedError."""
    compactor = Gated(lambda _: None)
    with create_lite_agent(
        model=scripted([reply("ok")]),
        model_name="m",
        workdir=workdir,
        checkpointer=memory_checkpointer(),
        compactor=compactor,
    ) as agent:
        agent.send("x", session_id="s")
        real = threading.Thread.start
        prefix = f"{agent._core.name}-pool"

        def start(self: threading.Thread) -> None:
            if self.name.startswith(prefix):
                raise RuntimeError("can't start new thread")
            real(self)

        monkeypatch.setattr(threading.Thread, "start", start)
        with pytest.raises(HostSaturatedError, match="no thread"):
            agent.iter_compact(session_id="s")
        monkeypatch.setattr(threading.Thread, "start", real)
        assert [] == [p for p in agent.iter_compact(session_id="s") if p.phase == "error"]
    assert ["x"] == compactor.started


def test_a_job_that_raises_does_not_cost_the_pool_its_thread(pool: OperationPool) -> None:
    """A job raising (even a BaseException) is logged; its thread serves the next jobs, and
    the pool still counts it right (the next job runs at once, not never)."""

    def boom() -> None:
        raise KeyboardInterrupt

    ran = threading.Event()
    for _ in range(pool.limit * 2):
        pool.run(boom)
    pool.run(ran.set)
    assert ran.wait(GUARD)
    wait_until(lambda: pool.load() == (0, 0))


def test_a_restore_does_not_wait_for_an_idle_compaction_queued_behind_it(
    tmp_path: Path,
) -> None:
    """A restore queued on a full operation pool, then an idle compaction of the same session
    queued behind it: the restore, once it runs, cancels the queued compaction and goes on. It
    waited up to 30 s for that compaction to stop, which could not start before the restore
    gave its place up."""
    slow = Gated(lambda name: time.sleep(1.0))

    async def main() -> float:
        async with create_async_lite_agent(
            model=scripted([reply("one"), reply("two"), reply("three")]),
            model_name="m",
            workdir=tmp_path,
            checkpointer=memory_checkpointer(),
            compactor=slow,
            max_operations=1,
            context={"idle_compact_after": 0.2},
        ) as agent:
            await agent.send("hello", session_id="x")
            await agent.send("first", session_id="s")
            await agent.send("second", session_id="s")
            seq = (await agent.list_checkpoints("s"))[-1].seq
            start = time.monotonic()
            busy = asyncio.create_task(agent.compact(session_id="x"))  # the pool's one place
            await asyncio.sleep(0.05)
            restore = asyncio.create_task(agent.restore("s", seq))  # queued behind it, and
            await busy  # the idle compaction of "s", due at 0.2 s, queued behind the restore
            await restore
            assert ["hello"] == slow.started
            return time.monotonic() - start

    took = asyncio.run(asyncio.wait_for(main(), 120))
    assert took < 20, took  # a hang guard: the stall this prevents lasted 30 s


def test_a_task_following_iter_compact_cancelled_twice_leaves_no_unretrieved_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A task iterating ``AsyncLiteAgent.iter_compact`` cancelled twice (a TaskGroup, a
    shutdown): the compaction's outcome is retrieved; asyncio logged "Future exception was
    never retrieved" at ERROR, with a traceback."""

    def stops_slowly(name: str, cancel: CancelToken) -> None:
        gate = threading.Event()
        cancel.on_cancel(gate.set)
        gate.wait(10)
        time.sleep(0.2)  # takes a moment to stop
        cancel.raise_if_cancelled()

    async def main() -> None:
        async with create_async_lite_agent(
            model=scripted([reply("hello")]),
            model_name="m",
            workdir=tmp_path,
            checkpointer=memory_checkpointer(),
            compactor=Gated(stops_slowly, with_cancel=True),
        ) as agent:
            await agent.send("hello", session_id="s")

            async def follow() -> None:
                async for _ in agent.iter_compact(session_id="s"):
                    pass

            task = asyncio.create_task(follow())
            await asyncio.sleep(0.3)
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(1)  # the compaction ends meanwhile
            gc.collect()
            await asyncio.sleep(0.1)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(asyncio.wait_for(main(), 60))
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
