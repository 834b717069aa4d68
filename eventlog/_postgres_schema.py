"""The PostgreSQL backend's schema (version 2).

Every table lives in one schema (``liteagent`` by default; one store per schema). Opening a
checkpointer first reads ``schema_version`` (one statement, no lock); only when it is missing
does it create the store, in one transaction under a transaction-scoped advisory lock, so many
hosts may start at once: the first creates it, the others wait for it and find it ready. There
are no migrations: a schema of any other version (a newer liteagent's, or an older one written
by a development version before the first release) is refused with :class:`SchemaVersionError`,
and nothing is changed. No ``CREATE INDEX CONCURRENTLY`` (it cannot run in a transaction). Both
statements work through PgBouncer in transaction mode.

The tables (all names schema-qualified):

- ``sessions(id, head, generation, mtime, truncated_by)``: one row per session, the lock every
  write of the session takes; ``generation`` comes from the ``generations`` sequence (never
  reused); ``truncated_by`` is the id of the last truncate (its retry after a lost connection
  looks for it).
- ``events(session_id, seq, ts, kind, body, crc, batch_id)``, primary key ``(session_id, seq)``;
  ``crc`` is the xxh3 checksum of ``(session_id, seq, ts, kind, body)`` the SQLite backend uses;
  ``batch_id`` (on the last event of each append) makes a retried append exactly-once.
- ``blobs(ref, data, written)`` (``written``: the client's Unix time of the last put or touch,
  which garbage collection compares), ``leases(...)`` and ``quarantine(...)`` (rows a repair
  moved aside).
- ``ops(op_id, generation, at)``: the id of each truncate and delete, written in its
  transaction and kept for an hour, which its retry after a lost connection looks for (the
  session's own ``truncated_by`` is overwritten by the next truncate, and a delete leaves no
  row).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ._errors import SchemaVersionError

__all__ = ["SCHEMA_VERSION", "ensure_schema", "q"]

SCHEMA_VERSION = 2
"""The schema version this liteagent writes."""

_LOCK_NAMESPACE = 0x6C697465  # "lite": the advisory lock key is (this, hashtext(schema))

_CREATE: list[str] = [
    "CREATE SEQUENCE {s}.generations",
    "CREATE TABLE {s}.sessions ("
    " id text PRIMARY KEY,"
    " head bigint NOT NULL CHECK (head >= 0),"
    " generation bigint NOT NULL,"
    " mtime float8 NOT NULL,"
    " truncated_by uuid)",
    "CREATE TABLE {s}.events ("
    " session_id text NOT NULL,"
    " seq bigint NOT NULL,"
    " ts float8 NOT NULL,"
    " kind text NOT NULL,"
    " body bytea NOT NULL,"
    " crc bigint NOT NULL,"
    " batch_id uuid,"
    " PRIMARY KEY (session_id, seq))",
    "CREATE UNIQUE INDEX events_batch ON {s}.events (session_id, batch_id)"
    " WHERE batch_id IS NOT NULL",
    "CREATE TABLE {s}.blobs (ref text PRIMARY KEY, data bytea NOT NULL,"
    " written float8 NOT NULL DEFAULT 0)",
    "CREATE TABLE {s}.leases ("
    " session_id text PRIMARY KEY,"
    " owner text NOT NULL,"
    " pid integer NOT NULL,"
    " host text NOT NULL,"
    " started text NOT NULL,"
    " token bigint NOT NULL,"
    " expires_at float8 NOT NULL,"
    " backend_pid integer,"
    " backend_start timestamptz)",
    "CREATE TABLE {s}.quarantine ("
    " session_id text, seq bigint, ts float8, kind text, body bytea, crc bigint,"
    " reason text NOT NULL, generation bigint NOT NULL, moved_at float8 NOT NULL)",
    "CREATE TABLE {s}.ops (op_id uuid PRIMARY KEY, generation bigint NOT NULL, at float8 NOT NULL)",
]
"""The statements that create the store's objects, in order (``{s}``: the schema)."""


def q(template: str, schema: str) -> bytes:
    """``template`` with every ``{s}`` replaced by the quoted schema name, rendered once: a
    query given as bytes is parsed once per connection by psycopg (and prepared after a few
    runs), where a composed one would be rendered again on every execution."""
    return sql.SQL(template).format(s=sql.Identifier(schema)).as_bytes(None)


_HAS_SCHEMA = "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s"
_HAS_TABLE = (
    "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
    " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'schema_version'"
)


def _version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The stored schema version, ``None`` when there is no schema_version table. The
    catalogs are queried as tables (a fresh snapshot per statement): a name lookup could
    answer from this backend's cache, stale after another backend's commit while this one
    waited for the lock."""
    if conn.execute(_HAS_TABLE, (schema,)).fetchone() is None:
        return None
    found = conn.execute(q("SELECT max(version) FROM {s}.schema_version", schema)).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _refuse_unsupported(version: int | None, schema: str) -> None:
    """Refuse every version but ``None`` (no store yet) and :data:`SCHEMA_VERSION`."""
    if version is None or version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema {schema!r} is at version {version}, written by a newer liteagent "
            f"(this one knows up to {SCHEMA_VERSION}); it is left as it is"
        )
    if version < 1:
        raise SchemaVersionError(
            f"schema {schema!r} is at version {version}, which no liteagent writes; "
            "it is left as it is"
        )
    raise SchemaVersionError(
        f"schema {schema!r} is at version {version}, older than the version {SCHEMA_VERSION} "
        "this liteagent reads: it was written by a development version before the first "
        "release, and there is no migration from it; it is left as it is"
    )


def ensure_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the store in ``schema`` unless it is there (an autocommit connection); refuse
    one of another version. Safe to run from many processes at once."""
    found = _version(conn, schema)
    _refuse_unsupported(found, schema)
    if found is not None:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_NAMESPACE, schema))
        found = _version(conn, schema)  # again, under the lock: another host may have done it
        _refuse_unsupported(found, schema)
        if found is not None:
            return
        if conn.execute(_HAS_SCHEMA, (schema,)).fetchone() is None:
            conn.execute(q("CREATE SCHEMA {s}", schema))
        conn.execute(q("CREATE TABLE {s}.schema_version (version integer NOT NULL)", schema))
        for statement in _CREATE:
            conn.execute(q(statement, schema))
        conn.execute(
            q("INSERT INTO {s}.schema_version (version) VALUES (%s)", schema), (SCHEMA_VERSION,)
        )
