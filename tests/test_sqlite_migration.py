"""A store written by the schema-1 code (tests/fixtures/sqlite_v1.db) is migrated to schema 2.

The migration runs once, on open, in one transaction: every event row's schema-1 checksum (of
its body) is verified, then its schema-2 checksum (of the whole row) is written. A row that fails
the old check is never blessed: it keeps the checksum -1, reads as CorruptLogError and is moved to
quarantine by a repair. Each test works on a copy of the fixture.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import apsw
import pytest

from liteagent.eventlog import CorruptLogError, sqlite_checkpointer
from liteagent.eventlog._sqlite import SCHEMA_VERSION
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.conformance._processes import mp_context

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sqlite_v1", FIXTURES / "sqlite_v1.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V1 = _fixture_module()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A copy of the schema-1 fixture store."""
    path = tmp_path / "log.db"
    shutil.copyfile(FIXTURES / "sqlite_v1.db", path)
    return path


def query(db: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(db))
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def test_fixture_is_schema_1() -> None:
    """The fixture really is a schema-1 store (what the migration starts from)."""
    assert [(1,)] == query(FIXTURES / "sqlite_v1.db", "PRAGMA user_version")


def test_open_migrates_to_the_current_schema(db: Path) -> None:
    """Opening a schema-1 store sets user_version 2 and adds the new tables."""
    with sqlite_checkpointer(db):
        pass
    tables = {r[0] for r in query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert [(SCHEMA_VERSION,)] == query(db, "PRAGMA user_version")
    assert 2 == SCHEMA_VERSION
    assert {"sessions", "events", "blobs", "meta", "quarantine", "leases"} <= tables


def test_migrated_store_reads_back_every_event(db: Path) -> None:
    """Every session reads back exactly what the schema-1 code stored: seq, ts and body."""
    with sqlite_checkpointer(db) as cp:
        for sid, expected in V1.history().items():
            assert expected == [(e.seq, e.ts, e.body) for e in cp.read(sid)], sid


def test_migrated_store_keeps_positions_blobs_and_list(db: Path) -> None:
    """Heads and generations, the blob and the session list survive the migration."""
    before = query(db, "SELECT id, head, generation FROM sessions ORDER BY id")
    with sqlite_checkpointer(db) as cp:
        after = [(sid, *cp.position(sid)) for sid, _, _ in before]
        assert V1.BLOB == cp.blobs.get(cp.blobs.put(V1.BLOB))
        assert sorted(V1.history()) == sorted(i.id for i in cp.list())
    assert before == after


def test_migrated_store_passes_check_integrity(db: Path) -> None:
    """check_integrity of the migrated store is ok (the newer writer's event is informational)."""
    with sqlite_checkpointer(db) as cp:
        report = cp.check_integrity()
    assert (True, [("unknown_kind", "alpha")]) == (
        report.ok,
        [(p.kind, p.session_id) for p in report.problems],
    )


def test_migrated_store_takes_appends_and_truncates(db: Path) -> None:
    """A migrated session takes conditional appends and truncates, and a reopen reads them."""
    with sqlite_checkpointer(db) as cp:
        pos = cp.position("beta")
        assert 3 == cp.append(
            "beta", prompts("b3"), expected_head=2, expected_generation=pos.generation
        )
        cp.truncate("gamma", 0)
    with sqlite_checkpointer(db) as cp:
        assert ["b1", "b2'", "b3"] == texts(cp.read("beta"))
        assert [] == list(cp.read("gamma"))


def test_every_row_gets_a_whole_row_checksum(db: Path) -> None:
    """After the migration a changed kind is caught (schema 1 checked the body only)."""
    with sqlite_checkpointer(db):
        pass
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE events SET kind = 'tool_resulT' WHERE session_id = 'alpha' AND seq = 3")
    conn.close()
    with sqlite_checkpointer(db) as cp, pytest.raises(CorruptLogError) as info:
        list(cp.read("alpha"))
    assert 3 == info.value.seq


def _damage_v1_body(db: Path, sid: str, seq: int) -> None:
    """Flip a bit of a stored body in the schema-1 store, leaving its old checksum stale."""
    conn = apsw.Connection(str(db))
    (body,) = conn.execute(
        "SELECT body FROM events WHERE session_id = ? AND seq = ?", (sid, seq)
    ).fetchone()
    damaged = bytearray(body)
    damaged[-1] ^= 0x01
    conn.execute(
        "UPDATE events SET body = ? WHERE session_id = ? AND seq = ?", (bytes(damaged), sid, seq)
    )
    conn.close()


def test_row_failing_its_old_checksum_is_not_blessed(db: Path) -> None:
    """A row whose schema-1 checksum fails is migrated with checksum -1: reading it raises
    CorruptLogError naming it, the rows before it still read, and the store still opens."""
    _damage_v1_body(db, "alpha", 4)
    with sqlite_checkpointer(db) as cp:
        got = []
        with pytest.raises(CorruptLogError) as info:
            got.extend(cp.read("alpha"))
        assert ("alpha", 4) == (info.value.session_id, info.value.seq)
        assert "schema-1 checksum" in info.value.detail
        assert [1, 2, 3] == [e.seq for e in got]
    assert [(-1,)] == query(db, "SELECT crc FROM events WHERE session_id = 'alpha' AND seq = 4")


def test_row_failing_its_old_checksum_is_quarantined_by_repair(db: Path) -> None:
    """repair() keeps 1..3 of that session and moves rows 4..7 to quarantine."""
    _damage_v1_body(db, "alpha", 4)
    with sqlite_checkpointer(db) as cp:
        report = cp.repair("alpha")
        assert (3, ((4, 7),)) == (report.kept_head, report.lost)
        assert [1, 2, 3] == [e.seq for e in cp.read("alpha")]
    assert [(4,), (5,), (6,), (7,)] == query(
        db, "SELECT seq FROM quarantine WHERE session_id = 'alpha' ORDER BY seq"
    )


def _open_and_read(file: str, out: Any) -> None:
    """Child process: open the store (racing the others to migrate it), read every session."""
    try:
        with sqlite_checkpointer(file) as cp:
            out.put(sorted((sid, len(list(cp.read(sid)))) for sid in ("alpha", "beta", "gamma")))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which fails on it
        out.put(f"{type(e).__name__}: {e}")


@pytest.mark.processes
def test_processes_opening_at_once_migrate_once(db: Path) -> None:
    """6 processes opening the schema-1 store at the same moment all succeed and read it."""
    ctx = mp_context()
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_and_read, args=(str(db), out)) for _ in range(6)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    expected = sorted((sid, len(h)) for sid, h in V1.history().items())
    assert [expected] * 6 == results
    with sqlite_checkpointer(db) as cp:
        assert True is cp.check_integrity().ok
