"""A randomized adversarial mix of operations over many sessions hosted in one process.

A seeded random plan drives ``create_async_lite_agent`` / ``create_lite_agent`` with a tiny
``max_live_sessions`` and a short ``idle_timeout_s`` on the real backends (memory, file,
SQLite): sends (some cancelled by their token or by cancelling the awaiting task), compactions,
checkpoints with restores and undos, forks, deletes, session listings, and ``close()`` while
work is in flight. Properties:

- every call returns or raises a :class:`LiteAgentError` (a caller's own task cancellation
  excepted), and none hangs: every wait is bounded;
- after ``close()`` no thread the agent started remains (a short bounded wait);
- afterwards every session's log folds; an answered send's prompt is in its session's log
  exactly once (sessions no restore, undo or delete touched) or at most once (the others); a
  send refused with AgentBusyError or HostSaturatedError left its prompt in no log, and one
  that raised OperationCancelledError left it at most once, with the aborted turn recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_daemon_api import _is_prompt

from liteagent.context import Compactor, CompactResult, estimate_tokens
from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    fold,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.types import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    TurnAborted,
    Usage,
    UserPrompt,
)
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import (
    AgentBusyError,
    AgentClosedError,
    AsyncLiteAgent,
    CancelToken,
    HostSaturatedError,
    LiteAgent,
    LiteAgentError,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import bash, write_file

BOUND = 60.0  # the longest any one call may take before it counts as a hang
THREADS_GONE = 10.0  # how long close() may leave its threads ending


# -- the model, the compactor ---------------------------------------------------------------------


def _prompt_text(request: ModelRequest) -> str | None:
    last = request.messages[-1]
    if any(isinstance(b, ToolResultBlock) for b in last.content):
        return None
    return " ".join(b.text for b in last.content if isinstance(b, TextBlock))


class Model:
    """A prompt gets one write_file call to ``<prompt>.txt``, its result gets "ok"; each call
    sleeps ``sleep`` seconds (releasing the GIL as an HTTP call would)."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
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
        name = prompt.split()[-1] if prompt else "x"
        if name.startswith("bg-"):  # a short background command, which keeps the slot
            command = {"command": "sleep 0.03", "run_in_background": True}
            call = ToolUseBlock(f"toolu_{n}", "bash", command)
        else:
            call = ToolUseBlock(f"toolu_{n}", "write_file", {"path": f"{name}.txt", "content": "x"})
        return AssistantMessage(content=(call,), stop_reason="tool_use")


class KeepLast(Compactor):
    """Keeps a summary line and the last prompt with what follows it (a deterministic
    compactor, no model call)."""

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        before = estimate_tokens(messages)
        if len(messages) <= 3:
            return CompactResult(
                messages=tuple(messages), changed=False, tokens_before=before, tokens_after=before
            )
        last = max(i for i, m in enumerate(messages) if _is_prompt(m))  # whole pairs only
        kept = (Message("user", (TextBlock("[summary]"),)), *messages[last:])
        return CompactResult(
            messages=kept, changed=True, tokens_before=before, tokens_after=estimate_tokens(kept)
        )


# -- the record of a run --------------------------------------------------------------------------


@dataclass
class Outcome:
    """One call: its operation, session, prompt (sends), and how it ended: ``"ok"``, a library
    error, ``"task-cancelled"`` (the test cancelled the awaiting task), ``"hang"`` or any other
    exception (a bug)."""

    op: str
    session: str
    prompt: str | None = None
    result: Any = None
    error: BaseException | None = None
    ended: str = "pending"


@dataclass
class Run:
    """What a mix did: every call's outcome, the sessions some operation rewrote."""

    outcomes: list[Outcome] = field(default_factory=list)
    rewritten: set[str] = field(default_factory=set)
    forks: set[str] = field(default_factory=set)
    prompts: Iterator[int] = field(default_factory=itertools.count)
    closing_at: float = math.inf
    firing: set[asyncio.Future[None]] = field(default_factory=set)  # tokens fired later

    def prompt(self, sid: str, background: bool = False) -> str:
        return f"say {'bg-' if background else ''}{sid}-p{next(self.prompts)}"


def _ended(outcome: Outcome, error: BaseException | None, result: Any = None) -> None:
    outcome.result = result
    outcome.error = error
    if error is None:
        outcome.ended = "ok"
    elif isinstance(error, LiteAgentError):
        outcome.ended = type(error).__name__
    else:
        outcome.ended = f"BUG {type(error).__name__}: {error}"


# -- the plan -------------------------------------------------------------------------------------

OPS = (
    ("send", 10),
    ("send_token", 3),
    ("send_task", 2),
    ("send_bg", 2),
    ("compact", 2),
    ("compact_cancel", 1),
    ("restore", 2),
    ("restore_cancel", 1),
    ("undo", 1),
    ("fork", 1),
    ("delete", 1),
    ("list", 1),
)
_NAMES = [name for name, _ in OPS]
_WEIGHTS = [weight for _, weight in OPS]
TRAVEL = frozenset({"restore", "restore_cancel", "undo", "delete"})


def _pick(rng: random.Random, sessions: int) -> tuple[str, str]:
    """An operation and its session: restores, undos and deletes go to the ``t`` sessions
    only, so the ``p`` sessions keep every answered prompt."""
    op = rng.choices(_NAMES, _WEIGHTS)[0]
    if op in TRAVEL:
        return op, f"t{rng.randrange(max(1, sessions // 2))}"
    kind = rng.choice("pt")
    return op, f"{kind}{rng.randrange(max(1, sessions // 2))}"


# -- the asyncio driver ---------------------------------------------------------------------------


async def _bounded(
    outcome: Outcome, work: Coroutine[Any, Any, Any], cancel_after: float | None = None
) -> None:
    """Run ``work`` as a task, cancel the task after ``cancel_after`` seconds if given, and
    record how it ended (a hang after BOUND)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    if cancel_after is not None:
        await asyncio.wait({task}, timeout=cancel_after)
        if not task.done():
            task.cancel()
            cancelled = True
    await asyncio.wait({task}, timeout=BOUND)
    if not task.done():
        outcome.ended = "hang"
        task.cancel()
        return
    if task.cancelled():
        outcome.ended = "task-cancelled" if cancelled else "BUG CancelledError"
        return
    _ended(outcome, task.exception(), None if task.exception() else task.result())


async def _fire_later(token: CancelToken, delay: float) -> None:
    await asyncio.sleep(delay)
    token.cancel("the mix cancelled it")


async def _async_op(agent: AsyncLiteAgent, run: Run, rng: random.Random, sessions: int) -> None:
    op, sid = _pick(rng, sessions)
    outcome = Outcome(op, sid)
    run.outcomes.append(outcome)
    delay = rng.choice([0.0, 0.001, 0.003, 0.01, 0.03])
    if op.startswith("send"):
        outcome.prompt = prompt = run.prompt(sid, op == "send_bg")
        token = CancelToken()
        if op == "send_token":
            run.firing.add(asyncio.ensure_future(_fire_later(token, delay)))
        await _bounded(
            outcome,
            agent.send(prompt, session_id=sid, cancel=token),
            delay if op == "send_task" else None,
        )
    elif op.startswith("compact"):
        token = CancelToken()
        if op == "compact_cancel" and rng.random() < 0.5:
            run.firing.add(asyncio.ensure_future(_fire_later(token, delay)))
            await _bounded(outcome, agent.compact(session_id=sid, cancel=token))
        else:
            await _bounded(
                outcome,
                agent.compact(session_id=sid),
                delay if op == "compact_cancel" else None,
            )
    elif op.startswith("restore"):
        run.rewritten.add(sid)
        token = CancelToken()
        by_token = op == "restore_cancel" and rng.random() < 0.5

        async def restore() -> Any:
            checkpoints = await agent.list_checkpoints(sid)
            if not checkpoints:
                return None
            seq = rng.choice(checkpoints).seq
            if by_token:
                run.firing.add(asyncio.ensure_future(_fire_later(token, delay)))
            return await agent.restore(sid, seq, files=rng.random() < 0.5, cancel=token)

        await _bounded(
            outcome, restore(), delay if op == "restore_cancel" and not by_token else None
        )
    elif op == "undo":
        run.rewritten.add(sid)
        await _bounded(outcome, agent.undo_restore(sid))
    elif op == "fork":

        async def fork() -> Any:
            checkpoints = await agent.list_checkpoints(sid)
            if not checkpoints:
                return None
            new = await agent.fork(sid, rng.choice(checkpoints).seq)
            run.forks.add(new)
            return new

        await _bounded(outcome, fork())
    elif op == "delete":
        run.rewritten.add(sid)
        await _bounded(outcome, agent.delete_session(sid))
    else:
        await _bounded(outcome, agent.list_sessions())


async def _watch(agent: AsyncLiteAgent, session_id: str | None) -> int:
    """Read a subscription (every session's events, or one's) until the agent closes it."""
    count = 0
    async with agent.subscribe(8, session_id=session_id) as events:
        async for _ in events:
            count += 1
    return count


async def _async_mix(
    agent: AsyncLiteAgent, run: Run, seed: int, *, sessions: int, ops: int, width: int
) -> None:
    """``ops`` random operations, at most ``width`` at once; ``close()`` while the last ones
    are in flight."""
    rng = random.Random(seed)
    pending: set[asyncio.Future[Any]] = set()
    watchers = [asyncio.ensure_future(_watch(agent, sid)) for sid in (None, "p0", "t0")]
    for n in range(ops):
        op_rng = random.Random(rng.random())
        pending.add(asyncio.ensure_future(_async_op(agent, run, op_rng, sessions)))
        if len(pending) >= width:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if n % 7 == 0:
            await asyncio.sleep(rng.choice([0.0, 0.002, 0.02]))
        if n == ops // 2:  # quiescent: nothing runs, waits or stays live past the idle timeout
            _, late = await asyncio.wait(pending, timeout=BOUND)
            assert not late, f"{len(late)} operations hang"
            pending = set()
            await _settled_async(agent)
    await asyncio.sleep(rng.choice([0.0, 0.005, 0.02]))
    run.closing_at = time.monotonic()
    closing = asyncio.ensure_future(agent.close())
    _, late = await asyncio.wait({closing, *pending}, timeout=BOUND * 2)
    assert not late, f"{len(late)} operations or close() still running"
    closing.result()
    await agent.close()  # a second close() is a no-op
    _, late = await asyncio.wait(watchers, timeout=BOUND)
    assert not late, "a subscription did not end with the agent"
    assert [] == [w.exception() for w in watchers if w.exception() is not None]
    late_calls = [agent.send("late", session_id="p0"), agent.list_sessions()]
    for call in late_calls:
        with pytest.raises(AgentClosedError):
            await asyncio.wait_for(call, BOUND)


def _stats_problems(agent: AsyncLiteAgent | LiteAgent) -> str | None:
    """What is wrong with the host's load once nothing runs and the idle timeout passed."""
    stats = agent.host_stats()
    if stats.running or stats.queued:
        return f"work left after every call returned: {stats}"
    if stats.live or stats.stopping:
        return f"sessions not passivated: {stats}"
    return None


async def _settled_async(agent: AsyncLiteAgent) -> None:
    deadline = time.monotonic() + THREADS_GONE
    while (problem := _stats_problems(agent)) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert problem is None, problem


def _settled(agent: LiteAgent) -> None:
    deadline = time.monotonic() + THREADS_GONE
    while (problem := _stats_problems(agent)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert problem is None, problem


# -- the blocking driver --------------------------------------------------------------------------


def _sync_op(
    agent: LiteAgent, run: Run, rng: random.Random, sessions: int, timers: list[Any]
) -> Callable[[], None]:
    """One random operation as a function for a thread of the test."""
    op, sid = _pick(rng, sessions)
    op = {"send_task": "send_token"}.get(op, op)
    outcome = Outcome(op, sid)
    run.outcomes.append(outcome)
    if op in TRAVEL:
        run.rewritten.add(sid)
    prompt = outcome.prompt = run.prompt(sid, op == "send_bg") if op.startswith("send") else None
    token = CancelToken()
    if op in ("send_token", "compact_cancel", "restore_cancel"):
        timers.append((time.monotonic() + rng.choice([0.0, 0.001, 0.005, 0.02]), token))
    files = rng.random() < 0.5
    pick = random.Random(rng.random())

    def call() -> Any:
        if op.startswith("send"):
            assert prompt is not None
            return agent.send(prompt, session_id=sid, cancel=token)
        if op.startswith("compact"):
            return agent.compact(session_id=sid, cancel=token)
        if op == "undo":
            return agent.undo_restore(sid)
        if op == "delete":
            return agent.delete_session(sid)
        if op == "list":
            return agent.list_sessions()
        checkpoints = agent.list_checkpoints(sid)
        if not checkpoints:
            return None
        seq = pick.choice(checkpoints).seq
        if op.startswith("restore"):
            return agent.restore(sid, seq, files=files, cancel=token)
        new = agent.fork(sid, seq)
        run.forks.add(new)
        return new

    def body() -> None:
        try:
            result = call()
        except BaseException as e:  # noqa: BLE001 -- recorded, checked afterwards
            _ended(outcome, e)
        else:
            _ended(outcome, None, result)

    return body


def _sync_mix(
    agent: LiteAgent, run: Run, seed: int, *, sessions: int, ops: int, width: int
) -> None:
    """``ops`` random operations on threads of the test, at most ``width`` at once, tokens
    fired by this thread; ``close()`` while the last ones are in flight."""
    rng = random.Random(seed)
    timers: list[tuple[float, CancelToken]] = []
    subscription = agent.subscribe(8)
    watcher = threading.Thread(target=lambda: sum(1 for _ in subscription), name="mix-op")
    watcher.start()
    threads: list[threading.Thread] = []

    def fire_due() -> None:
        now = time.monotonic()
        for item in [t for t in timers if t[0] <= now]:
            timers.remove(item)
            item[1].cancel("the mix cancelled it")

    for n in range(ops):
        if n == ops // 2:  # quiescent: nothing runs, waits or stays live past the idle timeout
            deadline = time.monotonic() + BOUND
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            assert [] == [t for t in threads if t.is_alive()], "operations hang"
            for _, token in timers:
                token.cancel("the mix cancelled it")
            timers.clear()
            _settled(agent)
        deadline = time.monotonic() + BOUND
        while sum(t.is_alive() for t in threads) >= width:
            fire_due()
            assert time.monotonic() < deadline, "the mix's operations hang"
            time.sleep(0.001)
        body = _sync_op(agent, run, random.Random(rng.random()), sessions, timers)
        thread = threading.Thread(target=body, name="mix-op", daemon=True)
        thread.start()
        threads.append(thread)
        fire_due()
    time.sleep(rng.choice([0.0, 0.005, 0.02]))
    fire_due()
    run.closing_at = time.monotonic()
    agent.close()
    for _, token in timers:
        token.cancel("the mix cancelled it")
    watcher.join(BOUND)
    assert not watcher.is_alive(), "a subscription did not end with the agent"
    deadline = time.monotonic() + BOUND
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert [] == [t for t in threads if t.is_alive()], "operations still running after close()"


# -- the checks -----------------------------------------------------------------------------------


def _agent_threads(baseline: set[threading.Thread]) -> list[str]:
    """The threads started since ``baseline`` that are not the test's own or the
    checkpointer's."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t not in baseline
        and t.name != "mix-op"
        and not t.name.startswith("liteagent-sqlite-lease")
    )


def _threads_gone(baseline: set[threading.Thread]) -> list[str]:
    deadline = time.monotonic() + THREADS_GONE
    while (left := _agent_threads(baseline)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def _logs(cp: Checkpointer) -> dict[str, list[Any]]:
    """Every stored log (sessions, forks, branches), each folded once to prove it folds."""
    logs = {}
    for info in cp.list():
        events = list(cp.read(info.id))
        fold(events)
        logs[info.id] = events
    return logs


def _prompts(events: list[Any]) -> list[str]:
    return [
        b.text
        for e in events
        if isinstance(e.body, UserPrompt)
        for b in e.body.content
        if isinstance(b, TextBlock)
    ]


def check(run: Run, cp: Checkpointer) -> None:
    """The properties of the module docstring (threads are checked by the caller)."""
    bad = [
        (o.op, o.session, o.ended, o.error)
        for o in run.outcomes
        if o.ended == "hang" or o.ended.startswith("BUG") or o.ended == "pending"
    ]
    assert [] == bad
    logs = _logs(cp)
    where: dict[str, list[str]] = {}
    for sid, events in logs.items():
        for p in _prompts(events):
            where.setdefault(p, []).append(sid)
    for o in run.outcomes:
        if o.prompt is None:
            continue
        own = where.get(o.prompt, []).count(o.session)
        elsewhere = [s for s in where.get(o.prompt, []) if s != o.session]
        assert not [s for s in elsewhere if s not in run.forks and "." not in s], (o, elsewhere)
        assert own <= 1, (o, own)
        if o.ended == "ok" and o.session not in run.rewritten:
            assert 1 == own, o
        if isinstance(o.error, (AgentBusyError, HostSaturatedError)):
            assert [] == where.get(o.prompt, []), o
        if own and o.session not in run.rewritten and o.ended != "task-cancelled":
            # the turn's end as the log tells it: aborted exactly when the send failed
            events = logs[o.session]
            at = next(i for i, e in enumerate(events) if o.prompt in _prompts([e]))
            after = [
                e
                for e in events[at + 1 :]
                if isinstance(e.body, TurnAborted)
                or (isinstance(e.body, UserPrompt) and e.body.origin == "user")
            ]
            aborted = bool(after) and isinstance(after[0].body, TurnAborted)
            assert aborted == (o.error is not None), (o, after[:1])


# -- the runs -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _backend(kind: str, tmp_path: Path) -> Iterator[Checkpointer]:
    if kind == "memory":
        cp = memory_checkpointer()
    elif kind == "file":
        cp = file_checkpointer(tmp_path / "sessions")
    else:
        cp = sqlite_checkpointer(tmp_path / "log.db")
    try:
        yield cp
    finally:
        cp.close()


def _mix(
    tmp_path: Path,
    backend: str,
    seed: int,
    *,
    asynchronous: bool,
    sessions: int,
    ops: int,
    width: int,
    max_live: int,
    idle: float | None,
    sleep: float = 0.001,
    idle_compact: float | None = None,
    budget: int | None = None,
) -> Run:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    run = Run()
    model = Model(sleep)
    with _backend(backend, tmp_path) as cp:
        baseline = set(threading.enumerate())
        kw: dict[str, Any] = {
            "model": scripted([model] * (ops * 3 + 10)),
            "model_name": "m",
            "workdir": workdir,
            "tools": [write_file, bash],
            "checkpointer": cp,
            "compactor": KeepLast(),
            "max_live_sessions": max_live,
            "max_queued_sends": rngless_queue(ops),
            "idle_timeout_s": idle,
        }
        if idle_compact is not None:
            kw["context"] = {"idle_compact_after": idle_compact, "budget_tokens": budget}
        if asynchronous:

            async def main() -> None:
                agent = create_async_lite_agent(**kw)
                await _async_mix(agent, run, seed, sessions=sessions, ops=ops, width=width)

            asyncio.run(main())
        else:
            _sync_mix(create_lite_agent(**kw), run, seed, sessions=sessions, ops=ops, width=width)
        assert [] == _threads_gone(baseline)
        check(run, cp)
        check_not_wedged(cp, workdir, max_live)
    return run


def check_not_wedged(cp: Checkpointer, workdir: Path, max_live: int, most: int = 40) -> None:
    """A fresh agent on the store finds no interrupted restore, and a send to each session
    (``most`` of them) is answered: nothing the mix and its close() did wedged one."""
    sids = sorted(i.id for i in cp.list() if "." not in i.id)[:most]
    model = Model(0.0)
    with create_lite_agent(
        model=scripted([model] * (2 * len(sids))),
        model_name="m",
        workdir=workdir,
        tools=[write_file, bash],
        checkpointer=cp,
        max_live_sessions=max_live,
        idle_timeout_s=0.02,
    ) as agent:
        assert [] == [sid for sid in sids if agent.pending_restore(sid) is not None]
        for sid in sids:
            assert "ok" == agent.send(f"after {sid}", session_id=sid).text
            fold(cp.read(sid))


def rngless_queue(ops: int) -> int:
    """A queue bound small enough that some sends are refused in a busy mix."""
    return max(2, ops // 20)


SEEDS = [11, 23, 47]


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", SEEDS)
def test_async_mix(tmp_path: Path, backend: str, seed: int) -> None:
    """A random asyncio mix over 12 sessions, 3 slots, a 20 ms idle timeout."""
    run = _mix(
        tmp_path,
        backend,
        seed,
        asynchronous=True,
        sessions=12,
        ops=60,
        width=8,
        max_live=3,
        idle=0.02,
    )
    assert any(o.ended == "ok" for o in run.outcomes)


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_sync_mix(tmp_path: Path, backend: str, seed: int) -> None:
    """A random blocking mix over 10 sessions, 2 slots, a 20 ms idle timeout."""
    run = _mix(
        tmp_path,
        backend,
        seed,
        asynchronous=False,
        sessions=10,
        ops=40,
        width=6,
        max_live=2,
        idle=0.02,
    )
    assert any(o.ended == "ok" for o in run.outcomes)


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_async_mix_a_thousand_sessions(tmp_path: Path, backend: str) -> None:
    """The asyncio mix over 1,000 sessions, 4 slots, 3,000 operations."""
    _mix(
        tmp_path,
        backend,
        1000,
        asynchronous=True,
        sessions=1000,
        ops=3000,
        width=64,
        max_live=4,
        idle=0.05,
    )


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(20))
def test_sync_mix_many_seeds(tmp_path: Path, seed: int) -> None:
    """The blocking mix on SQLite over many seeds."""
    _mix(
        tmp_path,
        "sqlite",
        seed,
        asynchronous=False,
        sessions=16,
        ops=120,
        width=8,
        max_live=3,
        idle=0.02,
    )
