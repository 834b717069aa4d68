"""Deleting sessions leaves no lease record behind, on every backend: a daemon whose sessions
come and go (a thousand made and deleted) must not keep a ``.<id>.lease`` file (file backend),
a ``leases`` row (SQLite, PostgreSQL) or a token (memory) per session it ever had. A lease held
elsewhere at the delete keeps its record."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import psycopg
import pytest
from _postgres_server import Server
from structlog.testing import capture_logs

from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    postgres_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.conformance._lease_processes import run_holder_killed
from liteagent.eventlog.types import AssistantMessage, TextBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

Records = Callable[[], int]
"""How many lease records the store holds."""


def _sqlite_rows(db: str) -> int:
    """The rows of the SQLite store's leases table."""
    conn = apsw.Connection(db)
    try:
        return int(conn.execute("SELECT count(*) FROM leases").fetchone()[0])  # type: ignore[index]
    finally:
        conn.close()


@pytest.fixture(params=["file", "sqlite", "memory", "postgres"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Callable[[], Checkpointer], Records]]:
    """A factory of checkpointers on one store, and a count of its lease records."""
    kind = request.param
    if kind == "file":
        root = tmp_path / "store"
        yield (
            lambda: file_checkpointer(root=str(root)),
            lambda: sum(1 for p in root.iterdir() if p.name.endswith(".lease")),
        )
    elif kind == "sqlite":
        db = str(tmp_path / "s.db")

        yield lambda: sqlite_checkpointer(db), lambda: _sqlite_rows(db)
    elif kind == "memory":
        cp = memory_checkpointer()
        yield lambda: cp, lambda: len(cp._tokens)  # type: ignore[attr-defined]
    else:
        server: Server = request.getfixturevalue("postgres_server")
        schema = "l_" + uuid.uuid4().hex[:16]

        def pg_rows() -> int:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                row = conn.execute(f'SELECT count(*) FROM "{schema}".leases').fetchone()  # noqa: S608
                return int(row[0]) if row else 0

        try:
            yield lambda: postgres_checkpointer(server.dsn, schema=schema), pg_rows
        finally:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_sessions_made_and_deleted_leave_no_lease_record(
    store: tuple[Callable[[], Checkpointer], Records],
) -> None:
    """300 sessions each leased, written and deleted (a third deleted under their lease, a
    third after it, a third leased again after the delete): no lease record is left, and the
    store still leases and writes a session of the same name."""
    factory, records = store
    cp = factory()
    try:
        for n in range(300):
            sid = f"s{n}"
            lease = cp.acquire_lease(sid)
            cp.append(sid, prompts("a"), lease=lease)
            if n % 3 == 0:
                cp.delete(sid)
                lease.release()
            else:
                lease.release()
                cp.delete(sid)
            if n % 3 == 2:
                with cp.acquire_lease(sid) as again:
                    cp.append(sid, prompts("b"), lease=again)
                cp.delete(sid)
        assert 0 == records()
        with cp.acquire_lease("s1") as lease:
            cp.append("s1", prompts("c"), lease=lease)
        assert ["c"] == texts(cp.read("s1"))
        assert 1 == records()  # a live session keeps its record
    finally:
        cp.close()


def test_a_lease_held_elsewhere_keeps_its_record(
    store: tuple[Callable[[], Checkpointer], Records],
) -> None:
    """A delete through another instance while the lease is held there keeps the record (the
    holder is not disturbed); a delete of a session that never had a lease makes none."""
    factory, records = store
    holder, other = factory(), factory()
    try:
        other.append("never", prompts("a"))
        other.delete("never")
        assert 0 == records()
        lease = holder.acquire_lease("s")
        holder.append("s", prompts("a"), lease=lease)
        if other is not holder:
            other.delete("s")
            assert 1 == records()
            assert lease.info == other.lease_holder("s")
        lease.release()
    finally:
        holder.close()
        if other is not holder:
            other.close()


def test_a_lease_record_that_cannot_be_removed_does_not_fail_the_delete(tmp_path: Path) -> None:
    """The file backend with a folder where the session's lease file would be (damage an
    integrity check reports): the delete still succeeds, logs that the record was kept, and
    leaves the folder where it is."""
    root = tmp_path / "store"
    with file_checkpointer(root=str(root)) as cp:
        cp.append("s", prompts("a"))
        (root / ".s.lease").mkdir()
        with capture_logs() as logs:
            cp.delete("s")
        assert [] == cp.list()
        assert (root / ".s.lease").is_dir()
        assert ["eventlog.lease_record_kept"] == [e["event"] for e in logs]


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_delete_session_of_an_agent_leaves_no_lease_record(tmp_path: Path, backend: str) -> None:
    """Through the SDK: sessions that ran turns (under their lease), one restored (so with a
    branch), then deleted with ``delete_session``: no lease record is left in the store."""
    root = tmp_path / "store"
    cp = (
        file_checkpointer(root=str(root))
        if backend == "file"
        else sqlite_checkpointer(str(tmp_path / "s.db"))
    )
    records: Records = (
        (lambda: sum(1 for p in root.iterdir() if p.name.endswith(".lease")))
        if backend == "file"
        else (lambda: _sqlite_rows(str(tmp_path / "s.db")))
    )
    work = tmp_path / "work"
    work.mkdir()
    agent = create_lite_agent(
        model=scripted([AssistantMessage((TextBlock("ok"),))] * 20),
        model_name="m",
        workdir=work,
        checkpointer=cp,
    )
    try:
        for n in range(3):
            agent.send("one", session_id=f"s{n}")
            agent.send("two", session_id=f"s{n}")
        first = agent.list_checkpoints("s0")[0]
        agent.restore("s0", first.seq)
        assert records() >= 3
        for n in range(3):
            agent.delete_session(f"s{n}")
        assert [] == cp.list()
        assert 0 == records()
    finally:
        agent.close()
        cp.close()


def test_a_lease_of_a_session_that_is_not_there_leaves_no_record(
    store: tuple[Callable[[], Checkpointer], Records],
) -> None:
    """A lease taken on a session that was never written (an operation on an unknown id, such
    as compacting it) leaves no record once released, and the tokens of successive leases
    still increase; a session written under its lease keeps its record, and its next lease
    gets the next token."""
    factory, records = store
    cp = factory()
    try:
        tokens = []
        for _ in range(3):
            with cp.acquire_lease("ghost") as lease:
                assert 1 == records()
                tokens.append(lease.token)
            assert 0 == records()
        assert tokens == sorted(set(tokens))
        with cp.acquire_lease("real") as lease:
            cp.append("real", prompts("a"), lease=lease)
        assert 1 == records()
        with cp.acquire_lease("real") as again:
            assert again.token == lease.token + 1
    finally:
        cp.close()


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_compacting_an_unknown_session_leaves_no_record(tmp_path: Path, backend: str) -> None:
    """Through the SDK: ``compact`` of a session id that was never written takes its lease
    and leaves no record behind."""
    db, root = tmp_path / "s.db", tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()
    with (
        file_checkpointer(root=str(root))
        if backend == "file"
        else sqlite_checkpointer(str(db)) as cp,
        create_lite_agent(
            model=scripted([]), model_name="m", workdir=work, checkpointer=cp
        ) as agent,
    ):
        agent.compact(session_id="unknown")
        if backend == "file":
            assert [] == [p.name for p in root.iterdir() if p.name.endswith(".lease")]
        else:
            assert 0 == _sqlite_rows(str(db))


@pytest.mark.processes
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_collection_removes_the_records_killed_holders_left(tmp_path: Path, backend: str) -> None:
    """Three processes each take the lease of a new session and are killed with SIGKILL
    before writing it: their records stay (counted in the store itself) until a collection
    (here through the SDK) removes them, keeping the record of a session that exists; the
    sessions can be leased and written afterwards."""
    root, db = tmp_path / "store", str(tmp_path / "s.db")
    factory: Callable[[], Checkpointer] = (
        functools.partial(file_checkpointer, root=str(root))
        if backend == "file"
        else functools.partial(sqlite_checkpointer, db)
    )
    records: Records = (
        (lambda: sum(1 for p in root.iterdir() if p.name.endswith(".lease")))
        if backend == "file"
        else (lambda: _sqlite_rows(db))
    )
    with factory() as cp, cp.acquire_lease("alive") as lease:
        cp.append("alive", prompts("a"), lease=lease)
    killed = [run_holder_killed(factory, f"new{n}") for n in range(3)]
    assert 4 == records()
    work = tmp_path / "work"
    work.mkdir()
    with create_lite_agent(
        model=scripted([]), model_name="m", workdir=work, checkpointer=factory()
    ) as agent:
        assert 3 == agent.collect_garbage(grace=0, dry_run=True).leases_dropped
        assert 4 == records()
        assert 3 == agent.collect_garbage(grace=0).leases_dropped
        assert 1 == records()
    with factory() as cp:
        for n, holder in enumerate(killed):
            with cp.acquire_lease(f"new{n}") as lease:
                assert holder.token < lease.token
                cp.append(f"new{n}", prompts("b"), lease=lease)
        assert ["a"] == texts(cp.read("alive"))
    assert 4 == records()
