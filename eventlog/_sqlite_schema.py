"""The SQLite store's schema (``user_version`` 2) and the migration from schema 1.

Schema 1 checksummed an event's body only. Schema 2 checksums ``(session_id, seq, ts, kind,
body)`` and each sessions row's ``(id, head, generation)``, and adds the ``quarantine`` table
(rows moved aside by a repair, never deleted, kept with the values and types they had) and the
``leases`` table (who runs each session; one row per session, kept after release so its
fencing token keeps counting).

The migration runs once, in one ``BEGIN IMMEDIATE`` transaction (other processes opening the
file meanwhile wait for it): it checks every event row against its schema-1 checksum, then
writes its schema-2 checksum. A row that fails the old check is not blessed: it stays where it
was with the checksum ``-1``, which never matches, so reading it raises
:class:`CorruptLogError` naming its seq and a repair moves it to quarantine like any other
damage. Refusing the whole migration instead would leave the store unopenable by the version
that can repair it.
"""

from __future__ import annotations

from typing import cast

import apsw

from ._errors import CorruptLogError
from ._sqlite_rows import (
    MIGRATION_FAILED_CRC,
    Seeds,
    decode_raw,
    raw_select,
    row_crc,
    session_crc,
    v1_row_ok,
)

__all__ = ["COLUMNS", "INDEXES", "SCHEMA", "SCHEMA_VERSION", "TABLES", "migrate_from_1"]

SCHEMA_VERSION = 2

TABLES: dict[str, str] = {
    "sessions": """CREATE TABLE IF NOT EXISTS sessions(
    id TEXT PRIMARY KEY,
    head INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    mtime REAL NOT NULL,
    crc INTEGER NOT NULL
) WITHOUT ROWID""",
    "events": """CREATE TABLE IF NOT EXISTS events(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
    "blobs": """CREATE TABLE IF NOT EXISTS blobs(
    ref TEXT PRIMARY KEY,
    data BLOB NOT NULL
)""",
    "meta": """CREATE TABLE IF NOT EXISTS meta(
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID""",
    "quarantine": """CREATE TABLE IF NOT EXISTS quarantine(
    session_id, seq, ts, kind, body, crc,
    reason TEXT NOT NULL,
    generation INTEGER NOT NULL,
    moved_at REAL NOT NULL
)""",
    "leases": """CREATE TABLE IF NOT EXISTS leases(
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID""",
}
"""Each table of schema 2 (``CREATE TABLE IF NOT EXISTS``), in creation order."""

INDEXES: dict[str, str] = {
    "quarantine": "CREATE INDEX IF NOT EXISTS quarantine_session "
    "ON quarantine(session_id, generation)",
}
"""The explicit indexes of schema 2, by table."""

COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("id", "head", "generation", "mtime", "crc"),
    "events": ("session_id", "seq", "ts", "kind", "body", "crc"),
    "blobs": ("ref", "data"),
    "meta": ("key", "value"),
    "quarantine": (
        "session_id",
        "seq",
        "ts",
        "kind",
        "body",
        "crc",
        "reason",
        "generation",
        "moved_at",
    ),
    "leases": ("session_id", "owner", "pid", "host", "started", "token", "expires_at"),
}

_NEXT_GENERATION = "INSERT OR IGNORE INTO meta(key, value) VALUES ('next_generation', 1)"

SCHEMA = ";\n".join([*TABLES.values(), *INDEXES.values(), _NEXT_GENERATION]) + ";"
_TABLES_2 = ";\n".join([TABLES["quarantine"], INDEXES["quarantine"], TABLES["leases"]]) + ";"

_CHUNK = 5000


_EVENTS_1 = (
    f"SELECT rowid, {raw_select(('session_id', 'seq', 'ts', 'kind', 'body', 'crc'))} "  # noqa: S608
    "FROM events WHERE rowid > ? ORDER BY rowid LIMIT ?"
)
_SESSIONS_1 = f"SELECT {raw_select(('id', 'head', 'generation'))} FROM sessions"  # noqa: S608


def migrate_from_1(conn: apsw.Connection) -> int:
    """Migrate a schema-1 store to schema 2 inside the caller's transaction; return how many
    event rows failed their schema-1 checksum (kept, marked with ``-1``)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    if "crc" in columns:  # a later schema's table under a version 1 header
        raise CorruptLogError(
            None,
            None,
            "the database header says schema version 1, but its tables are of a later "
            "version: the header (PRAGMA user_version) was changed or damaged",
        )
    conn.execute("ALTER TABLE sessions ADD COLUMN crc INTEGER NOT NULL DEFAULT 0")
    seeds: dict[str, Seeds] = {}
    failed = 0
    last = 0
    while True:
        chunk = conn.execute(_EVENTS_1, (last, _CHUNK)).fetchall()
        if not chunk:
            break
        updates = []
        for raw in chunk:
            rowid, (sid, *row) = cast(int, raw[0]), decode_raw(raw[1:])
            last = rowid
            if type(sid) is str and v1_row_ok((row[0], row[1], row[2], row[3], row[4])):
                seq, ts, kind, body, _crc = row
                s = seeds.get(sid)
                if s is None:
                    s = seeds[sid] = Seeds(sid)
                crc = row_crc(s[kind], seq, ts, body)
            else:
                crc = MIGRATION_FAILED_CRC
                failed += 1
            updates.append((crc, rowid))
        conn.executemany("UPDATE events SET crc = ? WHERE rowid = ?", updates)
    sessions = []
    for raw in conn.execute(_SESSIONS_1).fetchall():
        sid, head, generation = decode_raw(raw)
        if (
            type(sid) is str
            and type(head) is int
            and type(generation) is int
            and 0 <= head < 1 << 63
            and 0 <= generation < 1 << 63
        ):
            sessions.append((session_crc(sid, head, generation), sid))
    conn.executemany("UPDATE sessions SET crc = ? WHERE id = ?", sessions)
    conn.execute(_TABLES_2)
    return failed
