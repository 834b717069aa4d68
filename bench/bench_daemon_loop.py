"""The event loop of a daemon that streams live events and compacts many sessions at once.

One asyncio process, ``create_async_lite_agent`` on a SQLite file with the ``scripted``
provider, whose model call sleeps 20-80 ms (uniform, seeded) and streams a 1,200-character
answer in 8-character deltas (150 ``TextDelta`` live events per call). N sessions run at once,
each: an ``AsyncSubscription`` to its own session consumed with ``async for``, two turns, then
``async for progress in agent.iter_compact(session_id=...)``. One more subscriber follows every
session with a small buffer (256), so it overflows and is told what it missed.

The baseline, in the same process, alternating with it (``--rounds``, order swapped each
round): the same turns with no subscriber and no compaction ("sends only"), so the figures
show what the live events and the compactions add.

Measured: a 10 ms ticker on the loop (its lateness over 10 ms is the loop lag: p50 / p99 / max)
and the longest gen-2 garbage collection meanwhile (it holds the GIL, so it delays the loop
whatever runs on it); the live events delivered to the per-session subscribers and the loop
wake-ups they cost (calls of ``AsyncSubscription._wake``, counted by wrapping it: one wake-up
per wait, not per event); the progress events the iterators got; the threads once the agent
started (its pool starts with it) and their peak (session actors, started by the host's
dispatcher thread, not by the loop).

    python bench/bench_daemon_loop.py [--sessions 300] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import tempfile
import threading
import time
from typing import Any

from _common import environment, library_fingerprint

from liteagent.actors._hub import AsyncSubscription
from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, Usage
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import (
    CompactionProgress,
    LiveEvent,
    Missed,
    TurnFinished,
    create_async_lite_agent,
)

SEED = 20261202
SLEEP = (0.020, 0.080)
TICK = 0.010
ANSWER = 1200
CHUNK = 8


class Model:
    """Sleeps, then answers with a long text (streamed in CHUNK-character deltas)."""

    def __init__(self) -> None:
        self._rng = random.Random(SEED)
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> AssistantMessage:  # noqa: ARG002 -- a script item
        with self._lock:
            pause = self._rng.uniform(*SLEEP)
        time.sleep(pause)
        return AssistantMessage(
            content=(TextBlock("x" * ANSWER),),
            stop_reason="end_turn",
            usage=Usage(input_tokens=100, output_tokens=300),
        )


class Probe:
    """What a run watches: the ticker's lateness and the thread peak, the longest gen-2
    collection, and the wake-ups of async subscriptions (``AsyncSubscription._wake`` wrapped
    while the probe is installed)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.threads = 0
        self.gc_max = 0.0
        self.wakes = 0
        self._gc_start = 0.0
        self.stop = asyncio.Event()
        self._real_wake = AsyncSubscription._wake

    def install(self) -> None:
        real = self._real_wake

        def counted(sub: AsyncSubscription) -> None:
            self.wakes += 1
            real(sub)

        AsyncSubscription._wake = counted  # type: ignore[method-assign]
        gc.collect()
        gc.callbacks.append(self._on_gc)

    def remove(self) -> None:
        gc.callbacks.remove(self._on_gc)
        AsyncSubscription._wake = self._real_wake  # type: ignore[method-assign]

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif info["generation"] == 2:
            self.gc_max = max(self.gc_max, time.perf_counter() - self._gc_start)

    async def ticker(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(TICK)
            self.lags.append(time.perf_counter() - t - TICK)
            self.threads = max(self.threads, threading.active_count())


def summary(lags: list[float]) -> str:
    ms = sorted(x * 1000 for x in lags)
    p99 = ms[int(0.99 * (len(ms) - 1))]
    return f"p50 {statistics.median(ms):.2f} / p99 {p99:.2f} / max {ms[-1]:.2f} ms"


class Sessions:
    """The sessions' work, and what their subscribers and iterators received."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.delivered = 0
        self.progress = 0
        self.overall = {"events": 0, "missed": 0}

    async def follow_all(self, sub: AsyncSubscription) -> None:
        async for item in sub:
            if isinstance(item, Missed):
                self.overall["missed"] += item.count
            else:
                self.overall["events"] += 1

    async def plain(self, i: int) -> None:
        sid = f"s{i:04d}"
        await self.agent.send("write a long answer", session_id=sid)
        await self.agent.send("and another one", session_id=sid)

    async def _consume(self, sub: AsyncSubscription) -> None:
        turns = 0
        async for item in sub:
            assert isinstance(item, LiveEvent), item
            self.delivered += 1
            if isinstance(item.event, TurnFinished):
                turns += 1
                if turns == 2:
                    return

    async def followed(self, i: int) -> None:
        sid = f"s{i:04d}"
        async with self.agent.subscribe(session_id=sid) as sub:
            consumer = asyncio.ensure_future(self._consume(sub))
            await self.plain(i)
            await consumer
        async for step in self.agent.iter_compact(session_id=sid):
            assert isinstance(step, CompactionProgress)
            self.progress += 1


async def run(sessions: int, root: str, follow: bool) -> dict[str, Any]:
    probe = Probe()
    probe.install()
    cp = sqlite_checkpointer(os.path.join(root, "log.db"))
    provider = scripted([Model()] * (sessions * 2), stream_chunk=CHUNK)
    os.makedirs(os.path.join(root, "work"))
    agent = create_async_lite_agent(
        model=provider, model_name="m", checkpointer=cp, workdir=os.path.join(root, "work")
    )
    threads_started = threading.active_count()
    work = Sessions(agent)
    tick = asyncio.ensure_future(probe.ticker())
    everyone = agent.subscribe(256)
    if not follow:
        everyone.close()
    follower = asyncio.ensure_future(work.follow_all(everyone))
    t0 = time.perf_counter()
    await asyncio.gather(*((work.followed if follow else work.plain)(i) for i in range(sessions)))
    wall = time.perf_counter() - t0
    probe.stop.set()
    await tick
    everyone.close()
    await follower
    await agent.close()
    cp.close()
    probe.remove()
    return {
        "wall": wall,
        "lags": probe.lags,
        "gc_max": probe.gc_max,
        "wakes": probe.wakes,
        "delivered": work.delivered,
        "progress": work.progress,
        "overall": work.overall,
        "threads_started": threads_started,
        "threads_peak": probe.threads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="30 sessions, one round")
    args = parser.parse_args()
    sessions, rounds = (30, 1) if args.quick else (args.sessions, args.rounds)
    print(environment())
    print(f"library: {library_fingerprint()}")
    print(f"{sessions} sessions at once, each 2 streamed turns ({ANSWER // CHUNK} deltas each)")
    for n in range(rounds):
        order = (False, True) if n % 2 == 0 else (True, False)
        for follow in order:
            with tempfile.TemporaryDirectory() as root:
                r = asyncio.run(run(sessions, root, follow))
            what = "+ a subscriber per session, iter_compact" if follow else "sends only"
            print(
                f"round {n + 1}, {what}: {r['wall']:.1f} s, {2 * sessions / r['wall']:.0f} "
                f"turns/s; loop lag {summary(r['lags'])}; longest gen-2 gc "
                f"{r['gc_max'] * 1000:.0f} ms; threads {r['threads_started']} once started, "
                f"peak {r['threads_peak']}"
            )
            if follow:
                print(
                    f"    per-session subscribers: {r['delivered']} events, {r['wakes']} "
                    f"loop wake-ups ({r['wakes'] / max(r['delivered'], 1):.3f} per event); "
                    f"the all-sessions subscriber (buffer 256): {r['overall']['events']} "
                    f"items, told of {r['overall']['missed']} missed; iter_compact: "
                    f"{r['progress']} progress events"
                )


if __name__ == "__main__":
    main()
