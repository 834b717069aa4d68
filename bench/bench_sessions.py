"""Resident memory of an agent that touched 1,000 sessions once (idle ones are passivated).

One agent (``create_lite_agent`` with a ``file_checkpointer`` in a temp dir, ``tools=[]``, a
zero-latency ``scripted`` model) sends one prompt to each of 1,000 new session ids:
``agent.send("hi", session_id=sid)``. At most ``max_live_sessions`` sessions keep an actor (a
thread); starting one more stops the least recently used idle one. Each configuration
(``max_live_sessions`` 256, the default, and 16) runs in a fresh child process, so allocations of
an earlier run cannot hide (or inflate) the figure.

Measured in the child: the process RSS (``VmRSS`` of ``/proc/self/status``, after
``gc.collect()``) before the agent is created (the baseline), right after, and after 100, 300,
600 and 1,000 sessions; Python's allocated blocks (``sys.getallocatedblocks()``), the threads
(``threading.active_count()``), the live sessions (``agent._core.host.live_sessions``) and open
file descriptors at the same points; the time per first-touch send. The goal: memory does not
grow with the number of sessions ever opened beyond the live cap, so RSS after 1,000 sessions
should be close to RSS after 300 (both past the cap).

The scripted provider keeps every request it answered in a list (a test double's log, which
would grow by one request per send); the child empties that list after every send, outside the
timed call, so the figures are the SDK's own.

    /tmp/venv/bin/python bench/bench_sessions.py [--quick] [--sessions N] [--caps 256,16]
"""

from __future__ import annotations

import argparse
import array
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _common import environment, library_fingerprint
from bench_turn import kernel_fingerprint

from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, Usage
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

REPLY = AssistantMessage(
    content=(TextBlock("Hello. What should I work on?"),),
    usage=Usage(input_tokens=3, output_tokens=9),
    stop_reason="end_turn",
    model="m",
)


def proc_status(field: str) -> float:
    """A ``/proc/self/status`` field in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- the child: one configuration ------------------------------------------------------------------


def child(cap: int, sessions: int, checkpoints: list[int]) -> dict[str, Any]:
    def snapshot(label: str, done: int, live: int) -> dict[str, Any]:
        gc.collect()
        return {
            "label": label,
            "sessions": done,
            "rss": proc_status("VmRSS"),
            "hwm": proc_status("VmHWM"),
            "blocks": sys.getallocatedblocks(),
            "threads": threading.active_count(),
            "live": live,
            "fds": open_fds(),
        }

    rows = [snapshot("before the agent", 0, 0)]
    root = tempfile.mkdtemp(prefix="bench-sessions-")
    times = array.array("d")  # no Python object per send: the blocks count stays the SDK's
    try:
        cp = file_checkpointer(os.path.join(root, "sessions"))
        provider = scripted([REPLY] * sessions)
        try:
            with create_lite_agent(
                model=provider,
                model_name="m",
                workdir=root,
                checkpointer=cp,
                tools=[],
                max_live_sessions=cap,
            ) as agent:
                host = agent._core.host  # the live-actor count
                rows.append(snapshot("agent created", 0, len(host.live_sessions)))
                for i in range(sessions):
                    sid = f"bench-{i:05d}"
                    t = time.perf_counter()
                    result = agent.send("hi", session_id=sid)
                    times.append(time.perf_counter() - t)
                    provider._requests.clear()  # the test double's log (see the docstring)
                    if result.session_id != sid or not result.text:
                        raise AssertionError(f"unexpected result {result!r}")
                    if i + 1 in checkpoints:
                        rows.append(
                            snapshot(f"after {i + 1} sessions", i + 1, len(host.live_sessions))
                        )
                stored = len(cp.list())
                if provider.calls != sessions:
                    raise AssertionError(f"{provider.calls} model calls for {sessions} sends")
            rows.append(snapshot("agent closed", sessions, 0))
        finally:
            cp.close()
        rows.append(snapshot("checkpointer closed", sessions, 0))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"cap": cap, "rows": rows, "times": list(times), "stored": stored}


# -- the parent ------------------------------------------------------------------------------------


def run_child(cap: int, sessions: int, checkpoints: list[int]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        json.dumps({"cap": cap, "sessions": sessions, "checkpoints": checkpoints}),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: S603 -- our own interpreter and script
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def report(res: dict[str, Any], compare: tuple[int, int]) -> str:
    cap, rows, times = res["cap"], res["rows"], res["times"]
    base = rows[0]
    print(
        f"\n-- max_live_sessions={cap}: {len(times)} sessions touched once ({res['stored']} stored)"
    )
    print(
        "   point                          RSS MiB   +base   peak   py blocks  threads  live  fds"
    )
    for r in rows:
        print(
            f"   {r['label']:30s} {r['rss']:7.1f} {r['rss'] - base['rss']:+7.1f} "
            f"{r['hwm']:6.1f} {r['blocks'] - base['blocks']:+10,d} {r['threads']:7d} "
            f"{r['live']:5d} {r['fds']:4d}"
        )
    by = {r["sessions"]: r for r in rows if r["label"].startswith("after ")}
    lo, hi = compare
    a, b = by[lo], by[hi]
    grow = b["rss"] - a["rss"]
    agent = a["rss"] - base["rss"]
    per = grow * 2**20 / (hi - lo)
    blocks = b["blocks"] - a["blocks"]
    print(
        f"   RSS after {hi:,} vs after {lo:,} sessions: {b['rss']:.1f} vs {a['rss']:.1f} MiB "
        f"({grow:+.2f} MiB, {per:+.0f} bytes per extra session; the agent at {lo} sessions "
        f"is {agent:+.1f} MiB over the baseline)"
    )
    print(
        f"   Python blocks {hi:,} vs {lo:,}: {blocks:+,d} ({blocks / (hi - lo):+.2f} per extra "
        "session)"
    )
    us = [1e6 * t for t in times]
    first = us[: min(cap, len(us))]
    later = us[cap:]
    line = (
        f"   first-touch send: mean {statistics.fmean(us):.0f} us, median "
        f"{statistics.median(us):.0f} us; sends 1-{len(first)} (no eviction) mean "
        f"{statistics.fmean(first):.0f} us"
    )
    if later:
        line += (
            f", sends {cap + 1}-{len(us)} (each stops an idle actor) mean "
            f"{statistics.fmean(later):.0f} us"
        )
    print(line)
    threads_left = rows[-1]["threads"] - base["threads"]
    print(
        f"   after close: {rows[-1]['threads']} threads ({threads_left:+d} vs the baseline), "
        f"RSS {rows[-1]['rss']:.1f} MiB"
    )
    return (
        f"cap {cap:3d}: RSS +{agent:.1f} MiB at {lo} sessions, +{b['rss'] - base['rss']:.1f} "
        f"MiB at {hi:,} ({grow:+.2f} MiB); {b['threads']} threads, {b['live']} live; "
        f"first-touch send {statistics.fmean(us):.0f} us mean"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run (300 sessions)")
    p.add_argument("--sessions", type=int, default=None, help="sessions to touch (default 1000)")
    p.add_argument("--caps", default="256,16", help="max_live_sessions values (default 256,16)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        cfg = json.loads(args.child)
        print(json.dumps(child(cfg["cap"], cfg["sessions"], cfg["checkpoints"])))
        return
    sessions = args.sessions or (300 if args.quick else 1000)
    checkpoints = sorted({c for c in (100, 300, 600, 1000, 2000, sessions) if c <= sessions})
    compare = (300, sessions) if sessions > 300 else (checkpoints[0], sessions)
    quick = " (quick)" if args.quick else ""
    print(f"== Resident memory of {sessions:,} sessions touched once and passivated{quick}")
    print(environment())
    print(library_fingerprint())
    print(kernel_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        "one fresh child process per configuration; file checkpointer in a temp dir; RSS is "
        "VmRSS after gc.collect(), +base is against the RSS before the agent was created"
    )
    t0 = time.perf_counter()
    summary = [
        report(run_child(int(c), sessions, checkpoints), compare) for c in args.caps.split(",")
    ]
    print("\n== summary")
    for line in summary:
        print("  ", line)
    print(f"   wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
