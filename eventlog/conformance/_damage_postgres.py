"""Random damage to a closed PostgreSQL store, for the corruption suite.

:func:`damage_postgres` edits the rows of one session behind the checkpointer's back, in SQL: a
bit flipped in an event's ``kind``, ``ts``, ``body`` or ``crc``; rows deleted (the last ones or
one in the middle), swapped or copied over another by seq edits; an orphan row stored after the
recorded head; the session's record deleted (its rows become orphans) or its head moved. The
server's own pages are not damaged (PostgreSQL checks those itself). Needs psycopg (the
``postgres`` extra).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["damage_postgres"]

_Row = tuple[int, float, str, bytes, int]
_Damage = Callable[[Any, str, str, list[_Row], random.Random], str]


def _flip_kind(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, kind, _body, _crc = rng.choice(rows)
    i = rng.randrange(len(kind))
    new = kind[:i] + chr((ord(kind[i]) ^ (1 << rng.randrange(5))) or 65) + kind[i + 1 :]
    conn.execute(
        f"UPDATE {s}.events SET kind = %s WHERE session_id = %s AND seq = %s",  # noqa: S608
        (new, sid, seq),
    )
    return f"flipped a bit of the kind of seq {seq}: {kind!r} -> {new!r}"


def _flip_ts(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, ts, _kind, _body, _crc = rng.choice(rows)
    raw = bytearray(struct.pack("<d", ts))
    raw[rng.randrange(8)] ^= 1 << rng.randrange(8)
    new = struct.unpack("<d", bytes(raw))[0]
    conn.execute(
        f"UPDATE {s}.events SET ts = %s WHERE session_id = %s AND seq = %s",  # noqa: S608
        (new, sid, seq),
    )
    return f"flipped a bit of the ts of seq {seq}: {ts!r} -> {new!r}"


def _flip_body(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, _kind, body, _crc = rng.choice(rows)
    data = bytearray(body)
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    conn.execute(
        f"UPDATE {s}.events SET body = %s WHERE session_id = %s AND seq = %s",  # noqa: S608
        (bytes(data), sid, seq),
    )
    return f"flipped a bit of the body of seq {seq}"


def _flip_crc(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, _kind, _body, crc = rng.choice(rows)
    bit = rng.randrange(63)
    conn.execute(
        f"UPDATE {s}.events SET crc = %s WHERE session_id = %s AND seq = %s",  # noqa: S608
        (crc ^ (1 << bit), sid, seq),
    )
    return f"flipped bit {bit} of the crc of seq {seq}"


def _delete_last(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    n = rng.randint(1, len(rows))
    first = rows[-n][0]
    conn.execute(f"DELETE FROM {s}.events WHERE session_id = %s AND seq >= %s", (sid, first))  # noqa: S608
    return f"deleted the last {n} rows (seq >= {first})"


def _delete_middle(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    if len(rows) < 2:
        return _delete_last(conn, s, sid, rows, rng)
    seq = rows[rng.randrange(len(rows) - 1)][0]
    conn.execute(f"DELETE FROM {s}.events WHERE session_id = %s AND seq = %s", (sid, seq))  # noqa: S608
    return f"deleted the row of seq {seq} (not the last)"


def _swap(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    if len(rows) < 2:
        return _orphan(conn, s, sid, rows, rng)
    a, b = sorted(r[0] for r in rng.sample(rows, 2))
    move = f"UPDATE {s}.events SET seq = %s WHERE session_id = %s AND seq = %s"  # noqa: S608
    conn.execute(move, (-1, sid, a))
    conn.execute(move, (a, sid, b))
    conn.execute(move, (b, sid, -1))
    return f"swapped the rows of seqs {a} and {b} (seq edits)"


def _copy_over(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    if len(rows) < 2:
        return _orphan(conn, s, sid, rows, rng)
    src, dst = rng.sample(rows, 2)
    conn.execute(
        f"UPDATE {s}.events SET ts = %s, kind = %s, body = %s, crc = %s"  # noqa: S608
        " WHERE session_id = %s AND seq = %s",
        (src[1], src[2], src[3], src[4], sid, dst[0]),
    )
    return f"copied the row of seq {src[0]} over seq {dst[0]}"


def _orphan(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    src = rng.choice(rows)
    seq = rows[-1][0] + 1
    conn.execute(
        f"INSERT INTO {s}.events (session_id, seq, ts, kind, body, crc)"  # noqa: S608
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (sid, seq, src[1], src[2], src[3], src[4]),
    )
    return f"stored an orphan row (a copy of seq {src[0]}) at seq {seq}, after the head"


def _drop_record(conn: Any, s: str, sid: str, rows: list[_Row], _rng: random.Random) -> str:
    conn.execute(f"DELETE FROM {s}.sessions WHERE id = %s", (sid,))  # noqa: S608
    return f"deleted the session's record ({len(rows)} rows left as orphans)"


def _move_head(conn: Any, s: str, sid: str, rows: list[_Row], rng: random.Random) -> str:
    delta = rng.choice([-1, 1, 2]) if len(rows) > 1 else rng.choice([1, 2])
    conn.execute(f"UPDATE {s}.sessions SET head = head + %s WHERE id = %s", (delta, sid))  # noqa: S608
    return f"moved the session's recorded head by {delta:+d}"


_DAMAGE: list[_Damage] = [
    _flip_kind,
    _flip_ts,
    _flip_body,
    _flip_crc,
    _delete_last,
    _delete_middle,
    _swap,
    _copy_over,
    _orphan,
    _drop_record,
    _move_head,
]


def damage_postgres(dsn: str, schema: str, session_id: str, rng: random.Random) -> str:
    """Damage the rows of ``session_id`` in the store in ``schema`` of the server ``dsn`` in
    one random way (one transaction); return what was done."""
    import psycopg  # noqa: PLC0415 -- the postgres extra, only when this runs

    s = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows: list[_Row] = [
            (int(r[0]), float(r[1]), str(r[2]), bytes(r[3]), int(r[4]))
            for r in conn.execute(
                f"SELECT seq, ts, kind, body, crc FROM {s}.events"  # noqa: S608
                " WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
        ]
        if not rows:
            return f"{_move_head(conn, s, session_id, rows, rng)} ({session_id})"
        with conn.transaction():
            what = rng.choice(_DAMAGE)(conn, s, session_id, rows, rng)
    return f"{what} ({session_id})"
