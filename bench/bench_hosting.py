"""A daemon hosting many busy sessions in one asyncio process: turns, threads, loop lag, memory.

One asyncio process, ``create_async_lite_agent`` with default settings (``max_live_sessions``
256, ``max_queued_sends`` 10,000, ``idle_timeout_s`` 300, the ContextEngine on) and the
``scripted`` provider, whose model call sleeps 50-200 ms (uniform, seeded; ``time.sleep``
releases the GIL as a real HTTP call would). Every turn is one ``write_file`` call (a real tool
run with its file snapshot) and a reply: two model calls. All sessions start at once, each
running its turns one after the other (``await agent.send(...)``).

Scenarios, each on SQLite (one ``sqlite_checkpointer`` file) and on the file backend (the default
``file_checkpointer``), each in a fresh child process (so peak RSS is its own):

- ``busy``: N = 1,000 sessions x 3 turns (3,000 turns);
- ``wide``: N = 10,000 sessions x 1 turn.

Measured: turns completed and errors (by type); wall time and turns/s; a 10 ms ticker on the
event loop (its lateness over 10 ms is the loop lag: p50 / p99 / max); the peak thread count
(sampled by the ticker) against ``max_live_sessions`` + 32; the peak of ``host_stats()`` live,
running and queued; RSS before the agent and the peak (``VmHWM``).

Ratios, against baselines of the same run: turns/s against the bound the cap and the model's
latency allow (``max_live_sessions`` / (2 x the mean sleep)), and wall time against the sum of
the model sleeps divided by the cap.

The scripted provider keeps every request it answered (a test double's log); the ticker empties
it, so the RSS figures are the SDK's own.

    /tmp/venv/bin/python bench/bench_hosting.py [--quick] [--backends sqlite,file]
        [--scenarios busy,wide] [--sessions N] [--turns T] [--max-live-sessions 256]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _common import environment, library_fingerprint

from liteagent.actors._gate import GATE
from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.types import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import create_async_lite_agent

SEED = 20240611
SLEEP = (0.050, 0.200)
TICK = 0.010
SCENARIOS = {"busy": (1000, 3), "wide": (10_000, 1)}


def proc_status(field: str) -> float:
    """A ``/proc/self/status`` field in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


class Model:
    """The simulated model: sleeps 50-200 ms, then a write_file call for a prompt, "done" for a
    tool result."""

    def __init__(self) -> None:
        self._rng = random.Random(SEED)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.slept = 0.0

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        with self._lock:
            pause = self._rng.uniform(*SLEEP)
            self.slept += pause
            n = next(self._ids)
        time.sleep(pause)
        usage = Usage(input_tokens=100, output_tokens=10)
        if any(isinstance(b, ToolResultBlock) for b in request.messages[-1].content):
            return AssistantMessage(
                content=(TextBlock("done"),), usage=usage, stop_reason="end_turn"
            )
        call = ToolUseBlock(
            f"toolu_{n}", "write_file", {"path": f"out/{n % 1000}/{n}.txt", "content": "hello\n"}
        )
        return AssistantMessage(content=(call,), usage=usage, stop_reason="tool_use")


# -- the child: one backend, one scenario ----------------------------------------------------------


class Probe:
    """What the run watches: the 10 ms ticker's lateness, the peaks of threads and of
    ``host_stats()``, and full garbage collections (which hold the GIL)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.peak = {"threads": 0, "live": 0, "running": 0, "queued": 0, "gate_waiting": 0}
        self.gc_pauses: list[list[float]] = [[], [], []]  # per generation
        self.gc_collected = 0
        self._gc_start = 0.0
        self.stop = asyncio.Event()

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_pauses[info["generation"]].append(time.perf_counter() - self._gc_start)
            self.gc_collected += info["collected"]

    async def ticker(self, agent: Any, provider: Any) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(TICK)
            self.lags.append(time.perf_counter() - t - TICK)
            stats = agent.host_stats()
            self.peak["threads"] = max(self.peak["threads"], threading.active_count())
            self.peak["live"] = max(self.peak["live"], stats.live)
            self.peak["running"] = max(self.peak["running"], stats.running)
            self.peak["queued"] = max(self.peak["queued"], stats.queued)
            self.peak["gate_waiting"] = max(self.peak["gate_waiting"], GATE.stats()[1])
            with provider._lock:  # the test double's log (see the docstring)
                provider._requests.clear()


def _p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


async def run(backend: str, sessions: int, turns: int, root: str, cap: int) -> dict[str, Any]:
    model = Model()
    provider = scripted([model] * (sessions * turns * 2))
    workdir = os.path.join(root, "work")
    os.makedirs(workdir)
    threads_before = threading.active_count()
    rss_before = proc_status("VmRSS")
    checkpointer = (
        sqlite_checkpointer(os.path.join(root, "log.db")) if backend == "sqlite" else None
    )
    agent = create_async_lite_agent(
        model=provider,
        model_name="m",
        workdir=workdir,
        checkpointer=checkpointer,
        home=os.path.join(root, "home"),
        max_live_sessions=cap,
    )
    errors: collections.Counter[str] = collections.Counter()
    done = 0
    probe = Probe()
    gc.callbacks.append(probe.on_gc)

    async def session(i: int) -> None:
        nonlocal done
        for t in range(turns):
            try:
                result = await agent.send(f"turn {t}: write a file", session_id=f"s{i:05d}")
            except Exception as e:  # noqa: BLE001 -- counted and reported
                errors[type(e).__name__] += 1
                if errors[type(e).__name__] == 1:
                    print(f"   first {type(e).__name__}: {e}", file=sys.stderr)
                continue
            if result.text != "done":
                errors["unexpected result"] += 1
            done += 1

    tick = asyncio.ensure_future(probe.ticker(agent, provider))
    await asyncio.sleep(TICK)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(session(i)) for i in range(sessions)]
    await asyncio.sleep(0)  # every session takes its first step: posts its first send
    burst = time.perf_counter() - t0
    ticks_before = len(probe.lags)
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    probe.stop.set()
    await tick
    t1 = time.perf_counter()
    await agent.close()
    close_s = time.perf_counter() - t1
    if checkpointer is not None:
        checkpointer.close()
    gc.callbacks.remove(probe.on_gc)
    lags = probe.lags
    steady = lags[ticks_before + 1 :]  # after the tick that the start burst delayed
    return {
        "backend": backend,
        "sessions": sessions,
        "turns": turns,
        "done": done,
        "errors": dict(errors),
        "wall": wall,
        "close_s": close_s,
        "slept": model.slept,
        "lag_p50": statistics.median(lags),
        "lag_p99": _p99(lags),
        "lag_max": max(lags),
        "ticks": len(lags),
        "burst": burst,
        "steady_p99": _p99(steady),
        "steady_max": max(steady),
        "gc_pauses": probe.gc_pauses,
        "gc_collected": probe.gc_collected,
        "peak": probe.peak,
        "cpu_user": cpu1.ru_utime - cpu0.ru_utime,
        "cpu_sys": cpu1.ru_stime - cpu0.ru_stime,
        "switches": (cpu1.ru_nvcsw - cpu0.ru_nvcsw) + (cpu1.ru_nivcsw - cpu0.ru_nivcsw),
        "gate_permits": GATE.permits,
        "threads_before": threads_before,
        "threads_after": threading.active_count(),
        "rss_before": rss_before,
        "rss_peak": proc_status("VmHWM"),
        "max_live_sessions": cap,
    }


def child(backend: str, sessions: int, turns: int, cap: int, gate: int | None) -> dict[str, Any]:
    if gate is not None:  # the comparison: another number of permits (0: no gate)
        GATE.set_permits(gate or 1_000_000)
    root = tempfile.mkdtemp(prefix="bench-hosting-")
    try:
        return asyncio.run(run(backend, sessions, turns, root, cap))
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the parent ------------------------------------------------------------------------------------


def run_child(
    backend: str, sessions: int, turns: int, cap: int, gate: int | None = None
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        json.dumps(
            {"backend": backend, "sessions": sessions, "turns": turns, "cap": cap, "gate": gate}
        ),
    ]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True)  # noqa: S603 -- our own interpreter and script
    if out.stderr.strip():
        print(out.stderr.rstrip())
    if out.returncode:
        raise SystemExit(f"the {backend} child failed (exit {out.returncode})")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def report(name: str, r: dict[str, Any]) -> str:
    total = r["sessions"] * r["turns"]
    cap = r["max_live_sessions"]
    mean_sleep = r["slept"] / (2 * total)
    bound = cap / (2 * mean_sleep)  # turns/s if every slot always waited on the model
    rate = r["done"] / r["wall"]
    ideal_wall = r["slept"] / cap
    peak = r["peak"]
    ms = {k: 1000 * r[k] for k in ("lag_p50", "lag_p99", "lag_max")}
    errors = ", ".join(f"{k} x{v}" for k, v in r["errors"].items()) or "none"
    print(f"\n-- {name} on {r['backend']}: {r['sessions']:,} sessions x {r['turns']} turns")
    print(f"   turns completed   {r['done']:,} of {total:,}; errors: {errors}")
    print(
        f"   wall time         {r['wall']:.1f} s ({rate:.0f} turns/s); close {r['close_s']:.2f} s"
    )
    print(
        f"   vs the cap bound  {rate / bound:.2f}x of {bound:.0f} turns/s "
        f"({cap} slots / 2 model calls of {1000 * mean_sleep:.0f} ms mean); wall "
        f"{r['wall'] / ideal_wall:.2f}x the model sleeps / cap ({ideal_wall:.1f} s)"
    )
    print(
        f"   event-loop lag    p50 {ms['lag_p50']:.1f} ms, p99 {ms['lag_p99']:.1f} ms, max "
        f"{ms['lag_max']:.1f} ms over {r['ticks']:,} ticks of {1000 * TICK:.0f} ms "
        f"(p99 {ms['lag_p99'] / (1000 * TICK):.2f}x the tick)"
    )
    verdict = "ok" if peak["threads"] <= cap + 32 else "EXCEEDED"
    print(
        f"   start burst       {1000 * r['burst']:.0f} ms for {r['sessions']:,} first sends "
        f"({1e6 * r['burst'] / r['sessions']:.0f} us each, on the loop); after it: lag p99 "
        f"{1000 * r['steady_p99']:.1f} ms, max {1000 * r['steady_max']:.1f} ms"
    )
    gcs = r["gc_pauses"]
    print(
        "   collections      "
        + "; ".join(
            f"gen{g} {len(p)} (longest {1000 * max(p, default=0):.1f} ms, total "
            f"{1000 * sum(p):.0f} ms)"
            for g, p in enumerate(gcs)
        )
        + f"; {r['gc_collected']:,} cyclic garbage objects (the GIL is held meanwhile)"
    )
    cpu = r["cpu_user"] + r["cpu_sys"]
    print(
        f"   CPU               {cpu:.1f} s ({r['cpu_user']:.1f} user, {r['cpu_sys']:.1f} sys; "
        f"{cpu / r['wall']:.2f} cores), {1000 * cpu / max(r['done'], 1):.2f} ms per turn; "
        f"{r['switches'] / max(r['done'], 1):.0f} context switches per turn"
    )
    gate = "off" if r["gate_permits"] >= 1_000_000 else f"{r['gate_permits']} permits"
    print(f"   CPU gate          {gate}; peak threads waiting at it {peak['gate_waiting']}")
    print(
        f"   threads           peak {peak['threads']} (before the agent "
        f"{r['threads_before']}, after close {r['threads_after']}); bound "
        f"max_live_sessions + 32 = {cap + 32}: {verdict}"
    )
    print(
        f"   host_stats peaks  live {peak['live']}, running {peak['running']}, "
        f"queued {peak['queued']}"
    )
    print(
        f"   RSS               {r['rss_before']:.0f} MiB before the agent, peak "
        f"{r['rss_peak']:.0f} MiB (+{r['rss_peak'] - r['rss_before']:.0f} MiB)"
    )
    failed = sum(r["errors"].values())
    return (
        f"{name:4s} {r['backend']:6s} gate {gate:9s} {r['done']:6,d}/{total:<6,d} errors "
        f"{failed:3d}  {rate:5.0f} turns/s ({rate / bound:.2f}x bound, "
        f"{1000 * cpu / max(r['done'], 1):.2f} CPU ms/turn)  lag p50/p99/max "
        f"{ms['lag_p50']:.1f}/{ms['lag_p99']:.1f}/{ms['lag_max']:.1f} ms  gen2 max "
        f"{1000 * max(gcs[2], default=0):.0f} ms  threads {peak['threads']}  RSS peak "
        f"{r['rss_peak']:.0f} MiB"
    )


def _gate_setting(value: str) -> int | None:
    """A ``--gates`` item: "default" (the library's), "off", or a number of permits."""
    return None if value == "default" else 0 if value == "off" else int(value)


def compare(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Medians per gate setting over the rounds, and each against the first setting."""
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for setting, r in rows:
        by[setting].append(r)

    def med(rs: list[dict[str, Any]], key: Any) -> float:
        return statistics.median(key(r) for r in rs)

    metrics = {
        "turns/s": lambda r: r["done"] / r["wall"],
        "CPU ms/turn": lambda r: 1000 * (r["cpu_user"] + r["cpu_sys"]) / max(r["done"], 1),
        "lag p99 ms": lambda r: 1000 * r["lag_p99"],
        "lag max ms": lambda r: 1000 * r["lag_max"],
        "gen2 max ms": lambda r: 1000 * max(r["gc_pauses"][2], default=0.0),
    }
    base_name = rows[0][0]
    base = by[base_name]
    lines = []
    for setting, rs in by.items():
        parts = []
        for name, key in metrics.items():
            value = med(rs, key)
            ratio = value / med(base, key) if med(base, key) else float("nan")
            parts.append(
                f"{name} {value:.1f}" + ("" if setting == base_name else f" ({ratio:.2f}x)")
            )
        lines.append(f"gate {setting:8s} x{len(rs)}: " + ", ".join(parts))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 sessions x 3 turns, 1,000 x 1")
    p.add_argument("--backends", default="sqlite,file")
    p.add_argument("--scenarios", default="busy,wide")
    p.add_argument("--sessions", type=int, default=None, help="override N of every scenario")
    p.add_argument("--turns", type=int, default=None, help="override the turns per session")
    p.add_argument(
        "--max-live-sessions",
        type=int,
        default=256,
        help="the cap (default 256, the default setting)",
    )
    p.add_argument(
        "--gates",
        default="default",
        help="CPU gate settings to compare in this run, the first the baseline: "
        "'default', 'off' or a number of permits (e.g. off,default)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of each setting, interleaved in alternating order",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        cfg = json.loads(args.child)
        print(
            json.dumps(
                child(cfg["backend"], cfg["sessions"], cfg["turns"], cfg["cap"], cfg["gate"])
            )
        )
        return
    print("== Hosting many busy sessions in one asyncio process")
    print(environment())
    print(library_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"model sleep {1000 * SLEEP[0]:.0f}-{1000 * SLEEP[1]:.0f} ms per call, two calls and "
        f"one write_file per turn; default agent settings but max_live_sessions="
        f"{args.max_live_sessions}; one child process per run"
    )
    gates = args.gates.split(",")
    summary: list[str] = []
    t0 = time.perf_counter()
    for scenario in args.scenarios.split(","):
        sessions, turns = SCENARIOS[scenario]
        if args.quick:
            sessions //= 10
        sessions = args.sessions or sessions
        turns = args.turns or turns
        for backend in args.backends.split(","):
            rows: list[tuple[str, dict[str, Any]]] = []
            for n in range(args.rounds):
                for setting in gates if n % 2 == 0 else gates[::-1]:
                    load = os.getloadavg()[0]
                    r = run_child(
                        backend, sessions, turns, args.max_live_sessions, _gate_setting(setting)
                    )
                    print(f"   (load average before it {load:.2f}, after {os.getloadavg()[0]:.2f})")
                    rows.append((setting, r))
                    summary.append(report(scenario, r))
            if len(gates) > 1 or args.rounds > 1:
                summary.extend(f"{scenario:4s} {backend:6s} " + line for line in compare(rows))
    print("\n== summary")
    for line in summary:
        print("  ", line)
    print(f"   wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
