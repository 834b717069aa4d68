"""Tests specific to sqlite_checkpointer that the generic conformance suite does not cover.

Damaged and foreign files, the schema version, SQLite's locking (busy writers, the fresh-file WAL
race), pragmas, read paging, blobs in the same database, argument checks, per-thread connections
and ``":memory:"``. Raw apsw connections inspect or damage the database beside the checkpointer.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import json
import os
import re
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from liteagent.eventlog import Checkpointer, StoredEvent, sqlite_checkpointer
from liteagent.eventlog._sqlite import SCHEMA_VERSION
from liteagent.eventlog.conformance import prompt, prompts, texts
from liteagent.eventlog.conformance._processes import mp_context
from liteagent.eventlog.errors import (
    CheckpointConflictError,
    CorruptBlobError,
    CorruptLogError,
    InvalidArgumentError,
    NotADatabaseError,
    SchemaVersionError,
    StorageIOError,
)

# -- helpers ---------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database path that does not exist yet."""
    return tmp_path / "log.db"


@pytest.fixture
def cp(db: Path) -> Iterator[Checkpointer]:
    """A checkpointer on a fresh database file, closed after the test."""
    with sqlite_checkpointer(db) as c:
        yield c


def raw(db: Path) -> apsw.Connection:
    """A plain apsw connection on ``db`` (the caller closes it)."""
    conn = apsw.Connection(str(db))
    conn.set_busy_timeout(5000)
    return conn


def long_text(i: int) -> str:
    """A recognizable, unique text of about 530 bytes for event ``i``."""
    return f"marker-{i:05d}-" + string.ascii_letters * 10


def read_until_error(cp: Checkpointer, session_id: str) -> tuple[list[StoredEvent], Exception]:
    """The events ``read`` yields before it raises, and what it raised."""
    got: list[StoredEvent] = []
    with pytest.raises(Exception) as info:  # noqa: PT011 -- the caller checks the type
        got.extend(cp.read(session_id))
    return got, info.value


def run_threads(count: int, target: Callable[[int], None]) -> list[BaseException]:
    """Run ``target(n)`` in ``count`` threads started together; return what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(n: int) -> None:
        try:
            barrier.wait(10)
            target(n)
        except BaseException as e:  # noqa: BLE001 -- reported to the test, which fails on it
            errors.append(e)

    threads = [threading.Thread(target=body, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [] == [t.name for t in threads if t.is_alive()]
    return errors


# -- 1. not a database -----------------------------------------------------------------------------


def test_text_file_is_not_a_database_and_stays_unchanged(db: Path) -> None:
    """Opening 8 KB of text raises NotADatabaseError naming the file, and leaves the file's
    bytes unchanged."""
    content = (b"this is a text file, not a SQLite database\n" * 200)[:8192]
    db.write_bytes(content)
    with pytest.raises(NotADatabaseError, match=re.escape(repr(str(db)))):
        sqlite_checkpointer(db)
    assert content == db.read_bytes()


@pytest.mark.parametrize("size", [1, 2, 50, 99])
def test_a_file_too_short_for_a_database_is_refused_and_stays_unchanged(
    db: Path, size: int
) -> None:
    """A file of 1 to 99 bytes (a store cut down, or another file) is no database SQLite
    writes, though SQLite would take one byte for an empty database and write a new one over
    it: refused, naming the file, and left as it was; an empty file is an empty store."""
    content = bytes(range(size))
    db.write_bytes(content)
    with pytest.raises(NotADatabaseError, match=f"{re.escape(str(db))}.*holds {size} bytes"):
        sqlite_checkpointer(db)
    assert content == db.read_bytes()
    db.write_bytes(b"")
    with sqlite_checkpointer(db) as cp:
        assert [] == cp.list()
        cp.append("s", prompts("a"))
    with sqlite_checkpointer(db) as cp:
        assert ["a"] == texts(cp.read("s"))


def test_a_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    """A file SQLite cannot open (here a read-only kernel file) raises StorageIOError naming
    it and what was being done."""
    with pytest.raises(StorageIOError, match=re.escape("cannot open the SQLite store '/proc/")):
        sqlite_checkpointer("/proc/version")


_OPEN_AS_OTHER = """
import json, sys
from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.errors import StorageIOError
out = []
for path in sys.argv[1:]:
    try:
        sqlite_checkpointer(path).close()
        out.append(None)
    except StorageIOError as e:
        out.append([e.errno, str(e)])
print(json.dumps(out))
"""


def test_a_store_this_user_may_not_open_says_why(tmp_path: Path) -> None:
    """A database of mode 000, and a new one in a folder this user cannot write: the error
    is the OS's (EACCES, "Permission denied" / which folder), not SQLite's "unable to open
    database file" as an I/O error. (In a child process without the privileges that let root
    ignore file modes.)"""
    closed = tmp_path / "closed.db"
    with sqlite_checkpointer(closed) as cp:
        cp.append("s", prompts("a"))
    closed.chmod(0o000)
    shut = tmp_path / "shut"
    shut.mkdir(mode=0o555)
    command = [sys.executable, "-c", _OPEN_AS_OTHER, str(closed), str(shut / "new.db")]
    if os.geteuid() == 0:
        command = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    (code, message), (code2, message2) = json.loads(done.stdout)
    assert (errno.EACCES, errno.EACCES) == (code, code2)
    assert "Permission denied" in message
    assert str(closed) in message
    assert f"cannot create a file in {str(shut)!r}" in message2
    closed.chmod(0o644)
    with sqlite_checkpointer(closed) as cp:
        assert ["a"] == texts(cp.read("s"))


# -- 2. schema version -----------------------------------------------------------------------------


def test_newer_schema_version_is_refused_and_file_unchanged(db: Path) -> None:
    """A database whose user_version exceeds SCHEMA_VERSION is refused and left as it was."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("kept"))
    conn = raw(db)
    conn.pragma("user_version", SCHEMA_VERSION + 1)
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError):
        sqlite_checkpointer(db)
    assert before == db.read_bytes()


_SCHEMA_1 = """
CREATE TABLE sessions(id TEXT PRIMARY KEY, head INTEGER NOT NULL, generation INTEGER NOT NULL,
    mtime REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE events(session_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
    kind TEXT NOT NULL, body BLOB NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (session_id, seq));
CREATE TABLE blobs(ref TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('next_generation', 2);
INSERT INTO sessions VALUES ('s', 1, 1, 0.0);
INSERT INTO events VALUES ('s', 1, 0.0, 'user_prompt', x'00', 0);
PRAGMA user_version = 1;
"""


def test_a_schema_1_store_is_refused_and_left_unchanged(db: Path) -> None:
    """A store of schema version 1 (before the first release; its tables have no row
    checksums of schema 2) is refused with SchemaVersionError saying it is older and that
    there is no migration; its bytes are unchanged and no WAL file is made."""
    conn = raw(db)
    conn.execute(_SCHEMA_1)
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError) as info:
        sqlite_checkpointer(db)
    assert (True, True, True) == (
        f"{db} has schema version 1, older than the version {SCHEMA_VERSION}" in str(info.value),
        "no migration" in str(info.value),
        "left as it is" in str(info.value),
    )
    assert (before, False) == (db.read_bytes(), Path(f"{db}-wal").exists())


@pytest.mark.parametrize(
    ("version", "says"),
    [(1, "older than the version"), (-1, "which no liteagent writes")],
    ids=["older", "negative"],
)
def test_a_version_set_back_is_refused_and_the_store_opens_once_put_back(
    db: Path, version: int, says: str
) -> None:
    """A current database whose user_version was set to an older or a negative version is
    refused with SchemaVersionError naming the version, unchanged; putting the version back
    opens it with its events."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("kept"))
    conn = raw(db)
    conn.pragma("user_version", version)
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"schema version {version}, {says}"):
        sqlite_checkpointer(db)
    assert before == db.read_bytes()
    conn = raw(db)
    conn.pragma("user_version", SCHEMA_VERSION)
    conn.close()
    with sqlite_checkpointer(db) as cp:
        assert ["kept"] == texts(cp.read("s"))


def test_current_schema_version_opens(db: Path) -> None:
    """A database put back at SCHEMA_VERSION opens again with its events."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("kept"))
    conn = raw(db)
    conn.pragma("user_version", SCHEMA_VERSION + 1)
    conn.pragma("user_version", SCHEMA_VERSION)
    conn.close()
    with sqlite_checkpointer(db) as cp:
        assert ["kept"] == texts(cp.read("s"))


def test_newer_schema_in_rollback_mode_is_refused_unchanged(db: Path) -> None:
    """A newer-schema database in rollback-journal mode is refused without being modified."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("kept"))
    conn = raw(db)
    conn.pragma("journal_mode", "delete")
    conn.pragma("user_version", SCHEMA_VERSION + 1)
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError):
        sqlite_checkpointer(db)
    assert before == db.read_bytes()


# -- 3. damage -------------------------------------------------------------------------------------


def _damaged_event_db(db: Path, damaged_seq: int) -> None:
    """Two sessions of 10 long events; one byte of event ``damaged_seq`` of "hurt" is flipped
    (to another ASCII letter, so the body still decodes: only the checksum can notice)."""
    with sqlite_checkpointer(db) as cp:
        cp.append("fine", [prompt(long_text(100 + i)) for i in range(10)])
        cp.append("hurt", [prompt(long_text(i)) for i in range(1, 11)])
    assert not Path(f"{db}-wal").exists(), "close should checkpoint and remove the WAL"
    data = bytearray(db.read_bytes())
    marker = f"marker-{damaged_seq:05d}-".encode()
    at = data.find(marker)
    assert at >= 0
    assert -1 == data.find(marker, at + 1)
    data[at + len(marker) + 40] ^= 0x01
    db.write_bytes(bytes(data))


def test_flipped_byte_in_event_body_stops_read_at_that_event(db: Path) -> None:
    """A flipped byte in a stored body: read yields the events before it, then CorruptLogError
    naming the session and seq."""
    _damaged_event_db(db, damaged_seq=6)
    with sqlite_checkpointer(db) as cp:
        got, err = read_until_error(cp, "hurt")
        assert CorruptLogError is type(err)
        assert ("hurt", 6) == (err.session_id, err.seq)
        assert [long_text(i) for i in range(1, 6)] == texts(got)
        assert [long_text(100 + i) for i in range(10)] == texts(cp.read("fine"))


def test_flipped_byte_in_event_body_is_reported_by_check_integrity(db: Path) -> None:
    """check_integrity reports the flipped byte as kind "corrupt" at that session and seq."""
    _damaged_event_db(db, damaged_seq=6)
    with sqlite_checkpointer(db) as cp:
        report = cp.check_integrity()
    assert False is report.ok
    assert [("corrupt", "hurt", 6)] == [(p.kind, p.session_id, p.seq) for p in report.problems]


def _page_damaged_db(db: Path, table: str | None) -> None:
    """A database of ~390 pages whose b-tree page header is overwritten with garbage: the
    root page of ``table``, or (``None``) a page in the middle of the file (an events page)."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", [prompt(long_text(i)) for i in range(3000)])
    conn = raw(db)
    roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_master"))
    conn.close()
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    pages = len(data) // page_size
    assert pages > 300
    page = pages // 2 if table is None else roots[table]
    start = (page - 1) * page_size
    data[start : start + 64] = b"\xa5" * 64
    db.write_bytes(bytes(data))


def test_damaged_page_is_reported_by_check_integrity(db: Path) -> None:
    """A clobbered b-tree page makes check_integrity report not ok, with kind "database"."""
    _page_damaged_db(db, table=None)
    with sqlite_checkpointer(db) as cp:
        report = cp.check_integrity()
    assert False is report.ok
    assert "database" in {p.kind for p in report.problems}


def test_damaged_page_fails_integrity_check_on_open(db: Path) -> None:
    """A clobbered b-tree page makes integrity_check_on_open=True raise CorruptLogError."""
    _page_damaged_db(db, table=None)
    with pytest.raises(CorruptLogError):
        sqlite_checkpointer(db, integrity_check_on_open=True)


def test_damaged_sessions_page_is_reported_not_raised(db: Path) -> None:
    """A clobbered sessions table page is reported by check_integrity (kind "database")."""
    _page_damaged_db(db, table="sessions")
    with sqlite_checkpointer(db) as cp:
        report = cp.check_integrity()
    assert False is report.ok
    assert "database" in {p.kind for p in report.problems}


# -- 4. busy ---------------------------------------------------------------------------------------


def test_locked_database_gives_ebusy_after_the_timeout(db: Path) -> None:
    """A writer blocked by another connection's BEGIN IMMEDIATE gets StorageIOError(EBUSY)
    after about busy_timeout_ms, and nothing is written."""
    with sqlite_checkpointer(db, busy_timeout_ms=100) as cp:
        cp.append("s", prompts("a"))
        holder = raw(db)
        holder.execute("BEGIN IMMEDIATE")
        try:
            start = time.monotonic()
            with pytest.raises(StorageIOError) as info:
                cp.append("s", prompts("b"))
            elapsed = time.monotonic() - start
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert errno.EBUSY == info.value.errno
        assert 0.08 <= elapsed < 2.0, elapsed
        assert ["a"] == texts(cp.read("s"))
        assert 1 == cp.head("s")


def test_append_succeeds_once_the_lock_is_released(db: Path) -> None:
    """After the other connection commits, the same append succeeds."""
    with sqlite_checkpointer(db, busy_timeout_ms=100) as cp:
        cp.append("s", prompts("a"))
        holder = raw(db)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageIOError):
                cp.append("s", prompts("b"))
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert 2 == cp.append("s", prompts("b"))
        assert ["a", "b"] == texts(cp.read("s"))


def test_read_is_not_blocked_by_a_writer(db: Path) -> None:
    """A read completes while another connection holds BEGIN IMMEDIATE (WAL)."""
    with sqlite_checkpointer(db, busy_timeout_ms=5000) as cp:
        cp.append("s", prompts("a", "b"))
        holder = raw(db)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("DELETE FROM events")
        try:
            start = time.monotonic()
            actual = texts(cp.read("s"))
            elapsed = time.monotonic() - start
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert ["a", "b"] == actual
        assert elapsed < 4.0, elapsed  # blocked, it would wait out the 5 s busy timeout


# -- 5. fresh-file race ----------------------------------------------------------------------------


RACE_ROUNDS = 25


def _fresh_open_worker(files: list[str], name: str, barrier: Any, out: Any) -> None:
    """Child process: for each file, open the not-yet-existing database at the barrier and
    append one event; report the failures."""
    failures: list[str] = []
    for file in files:
        barrier.wait(30)
        try:
            with sqlite_checkpointer(file) as cp:
                cp.append("race", prompts(name))
        except Exception as e:  # noqa: BLE001 -- reported to the parent, which fails on it
            failures.append(f"{Path(file).name}: {type(e).__name__}: {e}")
    out.put((name, failures))


@pytest.mark.processes
def test_processes_creating_the_same_fresh_file_all_succeed(tmp_path: Path) -> None:
    """8 processes opening the same new database file at once all append (no BusyError)."""
    # One round loses the race only now and then, so the same 8 processes race on 25 files.
    files = [str(tmp_path / f"race{r}.db") for r in range(RACE_ROUNDS)]
    ctx = mp_context()
    barrier = ctx.Barrier(8)
    out = ctx.Queue()
    names = [f"p{n}" for n in range(8)]
    procs = [
        ctx.Process(target=_fresh_open_worker, args=(files, name, barrier, out)) for name in names
    ]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert [0] * 8 == [p.exitcode for p in procs]
    assert {name: [] for name in names} == results
    for file in files:
        with sqlite_checkpointer(file) as cp:
            events = list(cp.read("race"))
        assert list(range(1, 9)) == [e.seq for e in events]
        assert sorted(names) == sorted(texts(events))


# -- 6. pragmas and schema -------------------------------------------------------------------------


def test_database_is_wal_at_the_schema_version(cp: Checkpointer, db: Path) -> None:
    """The file is in WAL mode with user_version == SCHEMA_VERSION."""
    cp.append("s", prompts("a"))
    conn = raw(db)
    try:
        actual = (conn.pragma("journal_mode"), conn.pragma("user_version"))
    finally:
        conn.close()
    assert ("wal", SCHEMA_VERSION) == actual


def test_tables_exist(cp: Checkpointer, db: Path) -> None:
    """The tables sessions, events and blobs exist."""
    conn = raw(db)
    try:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert {"sessions", "events", "blobs"} <= tables


@pytest.mark.parametrize(("synchronous", "expected"), [("normal", 1), ("full", 2)])
def test_synchronous_is_set_on_the_connection(db: Path, synchronous: Any, expected: int) -> None:
    """The checkpointer's own connection runs with the requested synchronous level."""
    with sqlite_checkpointer(db, synchronous=synchronous) as cp, cp._conn() as conn:  # type: ignore[attr-defined]
        assert expected == conn.pragma("synchronous")


# -- 7. paging -------------------------------------------------------------------------------------

PAGED = 4500


@pytest.fixture
def paged(cp: Checkpointer) -> Checkpointer:
    """A checkpointer with session "big" of 4,500 events (more than two read pages)."""
    cp.append("big", [prompt(f"e{i}") for i in range(1, PAGED + 1)])
    return cp


def test_multi_page_read_is_complete(paged: Checkpointer) -> None:
    """A 4,500-event session reads back contiguous and complete."""
    events = list(paged.read("big"))
    assert list(range(1, PAGED + 1)) == [e.seq for e in events]
    assert [f"e{i}" for i in range(1, PAGED + 1)] == texts(events)


@pytest.mark.parametrize("since", [1999, 2000, 2001, 4499])
def test_read_since_near_page_boundaries(paged: Checkpointer, since: int) -> None:
    """read(since_seq) around the 2000-event page size yields exactly the later events."""
    events = list(paged.read("big", since_seq=since))
    assert list(range(since + 1, PAGED + 1)) == [e.seq for e in events]
    assert [f"e{i}" for i in range(since + 1, PAGED + 1)] == texts(events)


def test_truncate_during_multi_page_read_conflicts(paged: Checkpointer) -> None:
    """A truncate while a multi-page read iterates raises CheckpointConflictError at a page
    boundary at the latest, and everything yielded before is from the old history."""
    it = paged.read("big")
    got = [next(it)]
    paged.truncate("big", 100)
    paged.append("big", [prompt(f"new{i}") for i in range(PAGED)])
    with pytest.raises(CheckpointConflictError):
        got.extend(it)
    assert len(got) <= 2000
    assert [f"e{i}" for i in range(1, len(got) + 1)] == texts(got)


# -- 8. blobs --------------------------------------------------------------------------------------


def test_blob_is_a_row_of_the_blobs_table(cp: Checkpointer, db: Path) -> None:
    """blobs.put stores the data in the same database, table blobs."""
    data = b"blob content \x00\xff" * 100
    ref = cp.blobs.put(data)
    conn = raw(db)
    try:
        rows = conn.execute("SELECT data FROM blobs WHERE ref = ?", (ref,)).fetchall()
    finally:
        conn.close()
    assert [(data,)] == rows


def test_blob_changed_in_the_database_is_corrupt(cp: Checkpointer, db: Path) -> None:
    """A blob whose stored bytes were changed raises CorruptBlobError on get."""
    ref = cp.blobs.put(b"original content")
    conn = raw(db)
    try:
        conn.execute("UPDATE blobs SET data = ? WHERE ref = ?", (b"Original content", ref))
    finally:
        conn.close()
    with pytest.raises(CorruptBlobError):
        cp.blobs.get(ref)


def test_blobs_persist_and_are_shared(db: Path) -> None:
    """A blob is visible from a second instance on the same file and after reopening."""
    data = b"shared blob" * 50
    with sqlite_checkpointer(db) as first:
        ref = first.blobs.put(data)
        with sqlite_checkpointer(db) as second:
            assert data == second.blobs.get(ref)
    with sqlite_checkpointer(db) as reopened:
        assert (True, data) == (reopened.blobs.has(ref), reopened.blobs.get(ref))


# -- 9. arguments and paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{"synchronous": "fast"}, {"busy_timeout_ms": -1}, {"busy_timeout_ms": "5"}],
    ids=["synchronous-fast", "timeout-negative", "timeout-str"],
)
def test_bad_arguments_are_refused_before_io(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """Bad synchronous or busy_timeout_ms raise InvalidArgumentError and create nothing."""
    path = tmp_path / "sub" / "log.db"
    with pytest.raises(InvalidArgumentError):
        sqlite_checkpointer(path, **kwargs)
    assert [] == list(tmp_path.iterdir())


def test_missing_parent_folders_are_created(tmp_path: Path) -> None:
    """A path whose parent folders do not exist is created, and works."""
    path = tmp_path / "a" / "b" / "c" / "log.db"
    with sqlite_checkpointer(path) as cp:
        assert 1 == cp.append("s", prompts("a"))
    assert True is path.is_file()


def test_directory_path_is_a_storage_error(tmp_path: Path) -> None:
    """A directory given as the database file raises StorageIOError."""
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(StorageIOError):
        sqlite_checkpointer(folder)


# -- 10. threads -----------------------------------------------------------------------------------


def test_threads_share_one_checkpointer(cp: Checkpointer) -> None:
    """8 threads reading and appending to their own sessions on one object raise nothing and
    every session ends complete."""
    rounds = 60

    def work(n: int) -> None:
        sid = f"t{n}"
        for i in range(rounds):
            head = cp.append(sid, prompts(f"{n}:{i}"))
            assert [f"{n}:{i}"] == texts(cp.read(sid, since_seq=head - 1))
            assert head == cp.head(sid)
            assert i + 1 == len(list(cp.read(sid)))

    assert [] == run_threads(8, work)
    for n in range(8):
        assert [f"{n}:{i}" for i in range(rounds)] == texts(cp.read(f"t{n}"))


def test_dead_threads_connections_are_pruned(cp: Checkpointer) -> None:
    """After threads end, a new thread's call prunes their connections."""
    assert [] == run_threads(8, lambda n: cp.append(f"t{n}", prompts("x")))
    seen: list[tuple[int, int]] = []

    def one_call() -> None:
        cp.head("t0")
        seen.append((len(cp._conns), threading.active_count()))  # type: ignore[attr-defined]

    t = threading.Thread(target=one_call)
    t.start()
    t.join(30)
    [(conns, live)] = seen
    assert conns <= live + 1, (conns, live)
    assert len(cp._conns) <= threading.active_count() + 1  # type: ignore[attr-defined]


def test_connection_of_a_foreign_thread_is_not_pruned(cp: Checkpointer) -> None:
    """A live thread started with _thread keeps working after another thread opens a connection."""
    step = threading.Event()
    resume = threading.Event()
    result: list[object] = []

    def foreign() -> None:
        try:
            cp.append("f", prompts("1"))
            step.set()
            resume.wait(10)
            result.append(cp.append("f", prompts("2")))
        except Exception as e:  # noqa: BLE001 -- reported to the test
            result.append(type(e).__name__)
        finally:
            step.set()

    _thread.start_new_thread(foreign, ())
    assert step.wait(10)
    step.clear()
    t = threading.Thread(target=cp.append, args=("t", prompts("x")))
    t.start()
    t.join(30)
    resume.set()
    assert step.wait(10)
    assert [2] == result


# -- 11. :memory: ----------------------------------------------------------------------------------


def test_memory_checkpointers_do_not_share_data() -> None:
    """Two sqlite_checkpointer(":memory:") objects are separate databases."""
    with sqlite_checkpointer(":memory:") as a, sqlite_checkpointer(":memory:") as b:
        a.append("s", prompts("only in a"))
        ref = a.blobs.put(b"only in a")
        assert (0, [], False) == (b.head("s"), b.list(), b.blobs.has(ref))
        assert ["only in a"] == texts(a.read("s"))


def test_memory_checkpointer_from_threads() -> None:
    """One in-memory checkpointer used from 4 threads concurrently works."""
    rounds = 100
    with sqlite_checkpointer(":memory:") as cp:

        def work(n: int) -> None:
            for i in range(rounds):
                head = cp.append(f"m{n}", prompts(f"{n}:{i}"))
                assert [f"{n}:{i}"] == texts(cp.read(f"m{n}", since_seq=head - 1))
                cp.append("shared", prompts(f"{n}:{i}"))

        assert [] == run_threads(4, work)
        for n in range(4):
            assert [f"{n}:{i}" for i in range(rounds)] == texts(cp.read(f"m{n}"))
        shared = list(cp.read("shared"))
        assert list(range(1, 4 * rounds + 1)) == [e.seq for e in shared]


def test_file_memory_uri_creates_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite_checkpointer("file::memory:") writes no file to the current directory."""
    monkeypatch.chdir(tmp_path)
    with sqlite_checkpointer("file::memory:") as cp:
        cp.append("s", prompts("a"))
    assert [] == sorted(os.listdir(tmp_path))


def test_foreign_database_is_refused_unchanged(tmp_path: Path) -> None:
    """A SQLite database of another program (unversioned, other tables) is refused untouched."""
    db = tmp_path / "other.db"
    raw = apsw.Connection(str(db))
    raw.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, what TEXT)")
    raw.execute("INSERT INTO events(what) VALUES ('theirs')")
    raw.close()
    before = db.read_bytes()
    with pytest.raises(NotADatabaseError, match="not a liteagent log"):
        sqlite_checkpointer(db)
    assert before == db.read_bytes()


@pytest.mark.soak
@pytest.mark.processes
def test_children_forked_while_threads_use_the_store_exit(tmp_path: Path) -> None:
    """Four threads append and read through one checkpointer while the main thread forks 40
    children that exit at once: every child exits (none waits forever closing a copy of a
    connection, on a mutex a parent thread held at the fork), and the parent's store is whole
    and still written. (Soak only: in a full test run, about one child in a few hundred
    still stalls; see the README's note on forking while SQLite is in use.)"""
    stop = threading.Event()
    errors: list[BaseException] = []
    with sqlite_checkpointer(tmp_path / "log.db") as cp:

        def work(n: int) -> None:
            try:
                while not stop.is_set():
                    cp.append(f"s{n}", prompts("x"))
                    list(cp.read(f"s{n}"))
            except BaseException as e:  # noqa: BLE001 -- reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        children = []
        try:
            for _ in range(40):
                pid = os.fork()
                if pid == 0:  # pragma: no cover -- in the child
                    os._exit(0)
                children.append(pid)
                time.sleep(0.005)
            deadline = time.monotonic() + 30
            alive = set(children)
            while alive and time.monotonic() < deadline:
                for pid in list(alive):
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        alive.discard(pid)
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
            for pid in children:
                with contextlib.suppress(ChildProcessError, ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
        assert not alive, f"{len(alive)} forked children never exited"
        assert [] == errors
        assert cp.check_integrity().ok
        heads = [cp.head(f"s{n}") for n in range(4)]
        assert all(h > 0 for h in heads)
        assert heads[0] + 1 == cp.append("s0", prompts("after"))
