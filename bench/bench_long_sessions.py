"""Costs that must not grow with a session's (or an agent's) size, as ratios small/large.

Three paths that grew with the size before (each a defect found at a million events):

- ``list_checkpoints`` of a session of N real turns (each a ``write_file`` call on one of 100
  files): per checkpoint it cost O(N) (each checkpoint planned its own restore), so the
  listing was quadratic. Reported: seconds per checkpoint at N small and N large, and their
  ratio (1.0: linear listing; N_large/N_small: quadratic).
- A live tail (``follow``) of a file-backend log of E events appended two at a time, from
  another checkpointer (as a second process would): each new event walked every frame
  header from the start. Reported:
  the median latency from an append to its delivery at E small and E large, and the ratio.
- ``subscribe`` and ``close`` of S live-event subscriptions (each to every session): each
  copied every subscriber.
  Reported: microseconds per subscription (subscribe and close) at S small and S large.

Candidate and baseline sizes are measured in the same run, interleaved by rounds.

    python bench/bench_long_sessions.py            # 5 rounds
    python bench/bench_long_sessions.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _common import add_common_args, print_header

from liteagent.actors import EventHub
from liteagent.eventlog import file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock, UserPrompt
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent


def _session_of(turns: int, root: Path) -> LiteAgent:
    """An agent whose session "big" has ``turns`` turns, each one write_file call."""
    work = root / "work"
    work.mkdir(parents=True)
    script: list[AssistantMessage] = []
    for i in range(turns):
        call = ToolUseBlock(
            f"toolu_{i}", "write_file", {"path": f"src/f{i % 100}.py", "content": f"v = {i}\n"}
        )
        script.append(AssistantMessage(content=(call,), stop_reason="tool_use"))
        script.append(AssistantMessage(content=(TextBlock("done"),), stop_reason="end_turn"))
    agent = create_lite_agent(
        model=scripted(script),
        model_name="m",
        workdir=work,
        checkpointer=sqlite_checkpointer(root / "s.db"),
        context=False,
    )
    agent.resume("big")
    for i in range(turns):
        agent.send(f"update file {i % 100}")
    return agent


def _list_seconds(agent: LiteAgent) -> float:
    start = time.perf_counter()
    listed = agent.list_checkpoints("big")
    return (time.perf_counter() - start) / len(listed)


def _prompt(i: int) -> UserPrompt:
    return UserPrompt(content=(TextBlock(f"event {i} " + "x" * 200),))


def _log_of(store: Path, events: int) -> None:
    """A file-backend session "s" of ``events`` events, appended two at a time (as a turn
    appends them: one frame per append)."""
    with file_checkpointer(store, durability="normal") as writer:
        for start in range(0, events, 2):
            writer.append("s", [_prompt(i) for i in range(start, min(start + 2, events))])


def _follow_latency(store: Path, probes: int) -> float:
    """The median seconds from an append to its delivery to a follower of the log at
    ``store``, read through another checkpointer."""
    with file_checkpointer(store) as writer, file_checkpointer(store) as reader:
        events = writer.head("s")
        follower = reader.follow("s", since=events)
        got: list[float] = []
        done = threading.Event()

        def consume() -> None:
            for _ in follower:
                got.append(time.perf_counter())
                if len(got) == probes:
                    done.set()
                    return

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        time.sleep(0.2)  # the follower reached the head (its first read walks the whole log)
        sent: list[float] = []
        for i in range(probes):
            sent.append(time.perf_counter())
            writer.append("s", [_prompt(events + i)])
            while len(got) <= i and not done.is_set():
                time.sleep(0.0005)
        done.wait(60)
        follower.close()
        thread.join(10)
    return statistics.median(b - a for a, b in zip(sent, got, strict=True))


def _subscription_us(count: int) -> tuple[float, float]:
    """Microseconds per subscribe and per close, with ``count`` subscriptions."""
    hub = EventHub()
    start = time.perf_counter()
    subs = [hub.subscribe(maxsize=8) for _ in range(count)]  # each to every session
    mid = time.perf_counter()
    for sub in subs:
        sub.close()
    end = time.perf_counter()
    return (mid - start) / count * 1e6, (end - mid) / count * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=5)
    args = p.parse_args()
    rounds = args.rounds = args.rounds or (2 if args.quick else args.default_rounds)
    print_header("costs that must not grow with a session's size", args)
    turns = (100, 400) if args.quick else (500, 2000)
    events = (2_000, 20_000) if args.quick else (10_000, 200_000)
    subs = (1_000, 10_000) if args.quick else (1_000, 30_000)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        agents = [_session_of(n, root / f"turns-{n}") for n in turns]
        try:
            per: dict[int, list[float]] = {n: [] for n in turns}
            for r in range(rounds):
                for n, agent in (
                    zip(turns, agents, strict=True)
                    if r % 2 == 0
                    else reversed(list(zip(turns, agents, strict=True)))
                ):
                    per[n].append(_list_seconds(agent))
        finally:
            for agent in agents:
                agent.close()
        small, large = (min(per[n]) for n in turns)
        print(
            f"list_checkpoints: {turns[0]} turns {small * 1e6:.0f} µs per checkpoint, "
            f"{turns[1]} turns {large * 1e6:.0f} µs per checkpoint (best of {rounds}); "
            f"ratio large/small {large / small:.2f} (linear listing 1.0, quadratic "
            f"{turns[1] / turns[0]:.1f})"
        )

        for e in events:
            _log_of(root / f"follow-{e}", e)
        lat: dict[int, list[float]] = {e: [] for e in events}
        for r in range(rounds):
            order = events if r % 2 == 0 else tuple(reversed(events))
            for e in order:
                lat[e].append(_follow_latency(root / f"follow-{e}", 20))
        small, large = (statistics.median(lat[e]) for e in events)
        print(
            f"follow (file backend, another checkpointer): {events[0]} events "
            f"{small * 1e3:.2f} ms, {events[1]} events {large * 1e3:.2f} ms from append to "
            f"delivery (median of {rounds} rounds of 20); ratio large/small {large / small:.2f} "
            f"(a rescan per event: ~{events[1] / events[0]:.0f})"
        )

    us: dict[int, list[tuple[float, float]]] = {s: [] for s in subs}
    for r in range(rounds):
        for s in subs if r % 2 == 0 else tuple(reversed(subs)):
            us[s].append(_subscription_us(s))
    (sub_small, close_small), (sub_large, close_large) = (
        (min(x for x, _ in us[s]), min(y for _, y in us[s])) for s in subs
    )
    print(
        f"subscriptions: {subs[0]}: subscribe {sub_small:.1f} µs, close {close_small:.1f} µs "
        f"each; {subs[1]}: subscribe {sub_large:.1f} µs, close {close_large:.1f} µs each "
        f"(best of {rounds}); ratios large/small {sub_large / sub_small:.2f} and "
        f"{close_large / close_small:.2f} (copying every subscriber: ~{subs[1] / subs[0]:.0f})"
    )


if __name__ == "__main__":
    main()
