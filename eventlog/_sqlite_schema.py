"""The SQLite store's schema (``user_version`` 2).

An event row's checksum covers ``(session_id, seq, ts, kind, body)`` and a sessions row's
``(id, head, generation)`` (see ``_sqlite_rows``). The ``quarantine`` table holds the rows a
repair moved aside (never deleted, kept with the values and types they had); the ``leases``
table says who runs each session (one row per session, kept after release so its fencing token
keeps counting, and removed with the session).

A new database gets the whole schema in one transaction. There is no migration: a database of
any other version (an older one was written by a development version before the first release)
is refused with ``SchemaVersionError`` before anything in it is changed.
"""

from __future__ import annotations

__all__ = ["COLUMNS", "INDEXES", "SCHEMA", "SCHEMA_VERSION", "TABLES"]

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
