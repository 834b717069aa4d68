"""Damaged lease records name nobody and never break a lease: numbers out of range in a file
lease record or a leases row (a pid of 1e400, a token at the largest 64-bit integer), and a
lease file that is a hard link to another session's log, which a record must not overwrite."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import apsw
import psycopg
import pytest
from _cli_runner import Cli
from _postgres_server import Server

from liteagent.eventlog import file_checkpointer, postgres_checkpointer, sqlite_checkpointer
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import LeaseLostError, StorageIOError
from liteagent.eventlog.types import TextBlock, UserPrompt

LARGEST = 2**63 - 1

DAMAGED_RECORDS = [
    {"pid": "1e400"},
    {"pid": "99999999999999999999999"},
    {"pid": "-1"},
    {"pid": "0"},
    {"token": "1e400"},
    {"token": str(LARGEST)},
    {"token": "99999999999999999999999"},
    {"token": "-5"},
]


def _record(pid: str = "1", token: str = "7") -> str:  # noqa: S107 -- a fencing token
    """A lease record of this host that says held, with the given numbers as JSON text."""
    host = json.dumps(socket.gethostname())
    return f'{{"held": true, "owner": "x", "pid": {pid}, "host": {host}, "token": {token}}}'


@pytest.mark.parametrize("numbers", DAMAGED_RECORDS, ids=lambda d: ",".join(d.values()))
def test_a_file_lease_record_out_of_range_names_nobody_and_is_taken(
    tmp_path: Path, numbers: dict[str, str]
) -> None:
    """A record whose pid or token no process or store can have (it used to raise
    OverflowError from ``lease_holder``, every acquire and ``collect_garbage``) names no
    holder: the lease is taken with a token of range, and the session is written."""
    with file_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("a"))
        (tmp_path / ".s.lease").write_text(_record(**numbers))
        assert cp.lease_holder("s") is None
        with cp.acquire_lease("s") as lease:
            assert 0 <= lease.info.token < LARGEST
            cp.append("s", prompts("b"), lease=lease)
        assert ["a", "b"] == texts(cp.read("s"))


def test_lite_agent_gc_drops_a_damaged_record_of_a_missing_session(cli: Cli) -> None:
    """``lite-agent gc`` over a record with a pid of 1e400 left by a session that does not
    exist removes it (it used to stop with "internal error: cannot convert float infinity to
    integer")."""
    cli.ok("run", "hi", "--session", "s1", provider=cli.script({"text": "ok"}))
    (project,) = (cli.home / "projects").iterdir()
    orphan = project / "sessions" / ".orphan.lease"
    orphan.write_text(_record(pid="1e400"))
    result = cli("gc")
    assert (0, "") == (result.code, result.err), result
    assert not orphan.exists()


def test_a_lease_file_linked_to_another_sessions_log_is_refused_not_written(
    tmp_path: Path,
) -> None:
    """Session B's lease file is a hard link to session A's log: taking B's lease used to
    write B's record over A's log (A lost every event). It is refused with StorageIOError
    naming the lease file, and A's log is intact."""
    with file_checkpointer(tmp_path) as cp:
        for n in range(5):
            cp.append("A", [UserPrompt(content=(TextBlock(f"A{n}"),))])
        cp.append("B", prompts("b"))
    log = (tmp_path / "A.log").read_bytes()
    lease_file = tmp_path / ".B.lease"
    lease_file.unlink(missing_ok=True)
    os.link(tmp_path / "A.log", lease_file)
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(StorageIOError, match="hard link"):
            cp.acquire_lease("B")
        assert (log, [f"A{n}" for n in range(5)]) == (
            (tmp_path / "A.log").read_bytes(),
            texts(cp.read("A")),
        )
        assert () == cp.check_integrity().problems
        lease_file.unlink()  # what the message says to do
        with cp.acquire_lease("B") as lease:
            cp.append("B", prompts("c"), lease=lease)
        assert ["b", "c"] == texts(cp.read("B"))


def test_lease_files_linked_to_each_other_are_still_used(tmp_path: Path) -> None:
    """A hard link between lease files (a backup made with links, say) holds lease records
    only: the lease is taken and released as usual."""
    with file_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("a"))
        with cp.acquire_lease("s"):
            pass
        os.link(tmp_path / ".s.lease", tmp_path.parent / "backup-of-s.lease")
        with cp.acquire_lease("s") as lease:
            cp.append("s", prompts("b"), lease=lease)
        assert ["a", "b"] == texts(cp.read("s"))


def _set_sqlite_lease(db: str, **values: int) -> None:
    conn = apsw.Connection(db)
    try:
        for column, value in values.items():
            conn.execute(f"UPDATE leases SET {column} = ?", (value,))  # noqa: S608
    finally:
        conn.close()


@pytest.mark.parametrize(
    "values",
    [{"token": LARGEST}, {"token": -3}, {"pid": 2**62, "expires_at": 2.0e9}],
    ids=["token-largest", "token-negative", "pid-2**62"],
)
def test_a_sqlite_leases_row_out_of_range_is_taken(tmp_path: Path, values: dict[str, int]) -> None:
    """A leases row with the largest token (the next one used to overflow the 64-bit column:
    OverflowError from every acquire, so the session took no turn), a negative one, or a pid
    no process has: the lease is taken again, with a token in range, and the session written;
    the holder of the damaged row is fenced out."""
    db = str(tmp_path / "s.db")
    with sqlite_checkpointer(db) as cp:
        old = cp.acquire_lease("s")
        cp.append("s", prompts("a"), lease=old)
        old.release()
        stale = cp.acquire_lease("s")
        _set_sqlite_lease(db, **values)
        if "pid" not in values:
            _set_sqlite_lease(db, expires_at=0)  # the damaged row's holder is gone
        with cp.acquire_lease("s") as lease:
            assert 0 <= lease.info.token < LARGEST
            cp.append("s", prompts("b"), lease=lease)
        with pytest.raises(LeaseLostError):
            cp.append("s", prompts("stale"), lease=stale)
        assert ["a", "b"] == texts(cp.read("s"))


def test_a_postgres_leases_row_at_the_largest_token_is_taken(postgres_server: Server) -> None:
    """PostgreSQL: the next token after the largest bigint starts again from the clock
    instead of failing every acquire with "bigint out of range"."""
    schema = "ld_" + uuid.uuid4().hex[:16]
    try:
        with postgres_checkpointer(postgres_server.dsn, schema=schema) as cp:
            with cp.acquire_lease("s") as lease:
                cp.append("s", prompts("a"), lease=lease)
            with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
                conn.execute(f'UPDATE "{schema}".leases SET token = %s', (LARGEST,))  # noqa: S608
            with cp.acquire_lease("s") as lease:
                assert 0 <= lease.info.token < LARGEST
                cp.append("s", prompts("b"), lease=lease)
            assert ["a", "b"] == texts(cp.read("s"))
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
