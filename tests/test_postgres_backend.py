"""The PostgreSQL backend's own guarantees: its schema (created concurrently, another version
refused, any schema name), leases across "hosts" (a holder whose server connection is gone
loses its lease, and its writes are fenced), the codec, argument checks, and that ``import
liteagent.eventlog`` needs no psycopg."""

# ruff: noqa: S608 -- the SQL names the tests' own throwaway schemas

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")

import psycopg
from _postgres_server import Server

from liteagent.eventlog import postgres_checkpointer, zlib_codec
from liteagent.eventlog._postgres_schema import SCHEMA_VERSION
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.conformance._processes import mp_context
from liteagent.eventlog.errors import (
    CheckpointerError,
    CodecError,
    InvalidArgumentError,
    LeaseLostError,
    SchemaVersionError,
    SessionLeasedError,
    StorageIOError,
)


@pytest.fixture
def schema(postgres_server: Server) -> Iterator[str]:
    """A fresh schema, dropped afterwards."""
    name = "b_" + uuid.uuid4().hex[:16]
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _sql(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args or None)
        return cur.fetchall() if cur.description else []


# -- schema -------------------------------------------------------------------------------------


def _open_close(dsn: str, schema: str, barrier: Any) -> None:
    barrier.wait(60)
    postgres_checkpointer(dsn, schema=schema).close()


@pytest.mark.processes
def test_concurrent_setup_from_many_processes(postgres_server: Server, schema: str) -> None:
    """6 processes opening a store in a new schema at the same moment all succeed: one
    creates it under the advisory lock, the others find it ready."""
    ctx = mp_context()
    barrier = ctx.Barrier(6)
    procs = [
        ctx.Process(target=_open_close, args=(postgres_server.dsn, schema, barrier))
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [0] * 6 == [p.exitcode for p in procs]
    assert [(SCHEMA_VERSION,)] == _sql(
        postgres_server.dsn, f'SELECT version FROM "{schema}".schema_version'
    )
    with postgres_checkpointer(postgres_server.dsn, schema=schema) as cp:
        assert 1 == cp.append("s", prompts("a"))


def _has_ops(dsn: str, schema: str) -> bool:
    return bool(
        _sql(dsn, "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'ops'", schema)
    )


def test_a_version_1_store_is_refused_and_left_alone(postgres_server: Server, schema: str) -> None:
    """A store of schema version 1 (before ``ops``; written before the first release) is
    refused with SchemaVersionError saying it is older and that there is no migration; its
    version, tables and sessions stay as they were."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        assert 1 == cp.append("old", prompts("a"))
    _sql(dsn, f'DROP TABLE "{schema}".ops')  # what version 2 added: now a version 1 store
    _sql(dsn, f'UPDATE "{schema}".schema_version SET version = 1')
    with pytest.raises(SchemaVersionError) as info:
        postgres_checkpointer(dsn, schema=schema)
    assert (True, True) == (
        f"schema {schema!r} is at version 1, older than the version {SCHEMA_VERSION}"
        in str(info.value),
        "no migration" in str(info.value),
    )
    assert ([(1,)], [("old", 1)], False) == (
        _sql(dsn, f'SELECT version FROM "{schema}".schema_version'),
        _sql(dsn, f'SELECT id, head FROM "{schema}".sessions'),
        _has_ops(dsn, schema),
    )


def test_a_version_no_liteagent_writes_is_refused_until_put_back(
    postgres_server: Server, schema: str
) -> None:
    """A store whose version was set to 0 is refused with SchemaVersionError naming it and
    left as it is; putting the version back opens it with its session."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("s", prompts("a"))
    _sql(dsn, f'UPDATE "{schema}".schema_version SET version = 0')
    with pytest.raises(SchemaVersionError, match="version 0, which no liteagent writes"):
        postgres_checkpointer(dsn, schema=schema)
    assert [(0,)] == _sql(dsn, f'SELECT version FROM "{schema}".schema_version')
    _sql(dsn, f'UPDATE "{schema}".schema_version SET version = %s', SCHEMA_VERSION)
    with postgres_checkpointer(dsn, schema=schema) as cp:
        assert ["a"] == texts(cp.read("s"))


def test_newer_schema_is_refused_and_left_alone(postgres_server: Server, schema: str) -> None:
    """A schema written by a newer liteagent is refused with SchemaVersionError; nothing in
    it changes."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("s", prompts("a"))
    _sql(dsn, f'UPDATE "{schema}".schema_version SET version = %s', SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError, match="newer"):
        postgres_checkpointer(dsn, schema=schema)
    assert [(SCHEMA_VERSION + 1,)] == _sql(dsn, f'SELECT version FROM "{schema}".schema_version')
    assert [("s", 1)] == _sql(dsn, f'SELECT id, head FROM "{schema}".sessions')


def test_schemas_are_separate_stores(postgres_server: Server, schema: str) -> None:
    """Two schemas on one database are two stores."""
    other = schema + "_b"
    try:
        with (
            postgres_checkpointer(postgres_server.dsn, schema=schema) as a,
            postgres_checkpointer(postgres_server.dsn, schema=other) as b,
        ):
            a.append("s", prompts("in a"))
            assert 0 == b.head("s")
            b.append("s", prompts("in b"))
            assert ["in a"] == texts(a.read("s"))
    finally:
        _sql(postgres_server.dsn, f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


# -- leases across hosts ----------------------------------------------------------------------


def test_a_holder_whose_connection_is_gone_loses_the_lease_and_is_fenced(
    postgres_server: Server, schema: str
) -> None:
    """The server no longer has the holder's lease connection (as when its host died): the
    lease is free for another checkpointer at once, and the old holder's writes under it
    (a delete, an append, a truncate) are refused with LeaseLostError; nothing of them is
    written or deleted."""
    dsn = postgres_server.dsn
    with (
        postgres_checkpointer(dsn, schema=schema) as a,
        postgres_checkpointer(dsn, schema=schema) as b,
    ):
        old = a.acquire_lease("s", owner="host-a")
        a.append("s", prompts("by a"), lease=old)
        with pytest.raises(SessionLeasedError):
            b.acquire_lease("s")
        (backend,) = _sql(dsn, f'SELECT backend_pid FROM "{schema}".leases')
        # With a timeout, pg_terminate_backend waits until the backend has exited (without
        # one it returns once the signal is sent, and the backend may still look alive).
        assert [(True,)] == _sql(dsn, "SELECT pg_terminate_backend(%s, 10000)", backend[0])
        new = b.acquire_lease("s", owner="host-b")
        assert old.token < new.token
        assert new.info == a.lease_holder("s")
        with pytest.raises(LeaseLostError):  # found inside its transaction: deletes nothing
            a.delete("s", lease=old)
        assert old.lost
        with pytest.raises(LeaseLostError):
            a.append("s", prompts("late"), lease=old)
        with pytest.raises(LeaseLostError):
            a.truncate("s", 0, lease=old)
        assert 2 == b.append("s", prompts("by b"), lease=new)
        assert ["by a", "by b"] == texts(b.read("s"))


def test_an_expired_lease_is_taken_over(postgres_server: Server, schema: str) -> None:
    """A lease whose expiry passed (its holder stopped renewing) is taken by the next
    acquire, with a larger token."""
    dsn = postgres_server.dsn
    with (
        postgres_checkpointer(dsn, schema=schema) as a,
        postgres_checkpointer(dsn, schema=schema) as b,
    ):
        old = a.acquire_lease("s", ttl=30)
        _sql(dsn, f'UPDATE "{schema}".leases SET expires_at = 1.0')
        assert b.lease_holder("s") is None
        assert old.token < b.acquire_lease("s").token


# -- codec, arguments, the optional extra -------------------------------------------------------


def test_wrong_codec_is_a_codec_error(postgres_server: Server, schema: str) -> None:
    """A store written with zlib and read without it raises CodecError naming the seq."""
    with postgres_checkpointer(postgres_server.dsn, schema=schema, codec=zlib_codec()) as cp:
        cp.append("s", prompts("a"))
        assert ["a"] == texts(cp.read("s"))
    with postgres_checkpointer(postgres_server.dsn, schema=schema) as cp:
        with pytest.raises(CodecError) as info:
            list(cp.read("s"))
        assert ("s", 1) == (info.value.session_id, info.value.seq)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"schema": "Bad-Name"},
        {"schema": "pg_catalog"},
        {"schema": ""},
        {"durability": "always"},
        {"codec": "zlib"},
        {"notify": 1},
        {"pgbouncer": "yes"},
        {"listen_dsn": ""},
        {"max_connections": 0},
        {"retry_timeout": 0},
        {"poll_interval": float("inf")},
    ],
    ids=repr,
)
def test_bad_arguments_are_refused_before_connecting(kwargs: dict[str, Any]) -> None:
    """Every argument is checked before any connection is made."""
    with pytest.raises(InvalidArgumentError):
        postgres_checkpointer("host=/nonexistent", **kwargs)


@pytest.mark.parametrize("target", ["", None, 5, b"host=x"], ids=repr)
def test_bad_target_is_refused(target: Any) -> None:
    """The target must be a DSN or a pool."""
    with pytest.raises(InvalidArgumentError):
        postgres_checkpointer(target)


def test_unreachable_server_is_a_storage_error() -> None:
    """A server that cannot be reached is StorageIOError once the retry time is spent."""
    with pytest.raises(StorageIOError):
        postgres_checkpointer("host=/nonexistent-socket-dir user=x dbname=x", retry_timeout=0.5)


def test_a_pool_of_your_own(postgres_server: Server, schema: str) -> None:
    """A psycopg_pool.ConnectionPool can be given; close() leaves it open."""
    from psycopg_pool import ConnectionPool

    with ConnectionPool(postgres_server.dsn, min_size=1, max_size=2, open=True) as pool:
        with postgres_checkpointer(pool, schema=schema) as cp:
            cp.append("s", prompts("a"))
        assert not pool.closed
        with pool.connection() as conn:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".events').fetchone()
        assert row is not None
        assert 1 == row[0]


_BLOCKED = """
import sys  # noqa: E402
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
            raise ImportError(f"{name} is blocked for this test")
        return None
sys.meta_path.insert(0, Block())
import liteagent.eventlog as e  # noqa: E402
assert "psycopg" not in sys.modules
try:
    e.postgres_checkpointer("host=/x")
except e.errors.CheckpointerError as err:
    print("refused:", err)
"""


def test_eventlog_imports_without_psycopg() -> None:
    """With psycopg unimportable, ``import liteagent.eventlog`` works and
    ``postgres_checkpointer`` says which extra to install."""
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED], capture_output=True, text=True, timeout=120, check=True
    )
    assert "refused:" in out.stdout
    assert "liteagent[postgres]" in out.stdout
    assert issubclass(StorageIOError, CheckpointerError)


# -- errors by class ------------------------------------------------------------------------------


def test_a_programming_error_is_raised_at_once_not_retried(
    postgres_server: Server, schema: str
) -> None:
    """A table dropped behind the checkpointer's back (SQLSTATE 42P01) is a CheckpointerError
    naming the SQLSTATE, raised by the first try: never retried for the retry time."""
    with postgres_checkpointer(postgres_server.dsn, schema=schema, retry_timeout=600) as cp:
        cp.append("s", prompts("a"))
        _sql(postgres_server.dsn, f'DROP TABLE "{schema}".events')
        with pytest.raises(CheckpointerError, match="42P01") as info:
            cp.append("s", prompts("b"), expected_head=1)
    assert not isinstance(info.value, StorageIOError)


def test_a_lock_timeout_is_retried(postgres_server: Server, schema: str) -> None:
    """An append that waits on a session's row lock longer than the lock timeout (55P03) is
    tried again, and succeeds once the lock is released."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(dsn, schema=schema) as cp:
        cp.append("s", prompts("a"))
        with psycopg.connect(dsn) as holder:
            holder.execute(f'SELECT 1 FROM "{schema}".sessions WHERE id = %s FOR UPDATE', ("s",))
            release = threading.Timer(6.0, holder.commit)  # past the 5 s lock_timeout
            release.start()
            try:
                assert 2 == cp.append("s", prompts("b"), expected_head=1)
            finally:
                release.join()
        assert ["a", "b"] == texts(cp.read("s"))


def test_an_acquire_never_waits_on_a_holder_stopped_inside_its_fenced_write(
    postgres_server: Server, schema: str
) -> None:
    """A holder stopped inside a fenced write (its transaction share-locks its leases row):
    another checkpointer's acquire of that session is refused at once with
    SessionLeasedError, also once the lease has expired, and an acquire of another session
    is not held up. It waited on the row lock (the lock timeout, again and again, until the
    server ended the stopped transaction: ~30 s), holding up the process's other leases."""
    dsn = postgres_server.dsn
    with (
        postgres_checkpointer(dsn, schema=schema) as a,
        postgres_checkpointer(dsn, schema=schema) as b,
    ):
        held = a.acquire_lease("s", ttl=1.0)
        a.append("s", prompts("by a"), lease=held)
        with (
            psycopg.connect(dsn, autocommit=True) as stopped,
            stopped.transaction(),  # what a's fenced write holds while a is stopped
        ):
            stopped.execute(
                f'SELECT 1 FROM "{schema}".leases WHERE session_id = %s FOR SHARE', ("s",)
            )
            start = time.monotonic()
            with pytest.raises(SessionLeasedError):
                b.acquire_lease("s")
            a._lease_rows._held.clear()  # a stops renewing: its lease expires
            time.sleep(1.5)
            with pytest.raises(SessionLeasedError):
                b.acquire_lease("s")
            with b.acquire_lease("other"):
                pass
            assert time.monotonic() - start < 4.5  # a hang guard: the lock timeout is 5 s
        with b.acquire_lease("s") as taken:  # the write ended: the expired lease is free
            assert held.token < taken.token


def test_a_lock_timeout_on_the_lease_connection_keeps_every_lease(
    postgres_server: Server, schema: str
) -> None:
    """A renewal that waits on its row past the lock timeout (another connection share-locks
    it: a fenced write of a stopped holder) is retried on the same connection. The connection
    was dropped, and with it the backend that vouches for every lease this checkpointer holds:
    each of them was free for any other host to take."""
    dsn = postgres_server.dsn
    with (
        postgres_checkpointer(dsn, schema=schema) as a,
        postgres_checkpointer(dsn, schema=schema) as b,
    ):
        held = a.acquire_lease("s", owner="a")
        other = a.acquire_lease("t", owner="a")
        locked, done = threading.Event(), threading.Event()

        def lock_the_row() -> None:
            with (
                psycopg.connect(dsn, autocommit=True) as conn,
                conn.transaction(),
            ):
                conn.execute(
                    f'SELECT 1 FROM "{schema}".leases WHERE session_id = %s FOR SHARE', ("s",)
                )
                locked.set()
                done.wait(30)

        locker = threading.Thread(target=lock_the_row)
        locker.start()
        assert locked.wait(30)
        renewer = threading.Thread(target=a._lease_rows._renew)  # what the renewer runs
        renewer.start()
        try:
            time.sleep(5.8)  # past the 5 s lock timeout of the renewal's UPDATE
            for sid in ("s", "t"):
                holder = b.lease_holder(sid)
                assert holder is not None, sid
                assert "a" == holder.owner
        finally:
            done.set()
            locker.join(30)
            renewer.join(30)
        assert not held.lost
        assert not other.lost
