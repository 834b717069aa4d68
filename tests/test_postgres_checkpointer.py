"""The conformance suite against the PostgreSQL checkpointer (a real server: see
``tests/_postgres_server.py``; skipped with the reason when there is none)."""

from __future__ import annotations

import functools
import hashlib
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _postgres_server import Bouncer, Server

from liteagent.eventlog import postgres_checkpointer, zlib_codec
from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CorruptionConformance,
    CrashConformance,
    DurableConformance,
    Factory,
    damage_postgres,
)

pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")


def schema_for(path: Path) -> str:
    """A schema of its own for each test's store (the folder names the test)."""
    return "t_" + hashlib.sha256(str(path).encode()).hexdigest()[:20]


class _OnPostgres:
    dsn = ""

    @pytest.fixture(autouse=True)
    def _server(self, postgres_server: Server) -> Iterator[None]:
        self.dsn = postgres_server.dsn
        yield
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 't\\_%'"
            ).fetchall():
                conn.execute(f'DROP SCHEMA "{name}" CASCADE')

    settle_query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    """The server sessions of a killed process still to wait for: directly connected, every
    one of them (a backend that has not yet seen its client die may still read a statement
    already in its socket)."""

    def settle_after_kill(self, pid: int) -> None:
        """Wait until the server sessions of the killed process are done: the server still
        runs (and commits) what the process had sent before it died."""
        import psycopg

        deadline = time.monotonic() + 30
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while conn.execute(self.settle_query, (f"liteagent/{pid}",)).fetchone() != (0,):
                assert time.monotonic() < deadline, f"process {pid}'s server sessions live on"
                time.sleep(0.01)


class TestPostgresCheckpointer(
    _OnPostgres, CheckpointerConformance, DurableConformance, CrashConformance
):
    """postgres_checkpointer(dsn) with the defaults (durability "full", notify)."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(postgres_checkpointer, self.dsn, schema=schema_for(path))


class TestPostgresCheckpointerPolling(_OnPostgres, CheckpointerConformance):
    """postgres_checkpointer(dsn, durability="normal", notify=False, codec=zlib): followers
    poll, bodies and blobs compressed."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(
            postgres_checkpointer,
            self.dsn,
            schema=schema_for(path),
            durability="normal",
            notify=False,
            codec=zlib_codec(),
        )


class TestPostgresCorruption(_OnPostgres, CorruptionConformance):
    """Random damage to the rows of a closed store: edited, deleted, swapped, orphan rows."""

    corruption_trials = 100

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(postgres_checkpointer, self.dsn, schema=schema_for(path))

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        return damage_postgres(self.dsn, schema_for(path), session_id, rng)


class TestPostgresThroughPgBouncer(_OnPostgres, CheckpointerConformance, DurableConformance):
    """postgres_checkpointer(pgbouncer_dsn, pgbouncer=True, listen_dsn=direct): every
    statement through PgBouncer in transaction mode (no prepared statements, no session
    settings), LISTEN on a direct connection."""

    bouncer_dsn = ""
    settle_query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'"
    )
    """Through PgBouncer the server connections outlive their clients, idle in its pool: wait
    for those still running a statement or inside a transaction of the killed process."""

    @pytest.fixture(autouse=True)
    def _bouncer(self, pgbouncer: Bouncer) -> None:
        self.bouncer_dsn = pgbouncer.dsn

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(
            postgres_checkpointer,
            self.bouncer_dsn,
            schema=schema_for(path),
            pgbouncer=True,
            listen_dsn=self.dsn,
        )
