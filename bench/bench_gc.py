"""Garbage collection: what the integrity check that now precedes it costs.

``collect_garbage`` runs the store's ``check_integrity()`` first and refuses on damage (rows a
repair would bring back may reference blobs no listed session shows). This measures, on the
file and SQLite backends, a whole collection against the marking it did before (reading every
listed session for references), in the same run, interleaved; the ratio is what the check adds.

    python bench/bench_gc.py [--quick] [--sessions N] [--events N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from _common import add_common_args, fmt_rate, interleave, print_header

from liteagent.eventlog import Checkpointer, collect_garbage, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog._gc import referenced_blobs
from liteagent.eventlog.conformance import prompts


def _fill(cp: Checkpointer, sessions: int, events: int) -> None:
    """``sessions`` sessions of ``events`` user prompts (~250 bytes), 100 per append, each
    session with one blob reference."""
    for s in range(sessions):
        ref = cp.blobs.put(f"blob of session {s}".encode())
        for b in range(0, events, 100):
            texts = [f"session {s} event {b + i} " * 10 for i in range(min(100, events - b))]
            texts[0] += ref
            cp.append(f"s{s}", prompts(*texts))


def _timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=5)
    p.add_argument("--sessions", type=int, default=None, help="sessions (default 100)")
    p.add_argument("--events", type=int, default=None, help="events per session (default 1000)")
    args = p.parse_args()
    args.rounds = args.rounds or (2 if args.quick else args.default_rounds)
    sessions = args.sessions or (10 if args.quick else 100)
    events = args.events or (200 if args.quick else 1000)
    print_header("collect_garbage with its integrity check vs the marking alone", args)
    print(f"{sessions} sessions x {events} events (~250 B each), one blob per session")
    root = args.dir or tempfile.mkdtemp(prefix="bench-gc-")
    try:
        for name, make in (
            ("file", lambda: file_checkpointer(os.path.join(root, "files"))),
            ("sqlite", lambda: sqlite_checkpointer(os.path.join(root, "log.db"))),
        ):
            with make() as cp:
                _fill(cp, sessions, events)

                def mark(cp: Checkpointer = cp) -> None:
                    for info in cp.list():
                        referenced_blobs(cp, info.id)

                res = interleave(
                    {
                        "collect_garbage": _timed(lambda cp=cp: collect_garbage(cp, grace=0)),
                        "marking alone": _timed(mark),
                        "check_integrity": _timed(cp.check_integrity),
                    },
                    sessions * events,
                    args.rounds,
                )
                gc, base = res["collect_garbage"], res["marking alone"]
                print(f"\n-- {name}")
                for label, m in res.items():
                    print(
                        f"   {label:16s} best {m.best_time * 1000:7.0f} ms "
                        f"({fmt_rate(m.best_rate)} events/s)"
                    )
                print(f"   collect_garbage / marking alone: {gc.best_time / base.best_time:.2f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
