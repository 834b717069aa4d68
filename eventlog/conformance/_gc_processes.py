"""The process side of the garbage-collection tests: a writer appending while this process
collects, and collectors killed with SIGKILL (children of the suite's forkserver)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection

from .._events import FileSnapshot
from .._gc import collect_garbage, referenced_blobs
from ._processes import mp_context, reporting_child
from ._util import Factory, Settle, prompts

__all__ = ["GARBAGE", "run_gc_killed", "run_gc_racing_appends"]

_POOL = 400  # contents the writer cycles through: each comes back after 400 appends
_PER_SESSION = 20
_MIN_APPENDS = 2 * _POOL  # every content comes back at least once, after its session was deleted
GARBAGE = 600  # unreferenced blobs per round of the kill test (SQLite deletes 100 a commit)


def _snapshot(ref: str, call: str) -> FileSnapshot:
    return FileSnapshot(path="a.txt", tool_call_id=call, pre_image=ref, pre_hash=ref[7:])


def _appender(factory: Factory, seconds: float, conn: Connection) -> None:
    """Put a blob and append an event referencing it, in a new session every 20 events;
    delete the session before last, so its blobs become garbage until they come back. Runs for
    ``seconds`` and at least until every content has come back once (a slow disk or a busy
    machine makes the appends slower, never the race shorter)."""
    cp = factory()
    try:
        conn.send("ready")
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline or i < _MIN_APPENDS:
            n = i // _PER_SESSION
            ref = cp.blobs.put(f"content {i % _POOL}\n".encode() * 20)
            cp.append(f"w{n}", [_snapshot(ref, f"t{i}")])
            if i % _PER_SESSION == 0 and n >= 2:
                cp.delete(f"w{n - 2}")
            i += 1
            time.sleep(0.002)
        conn.send(("done", i))
    finally:
        cp.close()


def _check(factory: Factory) -> None:
    cp = factory()
    try:
        for info in cp.list():
            for ref in referenced_blobs(cp, info.id):
                assert cp.blobs.has(ref), f"{info.id} references {ref}, which is gone"
    finally:
        cp.close()


def run_gc_racing_appends(factory: Factory, seconds: float, grace: float) -> int:
    """Run the writer for ``seconds`` while collecting with ``grace`` over and over, checking
    after each collection that every referenced blob is there; return how many blobs the
    collections deleted."""
    with factory():
        pass  # create the store once, before the race
    deleted = 0
    with reporting_child(_appender, factory, seconds) as (proc, receiver):
        with factory() as cp:
            while proc.is_alive() and not receiver.poll(0):
                deleted += collect_garbage(cp, grace=grace).deleted
                _check(factory)
        tag, appended = receiver.recv()
        assert "done" == tag
        assert appended > _POOL, "the writer did not come round to old contents again"
        print(f"{appended} appends; {deleted} blobs deleted by the collections meanwhile")
    assert 0 == proc.exitcode, f"the writer failed with exit code {proc.exitcode}"
    return deleted


def _collector(factory: Factory, conn: Connection) -> None:
    """Collect, saying when the deletes start (the moment the kills aim at) and end."""
    cp = factory()
    blobs = cp.blobs
    real = blobs.delete_blobs

    def announced(refs: Iterable[str], *, written_before: float) -> list[str]:
        conn.send("deleting")
        return real(refs, written_before=written_before)

    blobs.delete_blobs = announced  # type: ignore[method-assign]
    conn.send("ready")
    collect_garbage(cp, grace=0)
    conn.send("done")
    time.sleep(300)  # to be killed


def _garbage(factory: Factory, label: str, count: int) -> set[str]:
    cp = factory()
    try:
        return {cp.blobs.put(f"{label} {i}\n".encode() * 50) for i in range(count)}
    finally:
        cp.close()


def _killed_collection(factory: Factory, delay: float | None, settle: Settle | None) -> float:
    """Start a collector and SIGKILL it ``delay`` seconds after its deletes started
    (``None``: once it is done); return how long its deletes ran."""
    ctx = mp_context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_collector, args=(factory, sender))
    proc.start()
    sender.close()
    try:
        assert receiver.poll(60), "the collector did not start"
        assert "ready" == receiver.recv()
        assert receiver.poll(120), "the collector did not start deleting"
        assert "deleting" == receiver.recv()
        start = time.monotonic()
        if delay is None:
            assert receiver.poll(120), "the collector did not finish"
            assert "done" == receiver.recv()
        else:
            receiver.poll(delay)
        ran = time.monotonic() - start
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    finally:
        receiver.close()
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    assert -signal.SIGKILL == proc.exitcode, f"the collector ended with {proc.exitcode}"
    if settle is not None:
        settle(proc.pid)
    return ran


def run_gc_killed(
    factory: Factory, rounds: int, seed: int, settle: Settle | None = None
) -> list[int]:
    """A store with referenced blobs and, each round, 600 new unreferenced ones; a collector
    killed at a random moment of its deletes (the first round runs to the end, to time them).
    After each kill every referenced blob reads back; the blobs the kill left set aside are put
    back, and a collection in this process then leaves exactly the referenced ones.

    The kill moments narrow down on the deletes: a kill that came before any delete raises the
    earliest next moment, one that came after the last lowers the latest; after ``rounds``
    rounds, more (up to four times as many) run until one kill has landed among the deletes.
    Returns how many of the 600 each killed collector had removed."""
    rng = random.Random(seed)
    cp = factory()
    try:
        kept = {cp.blobs.put(f"kept {i}\n".encode() * 50) for i in range(30)}
        cp.append("keep", [_snapshot(ref, f"k{i}") for i, ref in enumerate(sorted(kept))])
        cp.append("keep", prompts("and a prompt"))
    finally:
        cp.close()
    removed: list[int] = []
    full = lo = hi = 0.0  # the first round's window of kill moments, and the current one
    n = 0
    while n < rounds or (n < 4 * rounds and not any(0 < r < GARBAGE for r in removed[1:])):
        garbage = _garbage(factory, f"round {n}", GARBAGE)
        if n > 0 and lo >= hi:  # the machine's noise closed the window: start again
            lo, hi = 0.0, full
        delay = None if n == 0 else rng.uniform(lo, hi)
        ran = _killed_collection(factory, delay, settle)
        if delay is None:
            full = hi = max(ran, 0.01) * 1.2
        cp = factory()
        try:
            for ref in kept:
                cp.blobs.get(ref)
            assert kept <= {b.ref for b in cp.blobs.list_blobs()}
            cp.blobs.restore_interrupted_deletes()
            assert [] == cp.blobs.interrupted_deletes()
            left = {b.ref for b in cp.blobs.list_blobs()}
            removed.append(len(garbage - left))
            collect_garbage(cp, grace=0)
            assert kept == {b.ref for b in cp.blobs.list_blobs()}
        finally:
            cp.close()
        if delay is not None and removed[-1] == 0:
            lo = max(lo, delay)
        elif delay is not None and removed[-1] == GARBAGE:
            hi = min(hi, delay)
        n += 1
    assert GARBAGE == removed[0]
    return removed[1:]
