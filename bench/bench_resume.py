"""Resume of a 100,000-event session: ``fold(cp.read(sid))`` vs a raw read + decode.

A session of mixed realistic events (appended in batches of 100) is built once in a SQLite
checkpointer and in a file checkpointer. Measured, interleaved, per backend:

- "liteagent resume": open the checkpointer, ``fold(cp.read(sid))`` (read + checks + decode +
  fold), as a process resuming a session does;
- "liteagent read": open, ``list(cp.read(sid))`` (no fold), to split the cost;
- "raw": SQLite: a raw apsw ``SELECT kind, body FROM events WHERE session_id = ? ORDER BY seq``
  on the same database; file: a plain length-prefixed file (u32 length + the same body bytes),
  written once and read in 1 MiB ``pread`` chunks. Both decode every body with one reused
  ``msgspec.msgpack.Decoder(Event)`` and keep the decoded events in a list (the fold keeps them
  too, in its state).

Target: resume <= 1.5x raw. The peak RSS delta of each (measured in a fresh child process, so
earlier work does not hide it) and the on-disk sizes are printed too.

    /tmp/venv/bin/python bench/bench_resume.py [--quick] [--profile] [--events N]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import apsw
import msgspec
from _common import (
    EventFactory,
    Measurement,
    add_common_args,
    dir_size,
    fmt_rate,
    fmt_ratio,
    interleave,
    paired_ratio,
    peak_rss_mib,
    print_header,
    profile_top,
)

from liteagent.eventlog import file_checkpointer, fold, sqlite_checkpointer
from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog.types import Event

TARGET = 1.5  # resume <= 1.5x raw
SID = "bench-resume"
_LEN = struct.Struct("<I")
_CHUNK = 1 << 20
_DECODER = msgspec.msgpack.Decoder(Event)


# -- the measured operations ----------------------------------------------------------------------


def lite_resume(kind: str, path: str) -> int:
    cp = sqlite_checkpointer(path) if kind == "sqlite" else file_checkpointer(path)
    try:
        return fold(cp.read(SID)).head
    finally:
        cp.close()


def lite_read(kind: str, path: str) -> int:
    cp = sqlite_checkpointer(path) if kind == "sqlite" else file_checkpointer(path)
    try:
        return len(list(cp.read(SID)))
    finally:
        cp.close()


def raw_sqlite(path: str) -> int:
    conn = apsw.Connection(path)
    try:
        conn.set_busy_timeout(5000)
        decode = _DECODER.decode
        rows = conn.execute(
            "SELECT kind, body FROM events WHERE session_id = ? ORDER BY seq", (SID,)
        )
        out = [decode(body) for _kind, body in rows]
    finally:
        conn.close()
    return len(out)


def raw_file(path: str) -> int:
    decode, unpack = _DECODER.decode, _LEN.unpack_from
    out: list[Any] = []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        total = os.fstat(fd).st_size
        pos = 0
        while pos < total:
            buf = os.pread(fd, _CHUNK, pos)
            view = memoryview(buf)
            off, n = 0, len(buf)
            while off + 4 <= n:
                end = off + 4 + unpack(buf, off)[0]
                if end > n:
                    break
                out.append(decode(view[off + 4 : end]))
                off = end
            if off == 0:  # one record larger than a chunk
                size = unpack(buf, 0)[0]
                out.append(decode(os.pread(fd, size, pos + 4)))
                off = 4 + size
            pos += off
    finally:
        os.close(fd)
    return len(out)


def operations(paths: dict[str, str]) -> dict[str, Callable[[], int]]:
    return {
        "sqlite resume": lambda: lite_resume("sqlite", paths["sqlite"]),
        "sqlite read": lambda: lite_read("sqlite", paths["sqlite"]),
        "sqlite raw": lambda: raw_sqlite(paths["sqlite"]),
        "file resume": lambda: lite_resume("file", paths["file"]),
        "file read": lambda: lite_read("file", paths["file"]),
        "file raw": lambda: raw_file(paths["raw_file"]),
    }


def timed(op: Callable[[], int], expected: int) -> Callable[[], float]:
    def run() -> float:
        gc.collect()
        t = time.perf_counter()
        n = op()
        dt = time.perf_counter() - t
        if n != expected:
            raise AssertionError(f"expected {expected} events, got {n}")
        return dt

    return run


# -- building the session and the child processes -------------------------------------------------


def build(root: str, n: int) -> tuple[dict[str, str], int]:
    """Write the same ``n`` events to all three stores; return the paths and the body bytes."""
    paths = {
        "sqlite": os.path.join(root, "lite.db"),
        "file": os.path.join(root, "sessions"),
        "raw_file": os.path.join(root, "raw.bin"),
    }
    sq = sqlite_checkpointer(paths["sqlite"])
    fc = file_checkpointer(paths["file"])
    body_bytes = 0
    try:
        with open(paths["raw_file"], "wb") as raw:
            for batch in EventFactory().batches(n, 100):
                sq.append(SID, batch)
                fc.append(SID, batch)
                for ev in batch:
                    body = encode_body(ev)[1]
                    body_bytes += len(body)
                    raw.write(_LEN.pack(len(body)) + body)
    finally:
        sq.close()
        fc.close()
    return paths, body_bytes


def child(name: str, paths_json: str) -> None:
    """In a fresh process: run one operation, print its seconds and peak RSS before/after."""
    op = operations(json.loads(paths_json))[name]
    gc.collect()
    before = peak_rss_mib()
    t = time.perf_counter()
    n = op()
    dt = time.perf_counter() - t
    print(
        json.dumps({"events": n, "seconds": dt, "rss_before": before, "rss_after": peak_rss_mib()})
    )


def rss_in_child(name: str, paths: dict[str, str]) -> dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, json.dumps(paths)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: S603 -- our own interpreter and script
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- main -----------------------------------------------------------------------------------------


def report(res: dict[str, Measurement], backend: str, n: int) -> str:
    resume, read, raw = (res[f"{backend} {k}"] for k in ("resume", "read", "raw"))
    fold_only = res["fold only"]
    print(f"\n-- {backend}: {n} events")
    for m in (resume, read, fold_only, raw):
        print(
            f"   {m.name:14s} best {m.best_time:7.3f} s ({fmt_rate(n / m.best_time):>7s} "
            f"events/s); median {m.median_time:7.3f} s"
        )
    ratio = resume.best_time / raw.best_time
    ratio_med = 1 / paired_ratio(resume, raw)
    print(
        f"   resume/raw: best/best {fmt_ratio(ratio, TARGET, higher_is_better=False)}; "
        f"median of per-round ratios {ratio_med:.2f}x"
    )
    print(
        f"   split (best): read+checks+decode {read.best_time:.3f} s "
        f"({read.best_time / raw.best_time:.2f}x raw); fold of the in-memory events "
        f"{fold_only.best_time:.3f} s ({fold_only.best_time / raw.best_time:.2f}x raw, "
        f"{1e6 * fold_only.best_time / n:.1f} us/event)"
    )
    return (
        f"{backend:6s} resume {resume.best_time:.3f} s  raw {raw.best_time:.3f} s  "
        f"ratio {ratio:.2f}x ({ratio_med:.2f}x)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=5)
    p.add_argument("--events", type=int, default=None, help="session length (default 100000)")
    p.add_argument("--child", nargs=2, metavar=("OPERATION", "PATHS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return
    args.rounds = args.rounds or (3 if args.quick else args.default_rounds)
    n = args.events or (10_000 if args.quick else 100_000)
    print_header(f"Resume of a {n}-event session: fold(cp.read(sid)) vs raw read + decode", args)
    root = args.dir or tempfile.mkdtemp(prefix="bench-resume-")
    os.makedirs(root, exist_ok=True)
    try:
        t = time.perf_counter()
        paths, body_bytes = build(root, n)
        print(
            f"built in {time.perf_counter() - t:.1f} s: {n} events, {body_bytes / 2**20:.1f} MiB "
            f"of msgpack bodies (mean {body_bytes / n:.0f} bytes/event)"
        )
        db = paths["sqlite"]
        log = os.path.join(paths["file"], f"{SID}.log")
        print(
            f"on disk: SQLite {dir_size(db, db + '-wal', db + '-shm') / 2**20:.1f} MiB "
            f"(db + wal + shm), file log {dir_size(log) / 2**20:.1f} MiB, raw length-prefixed "
            f"file {dir_size(paths['raw_file']) / 2**20:.1f} MiB"
        )
        ops = operations(paths)
        loops = {name: timed(op, n) for name, op in ops.items()}
        for loop in loops.values():  # warm up: page cache, imports
            loop()
        summary = []
        # the fold alone, over events already read and decoded (the same for both backends)
        with sqlite_checkpointer(paths["sqlite"]) as cp:
            stored = list(cp.read(SID))
        loops["fold only"] = timed(lambda: fold(stored).head, n)
        for backend in ("sqlite", "file"):
            names = [f"{backend} {k}" for k in ("resume", "read", "raw")]
            res = interleave({k: loops[k] for k in [*names, "fold only"]}, n, args.rounds)
            summary.append(report(res, backend, n))
            print("   peak RSS delta (fresh child process, one run each):")
            for name in names:
                r = rss_in_child(name, paths)
                print(
                    f"     {name:14s} +{r['rss_after'] - r['rss_before']:6.0f} MiB "
                    f"(peak {r['rss_after']:.0f} MiB, {r['seconds']:.3f} s cold-process run)"
                )
            if args.profile:
                print(f"   profile of {backend} resume:")
                print(profile_top(ops[f"{backend} resume"]))
        if args.profile:
            print("   profile of the fold alone (in-memory events):")
            print(profile_top(lambda: fold(stored)))
        print(
            "\n== summary (best of rounds; ratio = resume time / raw time, in brackets the "
            "median of per-round ratios)"
        )
        for line in summary:
            print("  ", line)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
