"""SQLite checkpointer append vs a raw apsw loop doing the same transaction shape.

Candidate: ``sqlite_checkpointer(file, synchronous=...).append(sid, batch)`` (validation, encoding,
``BEGIN IMMEDIATE``, read the position, insert with a checksum, update the sessions row, commit).
Baseline: a raw apsw connection on a separate database file with the same pragmas (WAL, same
synchronous, busy timeout 5000 ms, same journal_size_limit) and a comparable table, doing
``BEGIN IMMEDIATE``, ``SELECT max(seq)``, insert the SAME encoded body bytes, ``COMMIT``. The raw
loop gets the bodies pre-encoded; encoding is part of what the candidate's append costs.

Cases: 1 event of ~300 bytes per call, 100 such events per call, and 100 mixed realistic events
(tool outputs of a few hundred bytes to tens of KB) per call; for synchronous "normal" and "full".

    /tmp/venv/bin/python bench/bench_sqlite_append.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import apsw
import xxhash
from _common import (
    add_common_args,
    append_workloads,
    describe_workloads,
    dir_size,
    fmt_rate,
    interleave,
    print_header,
    profile_top,
    report_append_case,
    timed_loop,
)

from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog.types import Event

TARGET_1 = 0.7  # 1-event append >= 0.7x raw apsw
SID = "bench-session"

_RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
_RAW_INSERT = "INSERT INTO events(session_id, seq, ts, kind, body) VALUES (?, ?, ?, ?, ?)"


def raw_connection(path: str, synchronous: str, schema: str) -> apsw.Connection:
    """A connection with liteagent's pragmas: WAL, ``synchronous``, busy timeout 5000 ms."""
    conn = apsw.Connection(path)
    conn.set_busy_timeout(5000)
    conn.pragma("journal_mode", "wal")
    conn.pragma("synchronous", synchronous.upper())
    conn.pragma("journal_size_limit", 64 * 1024 * 1024)
    conn.execute(schema)
    return conn


def raw_append(conn: apsw.Connection, encoded: list[tuple[str, bytes]]) -> int:
    """One raw append: the minimal correct transaction for an append-only log."""
    ts = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        head = (
            conn.execute("SELECT max(seq) FROM events WHERE session_id = ?", (SID,)).fetchone()[0]
            or 0
        )
        if len(encoded) == 1:
            kind, body = encoded[0]
            conn.execute(_RAW_INSERT, (SID, head + 1, ts, kind, body))
        else:
            conn.executemany(
                _RAW_INSERT,
                [(SID, head + 1 + i, ts, k, b) for i, (k, b) in enumerate(encoded)],
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(head) + len(encoded)


_SAME_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions(
    id TEXT PRIMARY KEY, head INTEGER NOT NULL, generation INTEGER NOT NULL, mtime REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
_SAME_INSERT = "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES (?, ?, ?, ?, ?, ?)"
_MASK = (1 << 63) - 1


def same_sql_append(conn: apsw.Connection, encoded: list[tuple[str, bytes]]) -> int:
    """A decomposition aid, not the baseline: raw apsw running the statements liteagent runs
    (read the sessions row, insert with an xxh3 checksum, update the sessions row), with none of
    its Python layers. liteagent vs this is Python overhead; this vs raw is the SQL shape."""
    ts = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT head, generation FROM sessions WHERE id = ?", (SID,)).fetchone()
        head = 0 if row is None else row[0]
        rows = [
            (SID, head + 1 + i, ts, k, b, xxhash.xxh3_64_intdigest(b) & _MASK)
            for i, (k, b) in enumerate(encoded)
        ]
        if len(rows) == 1:
            conn.execute(_SAME_INSERT, rows[0])
        else:
            conn.executemany(_SAME_INSERT, rows)
        new_head = head + len(encoded)
        if row is None:
            conn.execute("INSERT INTO sessions VALUES (?, ?, 1, ?)", (SID, new_head, ts))
        else:
            conn.execute(
                "UPDATE sessions SET head = ?, mtime = ? WHERE id = ?", (new_head, ts, SID)
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(new_head)


def run_case(
    root: str, case: tuple[str, str, list[list[Event]], int], args: argparse.Namespace
) -> str:
    """Measure one case ``(synchronous, label, batches, calls per round)``; print its figures
    and return its summary line."""
    sync, label, batches, calls = case
    tag = f"{sync}-{label.replace(' ', '')}"
    lite_path = os.path.join(root, f"lite-{tag}.db")
    raw_path = os.path.join(root, f"raw-{tag}.db")
    cp = sqlite_checkpointer(lite_path, synchronous=sync)  # type: ignore[arg-type]
    conn = raw_connection(raw_path, sync, _RAW_SCHEMA)
    same = raw_connection(os.path.join(root, f"same-{tag}.db"), sync, _SAME_SCHEMA)
    try:
        encoded = [[encode_body(e) for e in b] for b in batches]
        loops = {
            "liteagent": timed_loop(lambda b: cp.append(SID, b), batches, calls),
            "raw apsw": timed_loop(lambda enc: raw_append(conn, enc), encoded, calls),
            "raw+same SQL": timed_loop(lambda enc: same_sql_append(same, enc), encoded, calls),
            "encode only": timed_loop(lambda b: [encode_body(e) for e in b], batches, calls),
        }
        for loop in loops.values():  # warm up: sessions, connections, statement caches
            loop()
        # fsync times vary a lot here: twice the rounds, each half as long, for "full"
        rounds = args.rounds * 2 if sync == "full" else args.rounds
        res = interleave(loops, calls, rounds)
        n = len(batches[0])
        ratio_best, ratio_med = report_append_case(
            f"synchronous={sync}, {label} per append, {calls} appends/round x {rounds} rounds",
            res,
            n,
            TARGET_1 if n == 1 else None,
            "raw apsw",
        )
        lt, rw, sm, enc = (res[k] for k in loops)
        print(
            f"   decomposition: liteagent / raw+same SQL {lt.best_rate / sm.best_rate:.2f}x "
            f"(Python layers), raw+same SQL / raw {sm.best_rate / rw.best_rate:.2f}x "
            f"(sessions row + checksum column); encoding alone is "
            f"{100 * enc.best_rate**-1 * lt.best_rate:.0f}% of a liteagent append"
        )
        print(
            f"   on disk: liteagent {dir_size(lite_path, lite_path + '-wal') >> 20} MiB, "
            f"raw {dir_size(raw_path, raw_path + '-wal') >> 20} MiB"
        )
        if args.profile:
            print("   cProfile of the liteagent loop:")
            print(profile_top(loops["liteagent"]))
        return (
            f"{sync:6s} {label:12s} liteagent {fmt_rate(lt.best_rate):>7s}/s  "
            f"raw {fmt_rate(rw.best_rate):>7s}/s  ratio {ratio_best:.2f}x "
            f"({ratio_med:.2f}x)"
        )
    finally:
        cp.close()
        conn.close()
        same.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, rounds=7)
    args = p.parse_args()
    args.rounds = args.rounds or (3 if args.quick else args.default_rounds)
    print_header("SQLite append: sqlite_checkpointer vs raw apsw", args)

    workloads = append_workloads()
    print(describe_workloads(workloads))
    scale = 0.1 if args.quick else 1.0
    calls = {  # appends per round
        ("normal", "1 x 300 B"): 5000,
        ("normal", "100 x 300 B"): 250,
        ("normal", "100 x mixed"): 50,
        ("full", "1 x 300 B"): 750,
        ("full", "100 x 300 B"): 75,
        ("full", "100 x mixed"): 20,
    }
    root = args.dir or tempfile.mkdtemp(prefix="bench-sqlite-")
    os.makedirs(root, exist_ok=True)
    try:
        summary = [
            run_case(root, (sync, label, workloads[label], max(10, int(n * scale))), args)
            for (sync, label), n in calls.items()
        ]
        print(
            "\n== summary (appends/s, best of rounds; ratio = best/best, in brackets the "
            "median of per-round ratios)"
        )
        for line in summary:
            print("  ", line)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
