"""Per-turn SDK overhead: ``agent.send`` with a zero-latency scripted model at N prior events.

For each N (100, 1,000, 10,000) and each backend (``memory_checkpointer()``,
``file_checkpointer(tmp)``), every round builds a fresh session whose log already holds N events
of a valid conversation (realistic agent turns from ``EventFactory``, cut at a turn boundary so
every tool_use has its result, then padded with short prompt/reply turns to exactly N). It
creates an agent (``create_lite_agent(model=scripted(...), tools=[])``), resumes that session,
sends one warm-up prompt (which folds the log once) and times K sends, each answered by the
same one-block text reply. The ContextEngine is on (the default): with its default budget
(191,808 tokens) the view is the whole conversation at N = 100 and 1,000 and a selected window at
N = 10,000. A send appends four events (the prompt; the context status, the model-request record
and the reply), so a round's log grows from N to N + 4K events; the report prints that range.

Measured in the same run, interleaved with the SDK rounds (the order rotates every round):

- "raw": the minimum a turn must do without the SDK: the same four events in the same two
  conditional ``cp.append`` calls (prompt; status + record + reply) to a session with N prior
  events;
- "core": ``SessionCore.send`` (the turn loop the session actor runs) called directly in this
  thread: no actor hop, no future, no maintenance-lock ask. Only to split the SDK's time into
  the turn loop and the actor machinery.

Every timed block starts after a ``gc.collect()``; the garbage collector stays on, and the time
it spends during the SDK loops (any thread, through ``gc.callbacks``) is printed as "gc/turn".

Target: t(10,000) <= 1.3 x t(100) (per-turn time of ``agent.send``). ``--profile`` runs
cProfile inside the session actor's thread for K turns at N=100 and N=10,000 and prints the
functions whose own time per turn grows with N.

    /tmp/venv/bin/python bench/bench_turn.py [--quick] [--profile] [--rounds R] [--sends K]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import itertools
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import (
    EventFactory,
    Measurement,
    environment,
    fmt_ratio,
    interleave,
    library_fingerprint,
)

from liteagent.actors._turn import SessionCore
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    file_checkpointer,
    fold,
    memory_checkpointer,
)
from liteagent.eventlog import conversation as conversation_of
from liteagent.eventlog.types import (
    AssistantMessage,
    ContextSettings,
    ContextStatus,
    Event,
    ModelRequestRecord,
    SessionStarted,
    TextBlock,
    Usage,
    UserPrompt,
)
from liteagent.providers import ScriptItem, scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import LiteAgent, create_lite_agent

TARGET = 1.3  # t(10,000) <= 1.3 x t(100)
SIZES = (100, 1_000, 10_000)
MODEL = "m"
REPLY = AssistantMessage(
    content=(TextBlock("Done: the change is in place and the tests pass."),),
    usage=Usage(input_tokens=3, output_tokens=14, cache_read_input_tokens=12_000),
    stop_reason="end_turn",
    model=MODEL,
)
PROMPT = "Run the tests again and tell me whether they pass."
_KERNEL_PACKAGES = ("eventlog", "actors", "sdk", "providers", "tools", "context")


# -- the library version and the session logs ------------------------------------------------------


def kernel_fingerprint() -> str:
    """A hash of every liteagent source file the SDK runs (eventlog, actors, sdk, providers,
    tools, context) and the newest mtime among them: which library code was measured."""
    import liteagent.sdk as pkg  # noqa: PLC0415 -- only for its location

    root = Path(os.path.abspath(pkg.__file__ or "")).parent.parent
    digest = hashlib.sha256()
    newest = 0.0
    for name in _KERNEL_PACKAGES:
        for path in sorted((root / name).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
            newest = max(newest, path.stat().st_mtime)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(newest))
    return (
        f"kernel sources ({', '.join(_KERNEL_PACKAGES)}) sha256 {digest.hexdigest()[:12]} "
        f"(newest file modified {when})"
    )


def conversation_log(n: int) -> list[Event]:
    """Exactly ``n`` events of a valid session: SessionStarted, whole EventFactory turns (so every
    tool_use is answered by its result within the turn), padded with short turns."""
    start: Event = SessionStarted(
        workdir="/home/user/project", model=MODEL, system_prompt="You are a coding agent."
    )
    pool = EventFactory().events(n + 400)  # a turn is at most ~40 events: this reaches past n
    # Every EventFactory turn starts with a UserPrompt: cutting before one keeps whole turns.
    cut = max(i for i in range(n) if i == 0 or type(pool[i]) is UserPrompt)
    out = [start, *pool[:cut]]
    rest = n - len(out)
    if rest % 2:
        out.append(ContextStatus(level="ok", tokens=40_000, budget=200_000))
        rest -= 1
    for i in range(rest // 2):
        out.append(UserPrompt(content=(TextBlock(f"Now step {i}: check the output."),)))
        out.append(
            AssistantMessage(
                content=(TextBlock(f"Step {i} checked."),),
                usage=Usage(),
                stop_reason="end_turn",
                model=MODEL,
            )
        )
    return out


def check_log(events: list[Event], n: int) -> str:
    """Fold ``events`` and check they form a valid, closed conversation of ``n`` events."""
    cp = memory_checkpointer()
    try:
        cp.append("check", events)
        state = fold(cp.read("check"))
    finally:
        cp.close()
    if state.head != n or state.open_tool_calls:
        raise AssertionError(f"bad log: head {state.head}, open calls {state.open_tool_calls}")
    messages = conversation_of(state)
    if any(a.role == b.role for a, b in itertools.pairwise(messages)):
        raise AssertionError("the merged conversation does not alternate")
    kinds: dict[str, int] = {}
    for e in events:
        kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
    top = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return (
        f"N={n}: {len(messages)} merged messages, {state.usage.output_tokens} output tokens; {top}"
    )


def fill(cp: Checkpointer, sid: str, events: list[Event]) -> None:
    for i in range(0, len(events), 500):
        cp.append(sid, events[i : i + 500])


# -- the measured loops ----------------------------------------------------------------------------


class Bench:
    """Everything one backend's rounds share: the checkpointer, the logs, a session counter."""

    def __init__(self, backend: str, root: str, logs: dict[int, list[Event]], sends: int) -> None:
        self.backend = backend
        self.root = root
        self.logs = logs
        self.sends = sends
        self.cp = (
            memory_checkpointer()
            if backend == "memory"
            else file_checkpointer(os.path.join(root, "sessions"))
        )
        self._ids = iter(range(1_000_000))
        self.gc_seconds: dict[str, list[float]] = {}

    def close(self) -> None:
        self.cp.close()

    def _session(self, n: int, tag: str) -> str:
        sid = f"bench-{tag}-{n}-{next(self._ids)}"
        fill(self.cp, sid, self.logs[n])
        return sid

    def _agent(self, replies: int, item: ScriptItem = REPLY) -> LiteAgent:
        return create_lite_agent(
            model=scripted([item] * replies),
            model_name=MODEL,
            workdir=self.root,
            checkpointer=self.cp,
            tools=[],
        )

    def sdk(self, n: int) -> float:
        """A fresh agent resumes a fresh N-event session, warms up, and runs K timed sends."""
        sid = self._session(n, "sdk")
        try:
            with self._agent(self.sends + 1) as agent:
                agent.resume(sid)
                agent.send("warm up")
                return self._timed(f"sdk {n}", lambda: agent.send(PROMPT))
        finally:
            self.cp.delete(sid)

    def core(self, n: int) -> float:
        """The session's turn loop (SessionCore.send) in this thread: no actors, no futures."""
        sid = self._session(n, "core")
        try:
            with self._agent(self.sends + 1) as agent:
                core = SessionCore(sid, agent._core.host.config)
                core.send("warm up", CancelToken(), None)
                return self._timed(f"core {n}", lambda: core.send(PROMPT, CancelToken(), None))
        finally:
            self.cp.delete(sid)

    def raw(self, n: int) -> float:
        """The same four events per turn in the same two conditional appends, no SDK."""
        cp = self.cp
        sid = self._session(n, "raw")
        try:
            head, generation = cp.position(sid)
            record = ModelRequestRecord(
                view_hash="0" * 64, token_estimate=12_000, model=MODEL, request_digest="1" * 64
            )
            status = ContextStatus(
                level="select",
                tokens=200_000,
                budget=191_808,
                tokens_after=191_000,
                actions=("select: 1 left out",),
                settings=ContextSettings(budget_tokens=191_808),
            )

            def turn() -> None:
                nonlocal head
                head = cp.append(
                    sid,
                    [UserPrompt(content=(TextBlock(PROMPT),))],
                    expected_head=head,
                    expected_generation=generation,
                )
                head = cp.append(
                    sid, [status, record, REPLY], expected_head=head, expected_generation=generation
                )

            turn()  # warm up, as the SDK loops do
            return self._timed(f"raw {n}", turn)
        finally:
            cp.delete(sid)

    def _timed(self, name: str, op: Callable[[], object]) -> float:
        gc.collect()
        pauses = _GcClock()
        with pauses:
            t = time.perf_counter()
            for _ in range(self.sends):
                op()
            dt = time.perf_counter() - t
        self.gc_seconds.setdefault(name, []).append(pauses.seconds)
        return dt


class _GcClock:
    """Total time spent in the garbage collector while active (any thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


# -- profiling inside the session actor's thread ------------------------------------------------


class _ActorProfile:
    """A script item that enables cProfile in the actor's thread at call 2 and disables it at call
    ``turns + 2``: the profile covers exactly ``turns`` whole turn cycles of that thread
    (including its idle wait for the next message and for the maintenance-lock reply)."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.calls = 0
        self.prof = cProfile.Profile()

    def __call__(self, _request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        if self.calls == 2:
            self.prof.enable()
        elif self.calls == self.turns + 2:
            self.prof.disable()
        return REPLY


FuncStats = dict[tuple[str, int, str], tuple[float, float, int]]


def profile_actor(bench: Bench, n: int, turns: int) -> tuple[float, FuncStats]:
    """Run ``turns`` + 2 sends at N=n with the actor-thread profile; return the wall seconds of
    the profiled sends and {function: (own s, cumulative s, calls)}."""
    hook = _ActorProfile(turns)
    sid = bench._session(n, "profile")
    try:
        with bench._agent(turns + 2, hook) as agent:
            agent.resume(sid)
            agent.send("warm up")
            agent.send(PROMPT)  # enables the profiler mid-turn
            t = time.perf_counter()
            for _ in range(turns):
                agent.send(PROMPT)
            wall = time.perf_counter() - t
    finally:
        bench.cp.delete(sid)
    stats = pstats.Stats(hook.prof).stats  # type: ignore[attr-defined]
    return wall, {k: (v[2], v[3], v[1]) for k, v in stats.items()}


def _where(key: tuple[str, int, str]) -> str:
    file, line, func = key
    return f"{func} ({os.path.basename(file)}:{line})" if line else f"{func} {file}".strip()


def report_profile(bench: Bench, turns: int) -> None:
    small_wall, small = profile_actor(bench, SIZES[0], turns)
    big_wall, big = profile_actor(bench, SIZES[-1], turns)
    us = 1e6 / turns
    print(
        f"\n   profile ({bench.backend}): cProfile in the session actor's thread, {turns} turns "
        f"at N={SIZES[0]} and at N={SIZES[-1]} (wall under the profiler: "
        f"{small_wall * us:.0f} / {big_wall * us:.0f} us/turn)"
    )
    total_small = sum(v[0] for v in small.values()) * us
    total_big = sum(v[0] for v in big.values()) * us
    print(
        f"   own time of the actor thread per turn (includes its idle waits): "
        f"{total_small:.0f} us at N={SIZES[0]}, {total_big:.0f} us at N={SIZES[-1]}"
    )
    print(f"   top own time at N={SIZES[-1]}:")
    print("      us/turn  share   cum us  calls/turn  function")
    for key, (tt, ct, nc) in sorted(big.items(), key=lambda kv: -kv[1][0])[:12]:
        print(
            f"     {tt * us:8.1f} {100 * tt * us / total_big:5.1f}% {ct * us:8.1f} "
            f"{nc / turns:10.1f}  {_where(key)}"
        )
    growth = {
        k: big.get(k, (0.0, 0.0, 0))[0] - small.get(k, (0.0, 0.0, 0))[0]
        for k in set(big) | set(small)
    }
    total_growth = (total_big - total_small) / us
    print(
        f"   where the own time per turn grows from N={SIZES[0]} to N={SIZES[-1]} "
        f"(total growth {total_growth * us:+.0f} us/turn; share = of that growth):"
    )
    print(f"      N={SIZES[0]:<5d}  N={SIZES[-1]:<6d}  growth   share  calls/turn  function")
    for key, g in sorted(growth.items(), key=lambda kv: -kv[1])[:10]:
        s, b = small.get(key, (0.0, 0.0, 0)), big.get(key, (0.0, 0.0, 0))
        share = 100 * g / total_growth if total_growth > 0 else float("nan")
        print(
            f"     {s[0] * us:8.1f} {b[0] * us:8.1f} {g * us:+8.1f} {share:6.1f}% "
            f"{b[2] / turns:10.1f}  {_where(key)}"
        )
    print("   cumulative time per turn of the turn-loop steps:")
    for name in (
        "send",
        "_model_turn",
        "view_hash",
        "sync",
        "append",
        "_request",
        "stream",
        "apply_all",
        "conversation_since",
    ):
        keys = [k for k in big if k[2] == name and any(f"/{p}/" in k[0] for p in _KERNEL_PACKAGES)]
        for key in keys:
            print(
                f"     {name:20s} {small.get(key, (0.0, 0.0, 0))[1] * us:8.1f} -> "
                f"{big[key][1] * us:8.1f} us  ({_where(key)})"
            )


# -- reporting -------------------------------------------------------------------------------------


def per_turn_us(m: Measurement) -> tuple[float, float]:
    return 1e6 * m.best_time / m.ops, 1e6 * m.median_time / m.ops


def paired(a: Measurement, b: Measurement) -> float:
    """Median over rounds of (time a / time b) of the same round."""
    return statistics.median(x / y for x, y in zip(a.times, b.times, strict=True))


def report(bench: Bench, res: dict[str, Measurement]) -> list[str]:
    k = bench.sends
    print(
        f"\n-- {bench.backend} checkpointer: {k} sends per round, {len(res['sdk 100'].times)} "
        "rounds; us per turn (best round / median round)"
    )
    print(
        "   N        log during round   sdk send          core (no actor)   raw appends"
        "       sdk-raw   gc/turn"
    )
    for n in SIZES:
        sdk, core, raw = res[f"sdk {n}"], res[f"core {n}"], res[f"raw {n}"]
        gc_us = 1e6 * statistics.median(bench.gc_seconds[f"sdk {n}"]) / k
        print(
            f"   {n:<8,d} {n:>6,d}->{n + 3 * k:<7,d}    "
            f"{per_turn_us(sdk)[0]:7.0f} / {per_turn_us(sdk)[1]:<7.0f} "
            f"{per_turn_us(core)[0]:7.0f} / {per_turn_us(core)[1]:<7.0f} "
            f"{per_turn_us(raw)[0]:6.1f} / {per_turn_us(raw)[1]:<7.1f} "
            f"{per_turn_us(sdk)[0] - per_turn_us(raw)[0]:8.0f}  {gc_us:7.1f}"
        )
    lines = []
    base = res[f"sdk {SIZES[0]}"]
    for n in SIZES[1:]:
        m = res[f"sdk {n}"]
        ratio = m.best_time / base.best_time
        med = paired(m, base)
        verdict = (
            fmt_ratio(ratio, TARGET, higher_is_better=False)
            if n == SIZES[-1]
            else f"{ratio:.2f}x (no target)"
        )
        core_ratio = res[f"core {n}"].best_time / res[f"core {SIZES[0]}"].best_time
        raw_ratio = res[f"raw {n}"].best_time / res[f"raw {SIZES[0]}"].best_time
        print(
            f"   t({n:,})/t({SIZES[0]}): sdk best/best {verdict}; median of per-round "
            f"ratios {med:.2f}x; core {core_ratio:.2f}x; raw {raw_ratio:.2f}x"
        )
        lines.append(
            f"{bench.backend:6s} t({n:,})/t({SIZES[0]}) = {ratio:.2f}x "
            f"(median of per-round ratios {med:.2f}x)"
        )
    small, big = per_turn_us(base)[0], per_turn_us(res[f"sdk {SIZES[-1]}"])[0]
    raw_small = per_turn_us(res[f"raw {SIZES[0]}"])[0]
    print(
        f"   absolute: an SDK turn at N={SIZES[0]} costs {small:.0f} us against "
        f"{raw_small:.1f} us for its raw appends ({small / raw_small:.0f}x); at "
        f"N={SIZES[-1]:,}: {big:.0f} us"
    )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--rounds", type=int, default=None, help="rounds per loop (default 9)")
    p.add_argument("--sends", type=int, default=None, help="timed sends per round (default 100)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile the session actor's thread at N=100 and N=10,000",
    )
    p.add_argument("--backend", choices=("memory", "file", "both"), default="both")
    args = p.parse_args()
    rounds = args.rounds or (2 if args.quick else 9)
    sends = args.sends or (30 if args.quick else 100)
    quick = " (quick)" if args.quick else ""
    print(f"== Per-turn SDK overhead, zero-latency scripted model{quick}")
    print(environment())
    print(library_fingerprint())
    print(kernel_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"rounds: {rounds} (interleaved, order rotating); {sends} timed sends per round after "
        "one warm-up send; a fresh agent and a fresh N-event session per round and loop"
    )
    t0 = time.perf_counter()
    logs = {n: conversation_log(n) for n in SIZES}
    for n in SIZES:
        print("   log", check_log(logs[n], n))
    print(f"   logs built and checked in {time.perf_counter() - t0:.1f} s")
    root = tempfile.mkdtemp(prefix="bench-turn-")
    summary: list[str] = []
    try:
        backends = ("memory", "file") if args.backend == "both" else (args.backend,)
        for backend in backends:
            bench = Bench(backend, root, logs, sends)
            try:
                loops: dict[str, Callable[[], float]] = {}
                for n in SIZES:
                    loops[f"sdk {n}"] = _bind(bench.sdk, n)
                    loops[f"core {n}"] = _bind(bench.core, n)
                    loops[f"raw {n}"] = _bind(bench.raw, n)
                res = interleave(loops, sends, rounds)
                summary.extend(report(bench, res))
                if args.profile:
                    report_profile(bench, sends)
            finally:
                bench.close()
        print(
            f"\n== summary (target t({SIZES[-1]:,}) <= {TARGET}x t({SIZES[0]}); best/best, in "
            "brackets the median of per-round ratios)"
        )
        for line in summary:
            print("  ", line)
        print(f"   wall time {time.perf_counter() - t0:.0f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _bind(fn: Callable[[int], float], n: int) -> Callable[[], float]:
    return lambda: fn(n)


if __name__ == "__main__":
    main()
