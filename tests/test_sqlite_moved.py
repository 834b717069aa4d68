"""A SQLite store deleted, moved or replaced under an open checkpointer: SQLite would go on
writing to the old file, which nothing at the path finds again; the writer looks before and
after each transaction and fails the write (``StorageIOError``, ``ESTALE``), writing nothing
(or, when the file went away during the transaction, acknowledging nothing), and every later
one."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.eventlog.errors import StorageIOError
from liteagent.eventlog.types import TextBlock, UserPrompt


def _prompt(text: str) -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),))


def _texts(cp: Checkpointer, session_id: str) -> list[str]:
    return [
        b.text
        for e in cp.read(session_id)
        if isinstance(e.body, UserPrompt)
        for b in e.body.content
        if isinstance(b, TextBlock)
    ]


def _remove_store(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _backup(path: Path, session_id: str) -> Path:
    """A store at ``path`` holding ``session_id`` with one prompt, "from the backup"."""
    with sqlite_checkpointer(path) as other:
        other.append(session_id, [_prompt("from the backup")])
    return path


def _put_back(backup: Path, db: Path) -> None:
    """Rename ``backup`` over ``db`` (as restoring a backup would), without db's WAL."""
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.replace(backup, db)


def _refused(cp: Checkpointer, session_id: str, text: str) -> None:
    with pytest.raises(StorageIOError, match="deleted, moved or replaced while open") as caught:
        cp.append(session_id, [_prompt(text)])
    assert errno.ESTALE == caught.value.errno


def test_a_deleted_database_refuses_every_later_write(tmp_path: Path) -> None:
    """After the file is deleted, appends (to a known and to a new session) raise; a store
    opened at the path afterwards holds none of them."""
    db = tmp_path / "s.db"
    cp = sqlite_checkpointer(db)
    try:
        cp.append("a", [_prompt("kept")])
        _remove_store(db)
        _refused(cp, "a", "lost 1")
        _refused(cp, "b", "lost 2")
        _refused(cp, "a", "lost 3")
    finally:
        cp.close()
    with sqlite_checkpointer(db) as fresh:
        assert [] == [info.id for info in fresh.list()]


def test_a_database_whose_folder_was_moved_refuses_writes(tmp_path: Path) -> None:
    """The store's folder renamed away and a file put where it was: the path names no
    database any more, so appends raise, and write nothing into the moved file either."""
    folder = tmp_path / "store"
    folder.mkdir()
    cp = sqlite_checkpointer(folder / "s.db")
    try:
        cp.append("a", [_prompt("kept")])
        folder.rename(tmp_path / "moved")
        folder.write_text("not a folder")
        _refused(cp, "a", "lost")
    finally:
        cp.close()
    with sqlite_checkpointer(tmp_path / "moved" / "s.db") as moved:
        assert ["kept"] == _texts(moved, "a")


def test_a_replaced_database_is_not_written_through_the_old_file(tmp_path: Path) -> None:
    """A store renamed over the path (a restored backup) is left as it was: the open
    checkpointer's appends raise instead of landing in the file it opened first."""
    db, backup = tmp_path / "s.db", _backup(tmp_path / "backup.db", "a")
    cp = sqlite_checkpointer(db)
    try:
        cp.append("a", [_prompt("before")])
        _put_back(backup, db)
        _refused(cp, "a", "after")
        _refused(cp, "c", "new session")
    finally:
        cp.close()
    with sqlite_checkpointer(db) as fresh:
        assert ["a"] == [info.id for info in fresh.list()]
        assert ["from the backup"] == _texts(fresh, "a")


def test_reads_after_a_replacement_are_refused_in_every_thread(tmp_path: Path) -> None:
    """A store replaced under an open checkpointer: its reads (read, position, list, lease
    holder), in the thread that wrote and in another one that had its own connection open
    already, raise instead of answering from the old file (before any write noticed)."""
    db, backup = tmp_path / "s.db", _backup(tmp_path / "backup.db", "b")
    cp = sqlite_checkpointer(db)
    try:
        cp.append("a", [_prompt("before")])
        errors: list[BaseException] = []
        opened, replaced = threading.Event(), threading.Event()

        def reader() -> None:
            assert ["before"] == _texts(cp, "a")  # this thread's connection is open now
            opened.set()
            replaced.wait(30)
            try:
                _texts(cp, "a")
            except BaseException as e:  # noqa: BLE001 -- checked below
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        opened.wait(30)
        _put_back(backup, db)
        replaced.set()
        t.join(30)
        reads: list[Callable[[], object]] = [
            lambda: _texts(cp, "a"),
            lambda: cp.position("a"),
            cp.list,
            lambda: cp.lease_holder("a"),
        ]
        for read in reads:
            with pytest.raises(StorageIOError, match="reads and writes through it are refused"):
                read()
        assert [errno.ESTALE] == [getattr(e, "errno", e) for e in errors]
    finally:
        cp.close()


def test_concurrent_appends_after_a_replacement_are_never_acknowledged(tmp_path: Path) -> None:
    """Threads appending to their own sessions (batched commits) while the file is replaced:
    no append that started after the replacement is acknowledged, each raises ESTALE."""
    db, blank = tmp_path / "s.db", tmp_path / "blank.db"
    sqlite_checkpointer(blank).close()
    cp = sqlite_checkpointer(db)
    replaced = threading.Event()
    late_acks: list[str] = []
    late_errors: list[int | None] = []
    others: list[BaseException] = []

    def work(n: int) -> None:
        for i in range(400):
            after = replaced.is_set()
            try:
                cp.append(f"s{n}", [_prompt(f"{n}-{i}")])
            except StorageIOError as e:
                if after:
                    late_errors.append(e.errno)
                continue
            except BaseException as e:  # noqa: BLE001 -- reported by the assertion below
                others.append(e)
                return
            if after:
                late_acks.append(f"{n}-{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    try:
        for t in threads:
            t.start()
        while cp.position("s0").head < 20 and any(t.is_alive() for t in threads):
            replaced.wait(0.001)
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        os.replace(blank, db)
        replaced.set()
        for t in threads:
            t.join(120)
    finally:
        cp.close()
    assert [] == others
    assert [] == late_acks
    assert late_errors
    assert {errno.ESTALE} == set(late_errors)


_WAL_CHILD = """
import json, os, sys, time
from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.errors import StorageIOError
from liteagent.eventlog.conformance import prompts
db = sys.argv[1]
cp = sqlite_checkpointer(db)
acked = [cp.append("s", prompts(f"e{n}")) for n in range(50)]
os.unlink(db + "-wal")  # as another program would
try:
    cp.append("s", prompts("after"))
    outcome = "acknowledged"
except StorageIOError as e:
    outcome = str(e)
print(json.dumps([acked[-1], outcome]), flush=True)
time.sleep(60)  # killed here, with the connection (and the deleted log) open
"""


@pytest.mark.processes
def test_a_deleted_write_ahead_log_loses_nothing_acknowledged_at_a_crash(tmp_path: Path) -> None:
    """The ``-wal`` file deleted while a process writes (SQLite goes on writing to the deleted
    log): the next append is refused saying so, what was committed before is copied into the
    database, and after a SIGKILL of that process every acknowledged event is there."""
    db = str(tmp_path / "log.db")
    child = subprocess.Popen(
        [sys.executable, "-c", _WAL_CHILD, db], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        last, outcome = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert 50 == last
    assert "write-ahead log" in outcome
    assert "was deleted" in outcome
    with sqlite_checkpointer(db) as cp:
        assert [f"e{n}" for n in range(50)] == _texts(cp, "s")
