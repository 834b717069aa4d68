"""Group commit on SQLite: 100 sessions appending concurrently, batching on vs off.

One ``sqlite_checkpointer(file, synchronous="full")`` (an fsync per commit); 100 threads, one
session each, each appending one small event (~300 bytes) per call, as fast as they can, for a
fixed number of calls. Candidate: group commit on (the default: the appends that arrive while a
commit runs share the next one). Baseline: the same checkpointer with group commit turned off
(``set_group_commit(False)``: one transaction, so one fsync, per append). Rounds alternate
between the two in the same run; the ratio of events/s is reported (target >= 5x), with the
writer's transactions per round and the mean batch size. A lone append (one thread) is measured
the same way, to show that batching does not make it slower.

Two diagnostics follow (they explain the ratio, they are not the target): the batched side on a
second store with ``synchronous="normal"`` (no fsync at all: what the batched path reaches when
syncing costs nothing, so the ratio's ceiling on this machine), and the cost of one thread
hand-off (two threads waking each other through locks, as a waiting append is woken).

    python bench/bench_group_commit.py [--quick] [--threads N] [--calls N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

from _common import (
    add_common_args,
    fmt_rate,
    fmt_ratio,
    interleave,
    paired_ratio,
    print_header,
    small_events,
)

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.eventlog._sqlite_writer import Writer, set_group_commit
from liteagent.eventlog.types import Event

TARGET = 5.0  # batching on >= 5x the events/s of batching off


def concurrent_round(
    cp: Checkpointer, threads: int, calls: int, events: list[Event], batching: bool
) -> tuple[float, int]:
    """``threads`` threads append ``calls`` single events each to their own sessions; return
    the elapsed seconds and the writer's transactions."""
    set_group_commit(batching)
    writer: Writer = cp._writer  # type: ignore[attr-defined]
    before = writer.batches
    barrier = threading.Barrier(threads + 1)
    tag = "on" if batching else "off"
    errors: list[BaseException] = []

    def work(n: int) -> None:
        sid = f"{tag}-{n}"
        try:
            barrier.wait()
            for i in range(calls):
                cp.append(sid, [events[(n + i) % len(events)]])
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} appends failed, first: {errors[0]!r}")
    return elapsed, writer.batches - before


def lone_round(cp: Checkpointer, calls: int, events: list[Event], batching: bool) -> float:
    """One thread appending ``calls`` single events; the elapsed seconds."""
    set_group_commit(batching)
    sid = f"lone-{'on' if batching else 'off'}"
    start = time.perf_counter()
    for i in range(calls):
        cp.append(sid, [events[i % len(events)]])
    return time.perf_counter() - start


def hand_off_us(n: int) -> float:
    """Microseconds per thread hand-off: two threads waking each other ``n`` times in turn
    through two locks (a waiting append is woken the same way)."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        for _ in range(n):
            ping.acquire()
            pong.release()

    t = threading.Thread(target=other)
    t.start()
    start = time.perf_counter()
    for _ in range(n):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - start
    t.join()
    return elapsed / (2 * n) * 1e6


def diagnostics(
    root: str,
    args: argparse.Namespace,
    calls: int,
    events: list[Event],
    baseline_rate: float,
) -> None:
    """Print the batched side's rate without fsync (the ratio's ceiling on this machine) and
    the cost of one thread hand-off."""
    cp = sqlite_checkpointer(os.path.join(root, "nosync.db"), synchronous="normal")
    threads, ops = args.threads, args.threads * calls
    try:
        concurrent_round(cp, threads, calls, events, True)  # warm up
        ceiling = max(
            ops / concurrent_round(cp, threads, calls, events, True)[0] for _ in range(args.rounds)
        )
    finally:
        cp.close()
    hand_off = min(hand_off_us(2_000 if args.quick else 20_000) for _ in range(3))
    print("\n-- diagnostics (not the target)")
    print(
        f"   batching on, synchronous=normal (no fsync): best {fmt_rate(ceiling)} events/s "
        f"= {ceiling / baseline_rate:.2f}x the baseline: the ratio's ceiling here"
    )
    print(f"   one thread hand-off (lock wake-up, best of 3): {hand_off:.0f} us")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=5)
    p.add_argument("--threads", type=int, default=100, help="concurrent sessions (default 100)")
    p.add_argument("--calls", type=int, default=None, help="appends per thread per round")
    args = p.parse_args()
    args.rounds = args.rounds or (2 if args.quick else args.default_rounds)
    calls = args.calls or (10 if args.quick else 40)
    print_header("SQLite group commit: 100 sessions appending, batching on vs off", args)
    print(
        f"synchronous=full, {args.threads} threads x {calls} appends of 1 event (~300 B) per round"
    )
    events = small_events()
    root = args.dir or tempfile.mkdtemp(prefix="bench-group-")
    os.makedirs(root, exist_ok=True)
    cp = sqlite_checkpointer(os.path.join(root, "log.db"), synchronous="full")
    transactions: dict[str, list[int]] = {"on": [], "off": []}
    try:

        def loop(batching: bool) -> Callable[[], float]:
            def run() -> float:
                elapsed, n = concurrent_round(cp, args.threads, calls, events, batching)
                transactions["on" if batching else "off"].append(n)
                return elapsed

            return run

        ops = args.threads * calls
        loop(True)()  # warm up: connections, sessions, statement caches
        loop(False)()
        transactions = {"on": [], "off": []}
        res = interleave({"batching on": loop(True), "batching off": loop(False)}, ops, args.rounds)
        on, off = res["batching on"], res["batching off"]
        ratio = on.best_rate / off.best_rate
        print(
            f"\n-- {args.threads} concurrent sessions, {ops} appends per round, "
            f"{args.rounds} rounds each"
        )
        for name, m in res.items():
            key = "on" if name == "batching on" else "off"
            per = sum(transactions[key]) / len(transactions[key])
            print(
                f"   {name:13s} best {fmt_rate(m.best_rate):>7s} events/s, median "
                f"{fmt_rate(m.median_rate):>7s}; {per:.0f} transactions per round "
                f"(mean batch {ops / per:.1f})"
            )
        print(
            f"   ratio on/off: best/best {fmt_ratio(ratio, TARGET)}; median of per-round "
            f"ratios {paired_ratio(on, off):.2f}x"
        )

        lone_calls = 50 if args.quick else 300
        lone = interleave(
            {
                "lone, batching on": lambda: lone_round(cp, lone_calls, events, True),
                "lone, batching off": lambda: lone_round(cp, lone_calls, events, False),
            },
            lone_calls,
            args.rounds,
        )
        lon, loff = lone["lone, batching on"], lone["lone, batching off"]
        print(f"\n-- a lone session appending ({lone_calls} appends per round)")
        for name, m in lone.items():
            print(
                f"   {name:18s} best {fmt_rate(m.best_rate):>7s} appends/s "
                f"({1e6 / m.best_rate:.0f} us each), median {fmt_rate(m.median_rate):>7s}"
            )
        print(
            f"   lone on/off: best/best {lon.best_rate / loff.best_rate:.2f}x (1.0x = batching "
            "costs a lone append nothing)"
        )
        diagnostics(root, args, calls, events, off.best_rate)
        print(
            f"\n== summary: group commit {fmt_rate(on.best_rate)} events/s vs "
            f"{fmt_rate(off.best_rate)} events/s without, ratio {ratio:.1f}x "
            f"(target >= {TARGET:.0f}x); lone append {lon.best_rate / loff.best_rate:.2f}x"
        )
    finally:
        set_group_commit(True)
        cp.close()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
