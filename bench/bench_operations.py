"""A daemon compacting many sessions at once: the agent's operation pool against one at a time.

One asyncio process, ``create_async_lite_agent`` on a SQLite file, N sessions of one turn each,
and a summarizing compactor whose model call sleeps ``--latency`` seconds (releasing the GIL as
an HTTP call would) and replaces the conversation with a one-line summary. Candidate: every
session's ``await agent.compact(session_id=...)`` started at once (the agent runs up to
``MAX_OPERATIONS`` at a time, each on a compactor actor of its own). Baseline, in the same
process, alternating with it: the same compactions awaited one after another (what an agent whose
compactions run one at a time gives at best). Each round compacts fresh sessions.

Also measured during the candidate's compactions: how long a read (``list_checkpoints`` of an
idle session) takes, against the same read with nothing running, and the peak thread count.

    python bench/bench_operations.py [--sessions 64] [--latency 0.05] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence

from _common import environment, library_fingerprint

from liteagent.context import Compactor, CompactResult, estimate_tokens
from liteagent.eventlog import CancelToken, sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, Message, TextBlock, Usage
from liteagent.providers import scripted
from liteagent.sdk import AsyncLiteAgent, create_async_lite_agent
from liteagent.sdk._core import MAX_OPERATIONS


class Summarizer(Compactor):
    """A model call of ``latency`` seconds, then a one-line summary."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    @property
    def spills(self) -> bool:
        return False

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,  # noqa: ARG002 -- the interface's; a summary needs none
        instructions: str | None = None,  # noqa: ARG002
        *,
        cancel: CancelToken | None = None,  # noqa: ARG002
    ) -> CompactResult:
        time.sleep(self.latency)
        kept = (Message("user", (TextBlock("[summary]"),)),)
        return CompactResult(
            messages=kept,
            changed=True,
            tokens_before=estimate_tokens(messages),
            tokens_after=estimate_tokens(kept),
        )


async def read_latency(agent: AsyncLiteAgent, reads: int) -> list[float]:
    """Seconds per ``list_checkpoints`` of the idle session ``reader``."""
    out = []
    for _ in range(reads):
        start = time.perf_counter()
        await agent.list_checkpoints("reader")
        out.append(time.perf_counter() - start)
        await asyncio.sleep(0.005)
    return out


async def run(args: argparse.Namespace) -> None:
    root = tempfile.mkdtemp(prefix="bench-ops-")
    rounds = 1 if args.quick else args.rounds
    sessions = 16 if args.quick else args.sessions
    n_turns = 1 + 2 * rounds * sessions
    reply = AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
    agent = create_async_lite_agent(
        model=scripted([reply] * n_turns),
        model_name="m",
        workdir=root,
        checkpointer=sqlite_checkpointer(os.path.join(root, "log.db")),
        compactor=Summarizer(args.latency),
    )
    peak = threading.active_count()
    results: dict[str, list[float]] = {"at once": [], "one at a time": []}
    reads_busy: list[float] = []
    try:
        await agent.send("hello", session_id="reader")
        reads_idle = await read_latency(agent, 20)
        for r in range(rounds):
            for case in (
                ("at once", "one at a time") if r % 2 == 0 else ("one at a time", "at once")
            ):
                ids = [f"r{r}-{case[:3].strip()}-{i}" for i in range(sessions)]
                await asyncio.gather(*(agent.send("hi", session_id=s) for s in ids))
                start = time.perf_counter()
                if case == "at once":
                    work = asyncio.gather(*(agent.compact(session_id=s) for s in ids))
                    reader = asyncio.ensure_future(read_latency(agent, 10))
                    stats = await work
                    reads_busy += await reader
                    peak = max(peak, threading.active_count())
                else:
                    stats = [await agent.compact(session_id=s) for s in ids]
                elapsed = time.perf_counter() - start
                assert all(s.changed for s in stats)
                results[case].append(elapsed)
                peak = max(peak, threading.active_count())
    finally:
        await agent.close()
    at_once, serial = min(results["at once"]), min(results["one at a time"])
    print(
        f"{sessions} sessions, a {args.latency * 1000:.0f} ms summarizer, {rounds} round(s), "
        f"MAX_OPERATIONS = {MAX_OPERATIONS}"
    )
    print(f"  at once:        best {at_once:.2f} s ({sessions / at_once:.0f} compactions/s)")
    print(f"  one at a time:  best {serial:.2f} s ({sessions / serial:.0f} compactions/s)")
    print(f"  ratio:          {serial / at_once:.2f}x (bound: {MAX_OPERATIONS}x)")
    print(
        f"  list_checkpoints: idle median {statistics.median(reads_idle) * 1000:.1f} ms, "
        f"during the compactions median {statistics.median(reads_busy) * 1000:.1f} ms, "
        f"max {max(reads_busy) * 1000:.1f} ms"
    )
    print(f"  peak threads {peak}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    print(environment())
    print(library_fingerprint())
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
