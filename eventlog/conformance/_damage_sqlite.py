"""Random damage to a closed SQLite store, for the corruption suite.

:func:`damage_sqlite` edits one event row of a session behind the checkpointer's back (a bit
flipped in its ``kind``, ``ts``, ``body`` or ``crc``; rows deleted, swapped or duplicated by seq
edits; a column stored with the wrong type), or damages the database file itself (random bit
flips, zeroed pages, a truncation). It returns a description of what it did.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

__all__ = ["damage_sqlite", "sqlite_store_file"]

_MAGIC = b"SQLite format 3\x00"
_Row = tuple[int, float, Any, Any, int]


def sqlite_store_file(path: Path) -> Path:
    """The database file of a store: ``path`` itself, or the one SQLite database in the
    folder ``path`` (or its one file besides SQLite's own, when damage left no database
    header to know it by)."""
    path = Path(path)
    if path.is_file():
        return path
    files = [
        p
        for p in sorted(path.iterdir())
        if p.is_file() and not p.name.endswith(("-wal", "-shm", "-journal"))
    ]
    found = []
    for p in files:
        with p.open("rb") as f:
            if f.read(16) == _MAGIC:
                found.append(p)
    if not found and len(files) == 1:
        found = files
    if len(found) != 1:
        raise FileNotFoundError(f"expected one SQLite database in {path}, found {found}")
    return found[0]


def _settle(db: Path) -> bool:
    """Fold the WAL into the database file and remove it, so file edits hit every row; return
    whether SQLite could (not when earlier damage left a file it cannot read)."""
    try:
        conn = apsw.Connection(os.fspath(db))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except apsw.Error:
        return False
    return True


def _rows(conn: apsw.Connection, sid: str) -> list[_Row]:
    return list(
        conn.execute(
            "SELECT seq, ts, kind, body, crc FROM events WHERE session_id = ? ORDER BY seq",
            (sid,),
        )
    )


def _flip_bit(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return b"\x01"
    b = bytearray(data)
    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _flip_kind(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, kind, _body, _crc = rng.choice(rows)
    raw = kind.encode("utf-8", "surrogatepass") if isinstance(kind, str) else bytes(kind)
    flipped = _flip_bit(raw, rng)
    conn.execute(
        "UPDATE events SET kind = CAST(? AS TEXT) WHERE session_id = ? AND seq = ?",
        (flipped, sid, seq),
    )
    return f"flipped a bit of the kind of seq {seq}: {raw!r} -> {flipped!r}"


def _flip_ts(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, ts, _kind, _body, _crc = rng.choice(rows)
    raw = struct.pack("<d", float(ts))
    new = ts
    for _ in range(100):
        new = struct.unpack("<d", _flip_bit(raw, rng))[0]
        if new == new:  # not NaN: SQLite would store NaN as NULL  # noqa: PLR0124
            break
    conn.execute("UPDATE events SET ts = ? WHERE session_id = ? AND seq = ?", (new, sid, seq))
    return f"flipped a bit of the ts of seq {seq}: {ts!r} -> {new!r}"


def _flip_body(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, _kind, body, _crc = rng.choice(rows)
    data = bytes(body) if isinstance(body, (bytes, memoryview)) else str(body).encode()
    conn.execute(
        "UPDATE events SET body = ? WHERE session_id = ? AND seq = ?",
        (_flip_bit(data, rng), sid, seq),
    )
    return f"flipped a bit of the body of seq {seq}"


def _flip_crc(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    seq, _ts, _kind, _body, crc = rng.choice(rows)
    bit = rng.randrange(63)
    conn.execute(
        "UPDATE events SET crc = ? WHERE session_id = ? AND seq = ?",
        (int(crc) ^ (1 << bit), sid, seq),
    )
    return f"flipped bit {bit} of the crc of seq {seq}"


def _delete_last(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    n = rng.randint(1, len(rows))
    first = rows[-n][0]
    conn.execute("DELETE FROM events WHERE session_id = ? AND seq >= ?", (sid, first))
    return f"deleted the last {n} rows (seq >= {first})"


def _delete_middle(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    if len(rows) < 2:
        return _delete_last(conn, sid, rows, rng)
    seq = rows[rng.randrange(len(rows) - 1)][0]
    conn.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (sid, seq))
    return f"deleted the row of seq {seq} (not the last)"


def _swap(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    if len(rows) < 2:
        return _duplicate(conn, sid, rows, rng)
    a, b = sorted(r[0] for r in rng.sample(rows, 2))
    q = "UPDATE events SET seq = ? WHERE session_id = ? AND seq = ?"
    conn.execute(q, (-1, sid, a))
    conn.execute(q, (a, sid, b))
    conn.execute(q, (b, sid, -1))
    return f"swapped the rows of seqs {a} and {b} (seq edits)"


def _duplicate(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    src = rng.choice(rows)
    if len(rows) > 1:
        dst = rng.choice([r for r in rows if r[0] != src[0]])
        conn.execute(
            "UPDATE events SET ts = ?, kind = ?, body = ?, crc = ? "
            "WHERE session_id = ? AND seq = ?",
            (src[1], src[2], src[3], src[4], sid, dst[0]),
        )
        return f"copied the row of seq {src[0]} over seq {dst[0]}"
    seq = rows[-1][0] + 1
    conn.execute(
        "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES (?, ?, ?, ?, ?, ?)",
        (sid, seq, src[1], src[2], src[3], src[4]),
    )
    return f"duplicated the row of seq {src[0]} as seq {seq}"


_RETYPE = {
    "body as TEXT": "UPDATE events SET body = CAST(body AS TEXT)",
    "seq as REAL": "UPDATE events SET seq = seq + 0.5",
    "kind as BLOB": "UPDATE events SET kind = CAST(kind AS BLOB)",
    "ts as TEXT": "UPDATE events SET ts = 'x' || ts",
    "crc as TEXT": "UPDATE events SET crc = 'crc' || crc",
    "body as INTEGER": "UPDATE events SET body = 7",
    "kind as NULL-like INTEGER": "UPDATE events SET kind = 42",
}


def _retype(conn: apsw.Connection, sid: str, rows: list[_Row], rng: random.Random) -> str:
    what = rng.choice(sorted(_RETYPE))
    seq = rng.choice(rows)[0]
    conn.execute(_RETYPE[what] + " WHERE session_id = ? AND seq = ?", (sid, seq))
    return f"changed a column's type at seq {seq}: {what}"


_ROW_DAMAGE: list[Callable[[apsw.Connection, str, list[_Row], random.Random], str]] = [
    _flip_kind,
    _flip_ts,
    _flip_body,
    _flip_crc,
    _delete_last,
    _delete_middle,
    _swap,
    _duplicate,
    _retype,
]


def _file_damage(db: Path, rng: random.Random) -> str:
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big") or 1
    page_size = 65536 if page_size == 1 else page_size
    pages = max(1, len(data) // page_size)
    style = rng.choice(["flip", "zero_page", "truncate"])
    if style == "flip":
        n = rng.randint(1, 3)
        where = sorted(rng.randrange(len(data)) for _ in range(n))
        for off in where:
            data[off] ^= 1 << rng.randrange(8)
        what = f"flipped {n} bits of the database file at bytes {where}"
    elif style == "zero_page":
        page = rng.randrange(pages)
        data[page * page_size : (page + 1) * page_size] = bytes(page_size)
        what = f"zeroed page {page + 1} of {pages} of the database file"
    else:
        # Never to 0 bytes: an empty file is a valid new database, not damage.
        cut = rng.choice([rng.randrange(1, len(data)), page_size * rng.randrange(1, pages + 1)])
        del data[cut:]
        what = f"cut the database file to {cut} bytes"
    db.write_bytes(bytes(data))
    return what


def damage_sqlite(path: Path, session_id: str, rng: random.Random) -> str:
    """Damage a closed SQLite store (the database file, or the folder holding it) in one random
    way, aimed at the rows of ``session_id`` where the damage is a row edit; return what was
    done. Row edits go through SQLite (the file stays a valid database); file damage writes the
    bytes directly, after the WAL was folded into the file. A store that earlier damage left
    unreadable to SQLite is damaged further in its bytes."""
    db = sqlite_store_file(Path(path))
    if not _settle(db) or rng.random() < 0.25:
        return _file_damage(db, rng)
    conn = apsw.Connection(os.fspath(db))
    try:
        rows = _rows(conn, session_id)
        if rows:
            with conn:
                return f"{rng.choice(_ROW_DAMAGE)(conn, session_id, rows, rng)} ({session_id})"
    except apsw.Error:
        pass  # earlier damage: SQLite cannot read the rows (or write them back)
    finally:
        with contextlib.suppress(apsw.Error):
            conn.close()
    return _file_damage(db, rng)
