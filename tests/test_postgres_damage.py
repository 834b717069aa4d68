"""PostgreSQL: damage and hostile set-ups found by an adversarial hunt. A stray row below seq 1
never costs the intact history in a repair; junk rows in ``blobs`` do not stop a collection; a
retried failure still there when the retry time is up is ``StorageIOError``; a pool of the
caller's gets the checkpointer's settings; a ConnectionPool subclass is a pool."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _postgres_server import Server
from psycopg_pool import ConnectionPool, NullConnectionPool

from liteagent.eventlog import collect_garbage, postgres_checkpointer
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import (
    CorruptLogError,
    InvalidArgumentError,
    LiteAgentError,
    StorageIOError,
)


@pytest.fixture
def schema(postgres_server: Server) -> Iterator[str]:
    """A fresh schema, dropped afterwards."""
    name = "d_" + uuid.uuid4().hex[:16]
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _sql(dsn: str, query: str, *args: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query, args or None)


@pytest.mark.parametrize("stray", ["extra row at seq 0", "seq 5 damaged to -5"])
def test_a_row_below_seq_1_never_costs_the_intact_history_in_a_repair(
    postgres_server: Server, schema: str, stray: str
) -> None:
    """A row at seq 0 beside a healthy history 1..5, or the row of seq 5 damaged to -5:
    ``repair`` used to keep nothing (its walk from seq 1 met the stray row first). It keeps
    1..5 (or 1..4), sets the stray row aside, and the session takes the next append."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("a", prompts("1", "2", "3", "4", "5"))
        cp.append("b", prompts("other"))
        events = f'"{schema}".events'
        if stray == "extra row at seq 0":
            _sql(
                dsn,
                f"INSERT INTO {events} (session_id, seq, ts, kind, body, crc) "  # noqa: S608
                f"SELECT session_id, 0, ts, kind, body, crc FROM {events} "
                "WHERE session_id = 'a' AND seq = 1",
            )
            kept = ["1", "2", "3", "4", "5"]
        else:
            _sql(dsn, f"UPDATE {events} SET seq = -5 WHERE session_id = 'a' AND seq = 5")  # noqa: S608
            kept = ["1", "2", "3", "4"]
        report = cp.repair("a")
        assert (True, len(kept)) == (report.repaired, report.kept_head)
        assert report.quarantine is not None
        assert kept == texts(cp.read("a"))
        cp.append("a", prompts("after"))
        assert [*kept, "after"] == texts(cp.read("a"))
        assert ["other"] == texts(cp.read("b"))


def test_junk_rows_in_blobs_do_not_stop_a_collection(postgres_server: Server, schema: str) -> None:
    """A row of ``blobs`` whose ref is no blob reference made every collection raise
    InvalidBlobRefError; it is not listed, and the unreferenced blobs around it go."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("s", prompts("a"))
        garbage = cp.blobs.put(b"unreferenced")
        _sql(
            dsn,
            f'INSERT INTO "{schema}".blobs (ref, data, written) '  # noqa: S608
            f"SELECT 'junk', data, written FROM \"{schema}\".blobs WHERE ref = %s",
            garbage,
        )
        assert [garbage] == [b.ref for b in cp.blobs.list_blobs()]
        time.sleep(0.05)
        assert 1 == collect_garbage(cp, grace=0).deleted
        assert not cp.blobs.has(garbage)


def test_a_lock_held_past_the_retry_time_is_a_storage_error(
    postgres_server: Server, schema: str
) -> None:
    """An append behind a lock held longer than ``retry_timeout``: its lock timeouts are
    retried, then it raises StorageIOError (as documented), not a CheckpointerError saying
    PostgreSQL "refused" it."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema, retry_timeout=3) as cp:
        cp.append("s", prompts("a"))
        with psycopg.connect(dsn) as holder:
            holder.execute(f'LOCK TABLE "{schema}".sessions IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(StorageIOError, match="retry time"):
                cp.append("s", prompts("b"))
            holder.rollback()
        assert ["a"] == texts(cp.read("s"))


def test_a_pool_of_the_callers_gets_the_checkpointers_settings(
    postgres_server: Server, schema: str
) -> None:
    """With a ConnectionPool of the caller's, the connections the checkpointer uses get its
    lock and statement timeouts and the durability's synchronous_commit (they used to get
    none: an append behind a table lock waited with no bound, and ``durability="full"``
    followed the server's setting). An append behind a lock now ends within the retry time."""
    dsn = postgres_server.dsn
    with (
        ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool,
        postgres_checkpointer(pool, schema=schema, retry_timeout=3) as cp,
    ):
        cp.append("s", prompts("a"))
        with pool.connection() as conn:
            shown = {
                k: conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
                for k in ("lock_timeout", "statement_timeout", "synchronous_commit")
            }
        assert {"lock_timeout": "5s", "statement_timeout": "1min"}.items() <= shown.items()
        assert "on" == shown["synchronous_commit"]
        with psycopg.connect(dsn) as holder:
            holder.execute(f'LOCK TABLE "{schema}".events IN ACCESS EXCLUSIVE MODE')
            outcome: list[BaseException | int] = []

            def append() -> None:
                try:
                    outcome.append(cp.append("s", prompts("b")))
                except BaseException as e:  # noqa: BLE001 -- looked at below
                    outcome.append(e)

            worker = threading.Thread(target=append, daemon=True)
            worker.start()
            worker.join(30)
            alive = worker.is_alive()
            holder.rollback()
        worker.join(30)
        assert not alive, "the append waited past 30 s behind the lock"
        assert [StorageIOError] == [type(o) for o in outcome]


def test_a_subclass_of_connection_pool_is_a_pool(postgres_server: Server, schema: str) -> None:
    """The pool check is isinstance (it compared the class's name: a NullConnectionPool was
    refused, and any class named ConnectionPool was taken)."""

    class ConnectionPool:  # a look-alike of another library
        """Not psycopg's."""

    with pytest.raises(InvalidArgumentError):
        postgres_checkpointer(ConnectionPool(), schema=schema)  # type: ignore[arg-type]
    with (
        NullConnectionPool(postgres_server.dsn, max_size=2, open=True) as pool,
        postgres_checkpointer(pool, schema=schema) as cp,
    ):
        cp.append("s", prompts("a"))
        assert ["a"] == texts(cp.read("s"))


def test_a_dsn_that_cannot_work_says_why(postgres_server: Server, schema: str) -> None:
    """A DSN that does not parse is InvalidArgumentError at once (it was retried for the
    whole retry time and reported as "unreachable"); a database that does not exist is
    StorageIOError carrying the server's own reason (the error said only "pool
    initialization incomplete")."""
    with pytest.raises(InvalidArgumentError, match="cannot be parsed"):
        postgres_checkpointer("not a dsn", schema=schema)  # before any connection is tried
    for listen in ("not a dsn", "host=x\x00"):  # it was taken: followers polled, silently
        with pytest.raises(InvalidArgumentError, match="listen_dsn"):
            postgres_checkpointer(postgres_server.dsn, schema=schema, listen_dsn=listen)
    missing = f"{postgres_server.dsn} dbname=no_such_db_{schema}"
    with pytest.raises(StorageIOError, match=f"no_such_db_{schema}"):
        postgres_checkpointer(missing, schema=schema, retry_timeout=2)


@pytest.mark.parametrize("generation", [0, -5])
def test_a_damaged_generation_is_found_and_repaired(
    postgres_server: Server, schema: str, generation: int
) -> None:
    """A session record whose generation is 0 or negative (hand-made damage; the store gives
    generations from 1) is CorruptLogError for reads of its position, a finding of the
    integrity check, and repaired with a new generation, every row kept. It used to be found
    by nothing: appends failed after a thousand rounds saying "the position kept moving",
    repair had nothing to do, and the session could never be written again."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("a", prompts("one", "two"))
        cp.append("b", prompts("other"))
    _sql(dsn, f'UPDATE "{schema}".sessions SET generation = %s WHERE id = %s', generation, "a")  # noqa: S608
    with postgres_checkpointer(dsn, schema=schema) as cp:
        with pytest.raises(CorruptLogError, match="generation"):
            cp.append("a", prompts("three"))
        assert [("corrupt", "a")] == [(p.kind, p.session_id) for p in cp.check_integrity().problems]
        report = cp.repair("a")
        assert (True, 2, ()) == (report.repaired, report.kept_head, report.lost)
        assert report.generation >= 1
        cp.append("a", prompts("three"))
        assert ["one", "two", "three"] == texts(cp.read("a"))
        assert ["other"] == texts(cp.read("b"))
        assert () == cp.check_integrity().problems


COLUMN_CHANGES = [
    (
        "ALTER TABLE {s}.events ALTER COLUMN body TYPE text USING encode(body, 'escape')",
        lambda cp: list(cp.read("a")),
    ),
    ("ALTER TABLE {s}.events ALTER COLUMN seq TYPE numeric", lambda cp: list(cp.read("a"))),
    (
        "ALTER TABLE {s}.leases ALTER COLUMN expires_at TYPE text; "
        "UPDATE {s}.leases SET expires_at = 'x'",
        lambda cp: cp.lease_holder("a"),
    ),
    (
        "ALTER TABLE {s}.blobs ALTER COLUMN written TYPE text; UPDATE {s}.blobs SET written = 'x'",
        collect_garbage,
    ),
    (
        "ALTER TABLE {s}.schema_version ALTER COLUMN version TYPE text; "
        "UPDATE {s}.schema_version SET version = 'x'",
        lambda _cp: None,  # opening the store is what fails
    ),
]


@pytest.mark.parametrize(
    ("change", "use"),
    COLUMN_CHANGES,
    ids=["body-text", "seq-numeric", "lease-expiry-text", "blob-time-text", "version-text"],
)
def test_a_column_whose_type_was_changed_by_hand_is_a_library_error(
    postgres_server: Server, schema: str, change: str, use: Any
) -> None:
    """Values of a column whose type was changed by hand (ALTER TABLE) raised TypeError,
    struct.error or ValueError; reading them is a LiteAgentError (CorruptLogError for events,
    CheckpointerError naming the schema change otherwise)."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("a", prompts("one", "two"))
        cp.acquire_lease("a").release()
        cp.blobs.put(b"blob")
    _sql(dsn, change.replace("{s}", f'"{schema}"'))
    with pytest.raises(LiteAgentError), postgres_checkpointer(dsn, schema=schema) as cp:
        use(cp)
