"""Stored events whose checksums verify but whose bytes do not decode (a writer's bug, a hand
edit that recomputed the checksum), on SQLite and PostgreSQL: reads raise CodecError naming
the seq, the integrity check reports it, and repair() ends the kept prefix before it (the rest
quarantined, nothing deleted) so the session works again. When the session's first event does
not decode, the store is most likely opened with the wrong codec: repair changes nothing and
raises CodecError."""

# ruff: noqa: S608 -- the SQL names the tests' own throwaway schemas

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import msgspec
import pytest

from liteagent.eventlog import Checkpointer, sqlite_checkpointer, zlib_codec
from liteagent.eventlog._sqlite_rows import Seeds, row_crc
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import CodecError

SID = "s"
BODIES = {
    "nil": msgspec.msgpack.encode(None),
    "malformed": b"\xc1\xc1",
    "wrong shape": msgspec.msgpack.encode({"content": 5}),
}
Corrupter = Callable[[int, bytes], None]  # (seq, new body): rewrite it with a valid checksum


def _sqlite_corrupter(file: str) -> Corrupter:
    def corrupt(seq: int, body: bytes) -> None:
        conn = apsw.Connection(file)
        try:
            ((ts, kind),) = list(
                conn.execute(
                    "SELECT ts, kind FROM events WHERE session_id = ? AND seq = ?", (SID, seq)
                )
            )
            crc = row_crc(Seeds(SID)[kind], seq, ts, body)
            conn.execute(
                "UPDATE events SET body = ?, crc = ? WHERE session_id = ? AND seq = ?",
                (body, crc, SID, seq),
            )
        finally:
            conn.close()

    return corrupt


@pytest.fixture(params=["sqlite", "postgres"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Callable[..., Checkpointer], Corrupter]]:
    """A factory of checkpointers on one store (``codec=`` passed on) and its corrupter."""
    if request.param == "sqlite":
        file = str(tmp_path / "s.db")
        yield (lambda **kw: sqlite_checkpointer(file, **kw)), _sqlite_corrupter(file)
        return
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    import psycopg

    from liteagent.eventlog import postgres_checkpointer

    server = request.getfixturevalue("postgres_server")
    schema = "u_" + uuid.uuid4().hex[:16]

    def corrupt(seq: int, body: bytes) -> None:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            row = conn.execute(
                f'SELECT ts, kind FROM "{schema}".events WHERE session_id = %s AND seq = %s',
                (SID, seq),
            ).fetchone()
            assert row is not None
            crc = row_crc(Seeds(SID)[row[1]], seq, row[0], body)
            conn.execute(
                f'UPDATE "{schema}".events SET body = %s, crc = %s'
                " WHERE session_id = %s AND seq = %s",
                (body, crc, SID, seq),
            )

    try:
        yield (lambda **kw: postgres_checkpointer(server.dsn, schema=schema, **kw)), corrupt
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("body", list(BODIES), ids=list(BODIES))
def test_an_event_that_verifies_but_does_not_decode_is_repaired_as_damage(
    store: tuple[Callable[..., Checkpointer], Corrupter], body: str
) -> None:
    """Seq 3 of 4 rewritten with a valid checksum and bytes that are not its event: reads
    raise CodecError at seq 3; repair keeps seqs 1-2, quarantines 3-4, and appends work."""
    open_store, corrupt = store
    with open_store() as cp:
        cp.append(SID, prompts("a", "b", "c", "d"))
    corrupt(3, BODIES[body])
    with open_store() as cp:
        with pytest.raises(CodecError) as caught:
            list(cp.read(SID))
        assert 3 == caught.value.seq
        assert not cp.check_integrity().ok
        report = cp.repair(SID)
        assert (True, 2, ((3, 4),)) == (report.repaired, report.kept_head, report.lost)
        assert "does not decode" in report.detail
        assert ["a", "b"] == texts(cp.read(SID))
        assert 3 == cp.append(SID, prompts("c again"), expected_head=2)
        assert cp.check_integrity().ok


def test_repair_with_the_wrong_codec_changes_nothing(
    store: tuple[Callable[..., Checkpointer], Corrupter],
) -> None:
    """A store written with zlib_codec opened without it: repair refuses with CodecError and
    leaves every event where it was."""
    open_store, _ = store
    with open_store(codec=zlib_codec()) as cp:
        cp.append(SID, prompts("a", "b"))
    with open_store() as cp, pytest.raises(CodecError, match="repair changed nothing"):
        cp.repair(SID)
    with open_store(codec=zlib_codec()) as cp:
        assert ["a", "b"] == texts(cp.read(SID))
        assert cp.check_integrity().ok
