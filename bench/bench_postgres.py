"""PostgreSQL checkpointer vs raw psycopg loops on the same server, in the same run; and the
same operations on the SQLite checkpointer, for comparison.

Cases (``durability="full"``: ``synchronous_commit = on`` for liteagent and the raw loops):

- 1-event append: ``cp.append(sid, [event], expected_head=head)`` vs one autocommit
  ``INSERT`` per call (the raw loop tracks the seq itself). Target >= 0.6x.
- 100-event append: one ``cp.append`` of 100 events vs a transaction of 100 single-row
  ``INSERT`` statements (the same atomicity, one round trip per row). Target >= 1.5x.
- resume of a 100k-event session: ``list(cp.read(sid))`` vs one ``SELECT`` of the same rows
  and the same decoding (``decode_stored`` per row). Target: at most 1.5x the time.
- follow latency: the time from an append's return (its commit acknowledged) to the
  delivery of the event by a follower on another checkpointer (its own connections), with
  LISTEN/NOTIFY and with polling (``notify=False``).

Rounds of the candidate and its baseline are interleaved (``bench/_common.py``). The server is
``--dsn``, else ``$LITEAGENT_TEST_POSTGRES_DSN``, else a throwaway one started like the tests'
(``tests/_postgres_server.py``).

    python bench/bench_postgres.py [--quick] [--dsn DSN | --fsync]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from _common import (
    Measurement,
    add_common_args,
    fmt_rate,
    fmt_ratio,
    interleave,
    paired_ratio,
    print_header,
    small_events,
    timed_loop,
)

from liteagent.eventlog import Checkpointer, postgres_checkpointer, sqlite_checkpointer
from liteagent.eventlog._contract import decode_stored
from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog.types import Event

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres_server import start_server  # the tests' throwaway server

TARGET_1 = 0.6
TARGET_100 = 1.5
TARGET_RESUME = 1 / 1.5  # rate ratio: at most 1.5x the time
_RAW_SCHEMA = (
    "CREATE TABLE {s}.raw_events (session_id text NOT NULL, seq bigint NOT NULL,"
    " ts float8 NOT NULL, kind text NOT NULL, body bytea NOT NULL, PRIMARY KEY (session_id, seq))"
)


class RawLoop:
    """A raw psycopg connection writing and reading ``raw_events`` in ``schema``."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=5)
        self.conn.execute("SET synchronous_commit = on")
        self.schema = schema
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.conn.execute(_RAW_SCHEMA.replace("{s}", f'"{schema}"'))
        self.insert = (
            f'INSERT INTO "{schema}".raw_events (session_id, seq, ts, kind, body)'  # noqa: S608
            " VALUES (%s, %s, %s, %s, %b)"
        )
        self.heads: dict[str, int] = {}

    def append_one(self, sid: str, encoded: list[tuple[str, bytes]]) -> None:
        head = self.heads.get(sid, 0)
        ((kind, body),) = encoded
        self.conn.execute(self.insert, (sid, head + 1, time.time(), kind, body))
        self.heads[sid] = head + 1

    def append_many(self, sid: str, encoded: list[tuple[str, bytes]]) -> None:
        head = self.heads.get(sid, 0)
        ts = time.time()
        with self.conn.transaction():
            for i, (kind, body) in enumerate(encoded, start=1):
                self.conn.execute(self.insert, (sid, head + i, ts, kind, body))
        self.heads[sid] = head + len(encoded)

    def bulk(self, sid: str, encoded: list[tuple[str, bytes]]) -> None:
        ts = time.time()
        with (
            self.conn.cursor() as cur,
            cur.copy(
                f'COPY "{self.schema}".raw_events (session_id, seq, ts, kind, body) FROM STDIN'
            ) as copy,
        ):
            for i, (kind, body) in enumerate(encoded, start=1):
                copy.write_row((sid, i, ts, kind, body))

    def resume(self, sid: str) -> int:
        rows = (
            self.conn.cursor(binary=True)
            .execute(
                f'SELECT seq, ts, kind, body FROM "{self.schema}".raw_events'  # noqa: S608
                " WHERE session_id = %s ORDER BY seq",
                (sid,),
            )
            .fetchall()
        )
        return len([decode_stored(sid, seq, ts, kind, body) for seq, ts, kind, body in rows])

    def close(self) -> None:
        self.conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.conn.close()


def _appender(cp: Checkpointer, sid: str) -> Callable[[list[Event]], None]:
    head = [cp.head(sid)]

    def append(batch: list[Event]) -> None:
        head[0] = cp.append(sid, batch, expected_head=head[0])

    return append


def _report(title: str, res: dict[str, Measurement], n: int, base: str, target: float) -> float:
    print(f"\n-- {title}")
    for m in res.values():
        print(
            f"   {m.name:22s} best {fmt_rate(m.best_rate):>7s} calls/s "
            f"({fmt_rate(m.best_rate * n):>7s} events/s, {1e6 / m.best_rate:9.1f} us/call); "
            f"median {fmt_rate(m.median_rate):>7s} calls/s"
        )
    lt = res["postgres liteagent"]
    ratio = lt.best_rate / res[base].best_rate
    print(
        f"   postgres liteagent / {base}: best/best {fmt_ratio(ratio, target)}; "
        f"median of per-round ratios {paired_ratio(lt, res[base]):.2f}x"
    )
    if "sqlite liteagent" in res:
        print(
            f"   sqlite liteagent / postgres liteagent: "
            f"{res['sqlite liteagent'].best_rate / lt.best_rate:.2f}x"
        )
    return ratio


def bench_appends(
    pg: Checkpointer, quiet: Checkpointer, lite: Checkpointer, raw: RawLoop, args: Any
) -> list[str]:
    events = small_events()
    one = [[e] for e in events]
    hundred = [(events * 34)[:100]]
    calls_1 = 200 if args.quick else 1000
    calls_100 = 20 if args.quick else 100
    lines = []
    for label, batches, calls, raw_fn, target in (
        ("1 event", one, calls_1, raw.append_one, TARGET_1),
        ("100 events", hundred, calls_100, raw.append_many, TARGET_100),
    ):
        sid = f"append-{label.replace(' ', '')}"
        encoded = [[encode_body(e) for e in b] for b in batches]
        loops = {
            "postgres liteagent": timed_loop(_appender(pg, sid), batches, calls),
            "postgres, notify off": timed_loop(_appender(quiet, sid + "q"), batches, calls),
            "raw psycopg": timed_loop(lambda enc, sid=sid, f=raw_fn: f(sid, enc), encoded, calls),
            "sqlite liteagent": timed_loop(_appender(lite, sid), batches, calls),
        }
        for loop in loops.values():
            loop()
        res = interleave(loops, calls, args.rounds)
        base = "raw psycopg"
        what = "one autocommit INSERT" if label == "1 event" else "100 INSERTs in a transaction"
        ratio = _report(f"append of {label} per call vs {what}", res, len(batches[0]), base, target)
        quiet_ratio = res["postgres, notify off"].best_rate / res[base].best_rate
        lines.append(
            f"append {label:10s} postgres/raw {ratio:.2f}x, notify off {quiet_ratio:.2f}x "
            f"(target {target}); sqlite/postgres "
            f"{res['sqlite liteagent'].best_rate / res['postgres liteagent'].best_rate:.2f}x"
        )
    return lines


def bench_resume(pg: Checkpointer, lite: Checkpointer, raw: RawLoop, args: Any) -> list[str]:
    total = 20_000 if args.quick else 100_000
    events = (small_events() * (total // len(small_events()) + 1))[:total]
    sid = "resume"
    for i in range(0, total, 1000):
        pg.append(sid, events[i : i + 1000])
        lite.append(sid, events[i : i + 1000])
    raw.bulk(sid, [encode_body(e) for e in events])

    def timed(fn: Callable[[], int]) -> Callable[[], float]:
        def run() -> float:
            t = time.perf_counter()
            assert total == fn()
            return time.perf_counter() - t

        return run

    loops = {
        "postgres liteagent": timed(lambda: len(list(pg.read(sid)))),
        "raw psycopg": timed(lambda: raw.resume(sid)),
        "sqlite liteagent": timed(lambda: len(list(lite.read(sid)))),
    }
    res = interleave(loops, 1, max(3, args.rounds))
    title = f"resume of a {total:,}-event session (~300 B events) vs one SELECT + decode"
    ratio = _report(title, res, total, "raw psycopg", TARGET_RESUME)
    return [f"resume {total} events: postgres time / raw time {1 / ratio:.2f}x (target <= 1.5)"]


def _latency(writer: Checkpointer, follower: Checkpointer, sid: str, n: int) -> list[float]:
    got: dict[int, float] = {}
    done = threading.Event()

    def follow() -> None:
        with follower.follow(sid) as f:
            while len(got) < n:
                event = f.get(timeout=30)
                assert event is not None, "the follower stalled"
                got[event.seq] = time.perf_counter()
        done.set()

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.3)  # the follower is listening
    sent: dict[int, float] = {}
    head = writer.head(sid)
    event = small_events()[0]
    for _ in range(n):
        head = writer.append(sid, [event], expected_head=head)
        sent[head] = time.perf_counter()
        time.sleep(0.005)
    done.wait(60)
    t.join(60)
    return [(got[s] - sent[s]) * 1e3 for s in sent]


def _pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 2 else max(values)


def bench_follow(dsn: str, schema: str, lite_path: str, args: Any) -> list[str]:
    n = 100 if args.quick else 400
    lines = []
    cases: list[tuple[str, Callable[[], Checkpointer]]] = [
        ("postgres, LISTEN/NOTIFY", lambda: postgres_checkpointer(dsn, schema=schema)),
        (
            "postgres, polling 0.25 s",
            lambda: postgres_checkpointer(dsn, schema=schema, notify=False),
        ),
        ("sqlite, data_version", lambda: sqlite_checkpointer(lite_path)),
    ]
    print(
        "\n-- follow latency: append returned -> event delivered by another checkpointer "
        f"({n} events, one per ~5 ms)"
    )
    for label, make in cases:
        with make() as writer, make() as follower:
            ms = _latency(writer, follower, f"follow-{uuid.uuid4().hex[:8]}", n)
        p50, p99 = statistics.median(ms), _pct(ms, 99)
        print(f"   {label:26s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {max(ms):7.2f} ms")
        lines.append(f"follow {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--dsn", default=os.environ.get("LITEAGENT_TEST_POSTGRES_DSN"))
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="start a server of its own whose commits reach the disk (fsync on), ignoring --dsn",
    )
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 2 if args.quick else args.default_rounds
    server = None
    dsn = None if args.fsync else args.dsn
    if not dsn:
        started = start_server(own=True, fsync=args.fsync)
        if isinstance(started, str):
            raise SystemExit(started)
        server, dsn = started, started.dsn
    try:
        print_header("bench_postgres", args)
        with psycopg.connect(dsn) as conn:
            print(f"server: {conn.execute('SELECT version()').fetchone()[0]}")  # type: ignore[index]
            for name in ("fsync", "synchronous_commit", "shared_buffers"):
                print(f"   {name} = {conn.execute(f'SHOW {name}').fetchone()[0]}")  # type: ignore[index]
        schema = "bench_" + uuid.uuid4().hex[:8]
        with tempfile.TemporaryDirectory() as tmp:
            lite_path = os.path.join(tmp, "bench.db")
            pg = postgres_checkpointer(dsn, schema=schema)
            quiet = postgres_checkpointer(dsn, schema=schema, notify=False)
            lite = sqlite_checkpointer(lite_path, synchronous="full")
            raw = RawLoop(dsn, schema + "_raw")
            try:
                lines = bench_appends(pg, quiet, lite, raw, args)
                lines += bench_resume(pg, lite, raw, args)
            finally:
                pg.close()
                quiet.close()
                lite.close()
                raw.close()
            lines += bench_follow(dsn, schema, lite_path, args)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        print("\nsummary:")
        for line in lines:
            print("  " + line)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
