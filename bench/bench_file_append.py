"""File checkpointer append vs a raw ``os.write`` loop on an ``O_APPEND`` file descriptor.

Candidate: ``file_checkpointer(root, durability=...).append(sid, batch)`` (validation, encoding,
framing with checksums, the per-session thread lock, ``flock``, a ``stat`` to check the path still
names the locked file, one ``write``; ``fdatasync`` with durability "full").
Baseline: ``os.write`` of the SAME encoded body bytes to an fd opened with ``O_APPEND``
(a batch is joined and written with one call), plus ``os.fdatasync`` for "full".
Also measured, to split the gap: "raw+frame" builds liteagent's frame (``encode_payload`` +
``build_frame`` from ``liteagent.eventlog._frames``) and writes it with no lock and no stat, and
"encode only" is the event encoding alone.

Targets: durability "normal" >= 0.5x raw write; "full" >= 0.8x raw write + fdatasync (1 event
of ~300 bytes per append).

    /tmp/venv/bin/python bench/bench_file_append.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import (
    add_common_args,
    append_workloads,
    describe_workloads,
    dir_size,
    interleave,
    print_header,
    profile_top,
    report_append_case,
    timed_loop,
)

from liteagent.eventlog import file_checkpointer
from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog.types import Event

try:  # internals, for the decomposition only; the benchmark runs without them
    from liteagent.eventlog._contract import EncodedEvent
    from liteagent.eventlog._frames import build_frame, encode_payload
except ImportError:  # pragma: no cover - the library reorganised its internals
    build_frame = None  # type: ignore[assignment]

TARGETS = {"normal": 0.5, "full": 0.8}  # 1-event append vs raw write (+ fdatasync)
SID = "bench-session"
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


def raw_writer(fd: int, full: bool) -> Callable[[list[bytes]], None]:
    """The raw baseline: one ``os.write`` of the joined bodies (and ``fdatasync`` if full)."""
    write, sync, join = os.write, os.fdatasync, b"".join

    def append(bodies: list[bytes]) -> None:
        write(fd, bodies[0] if len(bodies) == 1 else join(bodies))
        if full:
            sync(fd)

    return append


def locked_writer(fd: int, path: str, full: bool) -> Callable[[list[bytes]], None]:
    """The raw write plus the syscalls of liteagent's multi-process protocol, nothing else:
    ``flock(LOCK_EX)``, ``stat(path)`` (does the path still name the locked file?), the write,
    ``flock(LOCK_UN)``. The floor for any append that keeps that protocol."""
    write, sync, join, flock, stat = os.write, os.fdatasync, b"".join, fcntl.flock, os.stat
    ex, un = fcntl.LOCK_EX, fcntl.LOCK_UN

    def append(bodies: list[bytes]) -> None:
        flock(fd, ex)
        try:
            stat(path)
            write(fd, bodies[0] if len(bodies) == 1 else join(bodies))
            if full:
                sync(fd)
        finally:
            flock(fd, un)

    return append


def frame_writer(fd: int, full: bool) -> Callable[[list[Event]], None]:
    """liteagent's framing (encode + frame + checksums) and one write, without locks or stats."""
    head = [0]

    def append(batch: list[Event]) -> None:
        enc = [EncodedEvent(*encode_body(e)) for e in batch]
        frame = build_frame(encode_payload(enc, time.time(), None), head[0] + 1, len(enc))
        os.write(fd, frame)
        if full:
            os.fdatasync(fd)
        head[0] += len(enc)

    return append


def run_case(
    root: str, case: tuple[str, str, list[list[Event]], int], args: argparse.Namespace
) -> str:
    """Measure one case ``(durability, label, batches, calls per round)``; print its figures and
    return its summary line."""
    durability, label, batches, calls = case
    full = durability == "full"
    tag = f"{durability}-{label.replace(' ', '')}"
    cp = file_checkpointer(os.path.join(root, f"lite-{tag}"), durability=durability)  # type: ignore[arg-type]
    raw_path = os.path.join(root, f"raw-{tag}.bin")
    frame_path = os.path.join(root, f"frame-{tag}.bin")
    locked_path = os.path.join(root, f"locked-{tag}.bin")
    raw_fd = os.open(raw_path, _FLAGS, 0o644)
    frame_fd = os.open(frame_path, _FLAGS, 0o644)
    locked_fd = os.open(locked_path, _FLAGS, 0o644)
    try:
        bodies = [[encode_body(e)[1] for e in b] for b in batches]
        loops: dict[str, Callable[[], float]] = {
            "liteagent": timed_loop(lambda b: cp.append(SID, b), batches, calls),
            "raw write": timed_loop(raw_writer(raw_fd, full), bodies, calls),
            "raw+flock+stat": timed_loop(
                locked_writer(locked_fd, locked_path, full), bodies, calls
            ),
        }
        if build_frame is not None:
            loops["raw+frame"] = timed_loop(frame_writer(frame_fd, full), batches, calls)
        loops["encode only"] = timed_loop(lambda b: [encode_body(e) for e in b], batches, calls)
        for loop in loops.values():  # warm up: create the files, the handle, the caches
            loop()
        # fsync times vary a lot here: twice the rounds, each half as long, for "full"
        rounds = args.rounds * 2 if durability == "full" else args.rounds
        res = interleave(loops, calls, rounds)
        n = len(batches[0])
        what = "write + fdatasync" if full else "write"
        ratio_best, ratio_med = report_append_case(
            f"durability={durability}, {label} per append, {calls} appends/round "
            f"x {rounds} rounds (baseline: raw {what})",
            res,
            n,
            TARGETS[durability] if n == 1 else None,
            "raw write",
        )
        us = {k: 1e6 / m.best_rate for k, m in res.items()}
        if "raw+frame" in res:
            lt, rw = us["liteagent"], us["raw write"]
            enc, lock = us["encode only"], us["raw+flock+stat"] - rw
            frame = us["raw+frame"] - rw - enc
            print(
                f"   decomposition (us/append, best of each, so only roughly additive): "
                f"liteagent {lt:.1f} = raw {what} {rw:.1f} + flock/stat/unflock {lock:.1f} + "
                f"encoding {enc:.1f} + framing/checksums {frame:.1f} + the rest (validation, "
                f"handle cache, Python calls) {lt - rw - lock - enc - frame:.1f}"
            )
        log = os.path.join(root, f"lite-{tag}", f"{SID}.log")
        print(
            f"   on disk: liteagent {dir_size(log) / 2**20:.1f} MiB, "
            f"raw {dir_size(raw_path) / 2**20:.1f} MiB"
        )
        if args.profile:
            print("   cProfile of the liteagent loop:")
            print(profile_top(loops["liteagent"]))
        return (
            f"{durability:6s} {label:12s} liteagent {us['liteagent']:8.1f} us  raw "
            f"{us['raw write']:8.1f} us  ratio {ratio_best:.2f}x ({ratio_med:.2f}x)"
        )
    finally:
        cp.close()
        os.close(raw_fd)
        os.close(frame_fd)
        os.close(locked_fd)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=7)
    args = p.parse_args()
    args.rounds = args.rounds or (3 if args.quick else args.default_rounds)
    print_header("File append: file_checkpointer vs raw os.write", args)
    workloads = append_workloads()
    print(describe_workloads(workloads))
    scale = 0.1 if args.quick else 1.0
    calls: dict[tuple[str, str], int] = {  # appends per round
        ("normal", "1 x 300 B"): 10_000,
        ("normal", "100 x 300 B"): 500,
        ("normal", "100 x mixed"): 100,
        ("full", "1 x 300 B"): 750,
        ("full", "100 x 300 B"): 150,
        ("full", "100 x mixed"): 30,
    }
    root = args.dir or tempfile.mkdtemp(prefix="bench-file-")
    os.makedirs(root, exist_ok=True)
    try:
        summary: list[Any] = [
            run_case(root, (dur, label, workloads[label], max(10, int(n * scale))), args)
            for (dur, label), n in calls.items()
        ]
        print(
            "\n== summary (us per append, best of rounds; ratio = liteagent rate / raw rate, "
            "best/best, in brackets the median of per-round ratios)"
        )
        for line in summary:
            print("  ", line)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
