"""Where the SQLite read path's time goes, step by step, against the raw select + decode.

Each loop reads the same 100,000-event session (or ``--events N``) from the same database and
decodes every body; each adds one thing liteagent's ``read`` does:

1. raw: ``SELECT kind, body ... ORDER BY seq`` + decode (the resume benchmark's baseline);
2. +columns: the same with all five columns liteagent reads (seq, ts, kind, body, crc);
3. +checks: plus the per-event checksum comparison and the ``StoredEvent`` envelope;
4. liteagent: ``list(cp.read(sid))`` (adds paging with a generation check, and the generator).

    /tmp/venv/bin/python bench/bench_read_split.py [--quick] [--events N] [--rounds N]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import msgspec
import xxhash
from _common import EventFactory, add_common_args, print_header

from liteagent.eventlog import StoredEvent, sqlite_checkpointer
from liteagent.eventlog._eventcodec import DECODERS
from liteagent.eventlog.types import Event

SID = "bench"
_DECODE = msgspec.msgpack.Decoder(Event).decode
_MASK = (1 << 63) - 1


def _loops(db: str) -> dict[str, Callable[[], int]]:
    get, xxh = DECODERS.get, xxhash.xxh3_64_intdigest

    def raw() -> int:
        conn = apsw.Connection(db)
        sql = "SELECT kind, body FROM events WHERE session_id = ? ORDER BY seq"
        out = [_DECODE(body) for _kind, body in conn.execute(sql, (SID,))]
        conn.close()
        return len(out)

    def columns() -> int:
        conn = apsw.Connection(db)
        sql = "SELECT seq, ts, kind, body, crc FROM events WHERE session_id = ? ORDER BY seq"
        out = [_DECODE(body) for _s, _t, _k, body, _c in conn.execute(sql, (SID,))]
        conn.close()
        return len(out)

    def checks() -> int:
        conn = apsw.Connection(db)
        sql = "SELECT seq, ts, kind, body, crc FROM events WHERE session_id = ? ORDER BY seq"
        out = []
        for seq, ts, kind, body, crc in conn.execute(sql, (SID,)):
            if xxh(body) & _MASK != crc:
                raise AssertionError("checksum")
            decoder = get(kind)
            assert decoder is not None
            out.append(StoredEvent(seq, ts, kind, decoder.decode(body)))
        conn.close()
        return len(out)

    def liteagent() -> int:
        with sqlite_checkpointer(db) as cp:
            return len(list(cp.read(SID)))

    return {"raw": raw, "+columns": columns, "+checks": checks, "liteagent": liteagent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_common_args(parser, rounds=5)
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else args.default_rounds)
    n = 10_000 if args.quick else args.events
    print_header(f"SQLite read path, step by step ({n} events)", args)
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-read-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        db = str(root / "read.db")
        with sqlite_checkpointer(db) as cp:
            for batch in EventFactory().batches(n, 100):
                cp.append(SID, batch)
        loops = _loops(db)
        best = {name: float("inf") for name in loops}
        for _ in range(args.rounds):
            for name, fn in loops.items():  # interleaved, same order each round
                gc.collect()
                start = time.perf_counter()
                assert n == fn()
                best[name] = min(best[name], time.perf_counter() - start)
        for name, seconds in best.items():
            print(f"   {name:<10} best {seconds:.3f} s  ({seconds / best['raw']:.2f}x raw)")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
