"""Waiting for SQLite's write lock while other processes keep taking it.

A real process (a plain apsw connection, as another program or another host process would
be) takes the write lock again and again, holding it for 40 ms with a 1 ms gap. SQLite's own
busy timeout looks for the lock less and less often (every 100 ms after its first tries), so
a waiter would mostly miss the gaps and fail past its timeout; the checkpointer's waiter looks
every few milliseconds and gets in. A lease held by another process is refused after a read,
without waiting for the write lock at all.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.errors import SessionLeasedError, StorageIOError
from liteagent.eventlog.types import TextBlock, UserPrompt

HOG = """
import apsw, sys, time
conn = apsw.Connection(sys.argv[1])
conn.set_busy_timeout(60000)
hold, gap = float(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + 120  # stops by itself
while time.monotonic() < deadline:
    conn.execute("BEGIN IMMEDIATE")
    open(sys.argv[4], "w").close()  # it holds the lock now
    time.sleep(hold)
    conn.execute("COMMIT")
    time.sleep(gap)
"""


def _prompt() -> UserPrompt:
    return UserPrompt(content=(TextBlock("x"),))


@contextmanager
def _hog(db: Path, hold: float, gap: float) -> Iterator[None]:
    """Another process taking the write lock for ``hold`` s, then letting go for ``gap`` s."""
    started = db.with_name("hog-started")
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(db), str(hold), str(gap), started])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None, "the lock holder ended early"
            assert time.monotonic() < deadline, "the lock holder never took the lock"
            time.sleep(0.005)
        yield
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    with sqlite_checkpointer(path) as cp:
        cp.append("s", [_prompt()])  # the schema exists before the other process opens it
    return path


def test_appends_get_the_lock_between_another_process_s_transactions(db: Path) -> None:
    """Ten appends, each allowed 2 s, while another process holds the lock 40 ms of every 41:
    every one is committed (SQLite's own busy timeout failed most of them)."""
    with sqlite_checkpointer(db, busy_timeout_ms=2000) as cp, _hog(db, 0.04, 0.001):
        for _ in range(10):
            cp.append("s", [_prompt()])
        assert 11 == cp.head("s")


def test_no_busy_timeout_fails_at_once_with_a_storage_error(db: Path) -> None:
    """``busy_timeout_ms=0``: a locked database is a StorageIOError at once, and the append
    stored nothing."""
    with (
        sqlite_checkpointer(db, busy_timeout_ms=0) as cp,
        _hog(db, 10.0, 0.0),
        pytest.raises(StorageIOError, match="stayed locked past busy_timeout_ms"),
    ):
        cp.append("s", [_prompt()])
    with sqlite_checkpointer(db) as cp:
        assert 1 == cp.head("s")


def test_a_held_lease_is_refused_without_waiting_for_the_write_lock(db: Path) -> None:
    """Another process holds ``s``'s lease: acquiring it while a third keeps the write lock
    is SessionLeasedError (the lease was read), not a StorageIOError after the busy timeout."""
    with sqlite_checkpointer(db) as holder:
        lease = holder.acquire_lease("s")
        with (
            sqlite_checkpointer(db, busy_timeout_ms=200) as other,
            _hog(db, 30.0, 0.0),
            pytest.raises(SessionLeasedError),
        ):
            other.acquire_lease("s")
        lease.release()
