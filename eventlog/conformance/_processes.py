"""Tests with real OS processes: concurrent writers, and writers killed with SIGKILL.

Child processes start through a ``forkserver`` (preloaded with liteagent), so each costs a fork,
not an interpreter start; their entry points are module-level functions, and the factory they
get must be picklable.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .._errors import CheckpointConflictError
from .._events import StoredEvent, UserPrompt
from ._util import Factory, Settle, prompt, prompts

__all__ = [
    "CrashOutcome",
    "CrashRun",
    "mp_context",
    "reporting_child",
    "run_checks_beside_churn",
    "run_crash_round",
    "run_racing_writers",
    "run_repairs_beside_creation",
    "run_separate_writers",
]

_CTX: Any = None


def mp_context() -> Any:
    """The multiprocessing context used by these tests (forkserver, preloaded)."""
    global _CTX  # noqa: PLW0603 -- one forkserver per test process
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["liteagent.eventlog", "liteagent.eventlog.conformance"])
        _CTX = ctx
    return _CTX


@contextmanager
def reporting_child(target: Callable[..., None], *args: Any) -> Iterator[tuple[Any, Connection]]:
    """Run ``target(*args, conn)`` in a child process, which sends ``"ready"`` on ``conn``
    first and its results later; yield the process and the receiving end once it is ready.
    On the way out the child is waited for (killed after 60 s); check its ``exitcode`` then."""
    ctx = mp_context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, sender))
    proc.start()
    sender.close()
    try:
        assert receiver.poll(60), "the child process did not start"
        assert "ready" == receiver.recv()
        yield proc, receiver
    finally:
        receiver.close()
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()


# -- racing writers --------------------------------------------------------------------------------


def _race_worker(factory: Factory, name: str, count: int, barrier: Any, out: Any) -> None:
    session_id = "race"
    cp = factory()
    try:
        conflicts = 0
        acks: list[int] = []
        head = cp.head(session_id)
        barrier.wait(30)
        for i in range(count):
            while True:
                try:
                    head = cp.append(session_id, prompts(f"{name}:{i}"), expected_head=head)
                    acks.append(head)
                    break
                except CheckpointConflictError:
                    conflicts += 1
                    head = cp.head(session_id)
        out.put((name, conflicts, acks))
    finally:
        cp.close()


def run_racing_writers(
    factory: Factory, processes: int, count: int
) -> tuple[int, dict[str, list[int]]]:
    """Run ``processes`` writers appending ``count`` events each to one session with
    ``expected_head`` and retry. Returns ``(total conflicts, acknowledged seqs per writer)``.

    All writers read the head before a barrier and append right after it, so at least
    ``processes - 1`` conflicts are certain.
    """
    ctx = mp_context()
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(factory, f"p{n}", count, barrier, out))
        for n in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert 0 == p.exitcode, f"writer process failed with exit code {p.exitcode}"
    return sum(r[1] for r in results), {r[0]: r[2] for r in results}


def _separate_worker(factory: Factory, session_id: str, count: int) -> None:
    cp = factory()
    try:
        for i in range(count):
            cp.append(session_id, prompts(f"{session_id}:{i}"))
    finally:
        cp.close()


def run_separate_writers(factory: Factory, processes: int, count: int) -> list[str]:
    """Run ``processes`` writers each appending ``count`` events to its own session; return
    the session ids."""
    ctx = mp_context()
    ids = [f"own{n}" for n in range(processes)]
    procs = [ctx.Process(target=_separate_worker, args=(factory, sid, count)) for sid in ids]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert 0 == p.exitcode, f"writer process failed with exit code {p.exitcode}"
    return ids


def _churn_worker(factory: Factory, seconds: float, conn: Connection) -> None:
    """Append to, truncate, delete and create sessions for ``seconds``; send the count of writes."""
    cp = factory()
    rng = random.Random(7)
    writes = 0
    try:
        conn.send("ready")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or writes < 200:
            sid = f"churn{rng.randrange(4)}"
            roll = rng.random()
            head = cp.head(sid)
            if roll < 0.15 and head:
                cp.truncate(sid, rng.randrange(head + 1))
            elif roll < 0.2:
                cp.delete(sid)
            else:
                cp.append(
                    sid, prompts(*(f"{sid}:{writes}:{i}" for i in range(rng.randrange(1, 4))))
                )
            writes += 1
        conn.send(writes)
    finally:
        cp.close()


def run_checks_beside_churn(factory: Factory, seconds: float) -> tuple[int, int, list[Any]]:
    """Check the store's integrity over and over while another process appends to, truncates,
    deletes and creates sessions; return the checks run, the other process's writes and every
    problem a check reported (none: a history that moves is no damage)."""
    checks = 0
    problems: list[Any] = []
    with reporting_child(_churn_worker, factory, seconds) as (proc, receiver), factory() as cp:
        while not receiver.poll(0) and proc.is_alive():
            problems.extend(cp.check_integrity().problems)
            checks += 1
        problems.extend(
            (sid, why) for sid in (f"churn{n}" for n in range(4)) if (why := cp.damaged(sid))
        )
        writes = receiver.recv()
    assert 0 == proc.exitcode, f"the writer failed with exit code {proc.exitcode}"
    return checks, writes, problems


_PACE_WAIT_S = 5.0  # the longest the creating writer waits for the repairs to catch up


def _creating_worker(
    factory: Factory, sessions: int, current: Any, repairs: Any, conn: Connection
) -> None:
    """Create ``sessions`` sessions one after the other with four appends each, publishing the
    index of the one being created in ``current``; send the acknowledged heads. Before session
    ``i`` it waits (at most ``_PACE_WAIT_S``) until ``repairs`` counts ``i // 3 + 1``, so that a
    loaded machine cannot let the writer finish before the repairs it races have run."""
    cp = factory()
    acked: dict[str, int] = {}
    try:
        conn.send("ready")
        for i in range(sessions):
            deadline = time.monotonic() + _PACE_WAIT_S
            while repairs.value <= i // 3 and time.monotonic() < deadline:
                time.sleep(0.0005)
            current.value = i
            time.sleep(0.002)  # the repairs look at the session before it is created, too
            sid = f"new{i}"
            for n in range(4):
                acked[sid] = cp.append(sid, prompts(f"{sid}:{n}"))
        conn.send(acked)
    finally:
        cp.close()


def run_repairs_beside_creation(
    factory: Factory, sessions: int
) -> tuple[int, list[Any], dict[str, int], dict[str, int]]:
    """Repair, over and over, the session another process is creating and appending to;
    return the repairs run, the reports of those that found something to repair (none: the
    sessions are healthy), the heads the writer was acknowledged and the heads now."""
    current = mp_context().Value("i", 0)
    done = mp_context().Value("i", 0)
    repairs = 0
    repaired: list[Any] = []
    with (
        reporting_child(_creating_worker, factory, sessions, current, done) as (proc, receiver),
        factory() as cp,
    ):
        while not receiver.poll(0) and proc.is_alive():
            report = cp.repair(f"new{current.value}")
            repairs += 1
            done.value = repairs
            if report.repaired:
                repaired.append(report)
        acked = receiver.recv()
        heads = {sid: cp.head(sid) for sid in acked}
    assert 0 == proc.exitcode, f"the writer failed with exit code {proc.exitcode}"
    return repairs, repaired, acked, heads


# -- SIGKILL ---------------------------------------------------------------------------------------


def _batch_texts(batch_id: int, n: int, size: int) -> list[str]:
    pad = "x" * size
    return [f"{batch_id}:{i}:{n}:{pad}" for i in range(n)]


def _crash_worker(factory: Factory, session_id: str, seed: int, conn: Connection) -> None:
    """Append and truncate forever, announcing each operation before and after it."""
    rng = random.Random(seed)
    cp = factory()
    head = cp.head(session_id)
    conn.send(("ready", head))
    batch = seed * 100_000
    while True:
        big = head > 400  # keep the log bounded, so a long soak stays fast to verify
        if head > 40 and rng.random() < (0.5 if big else 0.12):
            to = rng.randint(0, 200) if big else rng.randint(max(0, head - 60), head)
            conn.send(("truncate?", to))
            head = cp.truncate(session_id, to)
            conn.send(("truncated", to))
            continue
        n = rng.choice([1, 1, 1, 3, 10, 50])
        size = rng.choice([20, 300, 3000, 30_000]) if n < 10 else rng.choice([20, 300, 40_000])
        batch += 1
        conn.send(("append?", batch, n, size))
        head = cp.append(session_id, [prompt(t) for t in _batch_texts(batch, n, size)])
        conn.send(("appended", batch, head))


@dataclass
class CrashRun:
    """What one killed writer acknowledged, and what it was doing when it died."""

    acked: list[str]
    pending: tuple[Any, ...] | None
    messages: int


def _replay(model: list[str], messages: list[tuple[Any, ...]]) -> CrashRun:
    acked = list(model)
    pending: tuple[Any, ...] | None = None
    for msg in messages:
        tag = msg[0]
        if tag in ("append?", "truncate?"):
            pending = msg
        elif tag == "appended":
            assert pending is not None
            assert pending[0] == "append?"
            acked.extend(_batch_texts(pending[1], pending[2], pending[3]))
            assert msg[2] == len(acked), "an acknowledged head disagrees with the model"
            pending = None
        elif tag == "truncated":
            del acked[msg[1] :]
            pending = None
    return CrashRun(acked, pending, len(messages))


def _allowed_states(run: CrashRun) -> list[list[str]]:
    """The logs a correct backend may hold: everything acknowledged, plus or minus the one
    operation in flight at the kill."""
    states = [run.acked]
    if run.pending is not None and run.pending[0] == "append?":
        states.append(run.acked + _batch_texts(run.pending[1], run.pending[2], run.pending[3]))
    elif run.pending is not None and run.pending[0] == "truncate?":
        states.append(run.acked[: run.pending[1]])
    return states


def _texts_of(events: list[StoredEvent]) -> list[str]:
    out = []
    for e in events:
        assert isinstance(e.body, UserPrompt)
        out.append(e.body.text)
    return out


@dataclass
class CrashOutcome:
    """The log after one kill, and what the kill interrupted."""

    log: list[str]
    in_flight: str | None  # "append" or "truncate" when the kill hit an operation
    applied: bool  # whether that operation's effect is in the log
    torn_tail: bool  # whether check_integrity reported a torn tail before any repair


def _killed_writer(
    factory: Factory, seed: int, max_delay: float, settle: Settle | None
) -> list[tuple[Any, ...]]:
    """Start a writer, SIGKILL it after a random delay, wait for the store to settle; return
    every message the writer sent."""
    ctx = mp_context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_crash_worker, args=(factory, "crash", seed, sender))
    proc.start()
    sender.close()
    messages: list[tuple[Any, ...]] = []
    try:
        if not receiver.poll(60):
            raise AssertionError("the writer process did not start")
        messages.append(receiver.recv())
        deadline = time.monotonic() + random.Random(seed).uniform(0.0, max_delay)
        while time.monotonic() < deadline:
            if receiver.poll(max(0.0, deadline - time.monotonic())):
                messages.append(receiver.recv())
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        while True:
            try:
                messages.append(receiver.recv())
            except EOFError:
                break
    finally:
        receiver.close()
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    assert -signal.SIGKILL == proc.exitcode, f"the writer ended with {proc.exitcode}, not killed"
    if settle is not None:
        settle(proc.pid)
    return messages


def run_crash_round(
    factory: Factory, model: list[str], seed: int, max_delay: float, settle: Settle | None = None
) -> CrashOutcome:
    """Start a writer, SIGKILL it after a random delay, wait for the store to ``settle``
    (:meth:`KillSettling.settle_after_kill`), then check the log and return it.

    Checks: the log opens and reads; it equals everything acknowledged, or that plus the one
    batch in flight (never part of a batch), or that minus the one truncate in flight; seqs are
    contiguous and the head is the last seq; and a new append works on top.
    """
    messages = _killed_writer(factory, seed, max_delay, settle)
    assert messages[0] == ("ready", len(model))
    run = _replay(model, messages[1:])
    cp = factory()
    try:
        report = cp.check_integrity()
        torn = any(p.kind == "torn_tail" for p in report.problems)
        assert report.ok or all(p.kind in ("torn_tail", "leftover") for p in report.problems), (
            report.detail
        )
        events = list(cp.read("crash"))
        actual = _texts_of(events)
        assert list(range(1, len(events) + 1)) == [e.seq for e in events]
        assert len(events) == cp.head("crash")
        allowed = _allowed_states(run)
        assert actual in allowed, (
            f"after the kill the log has {len(actual)} events; allowed: "
            f"{[len(s) for s in allowed]} (pending: {run.pending and run.pending[:3]})"
        )
        assert len(actual) + 1 == cp.append("crash", [prompt("after-kill")])
        cp.truncate("crash", len(actual))
        assert cp.check_integrity().ok
    finally:
        cp.close()
    in_flight = None if run.pending is None else str(run.pending[0]).rstrip("?")
    return CrashOutcome(actual, in_flight, actual != run.acked, torn)
