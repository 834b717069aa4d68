"""Group commit: every SQLite checkpointer of a process on one database file appends through one
writer, which commits the appends that arrive together in one transaction.

Deterministic batches are made by holding the database's write lock from another connection:
the first append becomes the leader and waits for the lock, the next ones queue behind it, and
once the lock is released they are committed together by the next leader. Conditions are still
checked per session inside the transaction: a stale ``expected_head`` or a damaged session fails
only its own append. The writer's counters (``batches``, ``writes``) show how many transactions
ran. A real OS process SIGKILLed in the middle of batches loses nothing it acknowledged.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.eventlog._sqlite_writer import Writer, group_commit, set_group_commit
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.conformance._processes import mp_context
from liteagent.eventlog.errors import CheckpointConflictError, CorruptLogError, StorageIOError

# -- helpers ---------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


@pytest.fixture
def batching_off() -> Iterator[None]:
    """Turn group commit off for the test (the process-wide switch), on again after."""
    before = group_commit()
    set_group_commit(False)
    try:
        yield
    finally:
        set_group_commit(before)


def writer_of(cp: Checkpointer) -> Writer:
    w = cp._writer  # type: ignore[attr-defined]
    assert isinstance(w, Writer)
    return w


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class Calls:
    """Runs calls in threads and keeps what each returned or raised, by name."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def start(self, name: str, call: Callable[[], Any]) -> None:
        def body() -> None:
            try:
                self.results[name] = call()
            except Exception as e:  # noqa: BLE001 -- the test looks at it
                self.results[name] = e

        t = threading.Thread(target=body)
        t.start()
        self.threads.append(t)

    def join(self) -> None:
        for t in self.threads:
            t.join(60)
        assert [] == [t.name for t in self.threads if t.is_alive()]


def queue_behind_a_locked_database(
    db: Path, cp: Checkpointer, calls: dict[str, Callable[[], Any]]
) -> tuple[Calls, int]:
    """Hold the write lock from another connection, start a first append (the leader, which
    waits for the lock) and then ``calls`` (which queue behind it), release the lock, and
    return the finished calls and how many transactions the writer ran meanwhile."""
    w = writer_of(cp)
    holder = apsw.Connection(str(db))
    holder.execute("BEGIN IMMEDIATE")
    before = w.batches
    running = Calls()
    try:
        running.start("leader", lambda: cp.append("leader", prompts("first")))
        wait_for(w.leading, "the leader to start its commit")
        for name, call in calls.items():
            running.start(name, call)
        wait_for(lambda: w.queued() == len(calls), "the appends to queue")
    finally:
        holder.execute("COMMIT")
        holder.close()
    running.join()
    return running, w.batches - before


# -- batches ---------------------------------------------------------------------------------------


def test_appends_arriving_together_share_one_commit(db: Path) -> None:
    """20 appends queued while a commit is pending are committed in one transaction, and each
    caller gets its own head."""
    with sqlite_checkpointer(db) as cp:
        calls = {f"s{i}": (lambda i=i: cp.append(f"s{i}", prompts(f"e{i}"))) for i in range(20)}
        done, transactions = queue_behind_a_locked_database(db, cp, calls)
        assert {**{f"s{i}": 1 for i in range(20)}, "leader": 1} == done.results
        assert 2 == transactions
        for i in range(20):
            assert [f"e{i}"] == texts(cp.read(f"s{i}"))


def test_batching_off_commits_each_append_alone(db: Path, batching_off: None) -> None:
    """With group commit turned off, the same 20 queued appends take 20 transactions."""
    with sqlite_checkpointer(db) as cp:
        calls = {f"s{i}": (lambda i=i: cp.append(f"s{i}", prompts(f"e{i}"))) for i in range(20)}
        done, transactions = queue_behind_a_locked_database(db, cp, calls)
        assert {**{f"s{i}": 1 for i in range(20)}, "leader": 1} == done.results
        assert 21 == transactions


def test_checkpointers_on_one_file_share_the_writer(db: Path, tmp_path: Path) -> None:
    """Two checkpointers on the same file (one through a symlink) use one writer; a
    checkpointer on another file has its own."""
    link = tmp_path / "link.db"
    with sqlite_checkpointer(db) as a:
        link.symlink_to(db)
        with sqlite_checkpointer(link) as b, sqlite_checkpointer(tmp_path / "other.db") as c:
            assert writer_of(a) is writer_of(b)
            assert writer_of(a) is not writer_of(c)


def test_conflicts_and_damage_fail_only_their_own_append(db: Path) -> None:
    """In one batch: a stale expected_head raises CheckpointConflictError, an append to a
    session with a damaged row raises CorruptLogError, and the other appends commit."""
    with sqlite_checkpointer(db) as cp:
        for sid in ("ok1", "ok2", "stale", "hurt"):
            cp.append(sid, prompts("a", "b"))
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE events SET ts = 1.0 WHERE session_id = 'hurt' AND seq = 1")
    conn.close()
    with sqlite_checkpointer(db) as cp:
        calls = {
            "ok1": lambda: cp.append("ok1", prompts("c"), expected_head=2),
            "stale": lambda: cp.append("stale", prompts("c"), expected_head=1),
            "hurt": lambda: cp.append("hurt", prompts("c")),
            "ok2": lambda: cp.append("ok2", prompts("c")),
        }
        done, transactions = queue_behind_a_locked_database(db, cp, calls)
        assert (3, 3) == (done.results["ok1"], done.results["ok2"])
        assert isinstance(done.results["stale"], CheckpointConflictError)
        assert isinstance(done.results["hurt"], CorruptLogError)
        assert ["a", "b", "c"] == texts(cp.read("ok1"))
        assert ["a", "b", "c"] == texts(cp.read("ok2"))
        assert ["a", "b"] == texts(cp.read("stale"))
        assert 2 == transactions


def test_appends_to_one_session_in_one_batch_chain(db: Path) -> None:
    """Several appends to the same session in one batch get consecutive heads, each checked
    against the state left by the ones before it in the batch."""
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("0"))
        calls = {f"a{i}": (lambda i=i: cp.append("s", prompts(f"{i + 1}"))) for i in range(5)}
        calls["expects 1"] = lambda: cp.append("s", prompts("x"), expected_head=1)
        done, _ = queue_behind_a_locked_database(db, cp, calls)
        heads = sorted(v for k, v in done.results.items() if k.startswith("a"))
        assert [2, 3, 4, 5, 6] == heads
        assert isinstance(done.results["expects 1"], CheckpointConflictError)
        assert 6 == len(list(cp.read("s")))


# -- many threads ----------------------------------------------------------------------------------


def _many_threads_with_stale_heads(db: Path) -> None:
    threads, rounds = 40, 25
    acked: dict[int, list[str]] = {n: [] for n in range(threads)}
    conflicts: dict[int, int] = dict.fromkeys(range(threads), 0)
    with sqlite_checkpointer(db) as cp:
        barrier = threading.Barrier(threads)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            rng = random.Random(n)
            sid = f"t{n}"
            head = 0
            try:
                barrier.wait(30)
                for i in range(rounds):
                    stale = head > 0 and rng.random() < 0.3
                    try:
                        head = cp.append(
                            sid, prompts(f"{n}:{i}"), expected_head=head - 1 if stale else head
                        )
                    except CheckpointConflictError:
                        assert stale
                        conflicts[n] += 1
                        continue
                    assert not stale
                    acked[n].append(f"{n}:{i}")
            except BaseException as e:  # noqa: BLE001 -- reported to the test
                errors.append(e)

        pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(120)
        assert [] == errors
        for n in range(threads):
            assert acked[n] == texts(cp.read(f"t{n}"))
        assert sum(conflicts.values()) > 0
        assert sum(len(a) for a in acked.values()) + sum(conflicts.values()) == threads * rounds


def test_many_threads_with_stale_heads(db: Path) -> None:
    """40 threads append to their own sessions with expected_head, about 30% of them stale:
    every acknowledged event is there exactly once and in order, every stale append raised
    CheckpointConflictError to its caller."""
    _many_threads_with_stale_heads(db)


def test_many_threads_with_stale_heads_batching_off(db: Path, batching_off: None) -> None:
    """The same with group commit turned off."""
    _many_threads_with_stale_heads(db)


def test_a_thousand_threads_default_settings_no_lock_errors(db: Path) -> None:
    """1,000 threads appending 3 times each to their own sessions of one file, default
    settings: no "database is locked" (nor any other) error, every event there."""
    with sqlite_checkpointer(db) as cp:
        errors: list[BaseException] = []
        barrier = threading.Barrier(1000)
        writes = writer_of(cp).writes

        def work(n: int) -> None:
            try:
                barrier.wait(60)
                for i in range(3):
                    cp.append(f"t{n}", prompts(f"{n}:{i}"))
            except BaseException as e:  # noqa: BLE001 -- reported to the test
                errors.append(e)

        pool = [threading.Thread(target=work, args=(n,)) for n in range(1000)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(240)
        assert [] == [t for t in pool if t.is_alive()]
        assert [] == [e for e in errors if isinstance(e, StorageIOError)]
        assert [] == errors
        assert all([f"{n}:{i}" for i in range(3)] == texts(cp.read(f"t{n}")) for n in range(1000))
        assert 3000 == writer_of(cp).writes - writes


def test_threads_of_one_process_never_wait_on_the_file_lock(db: Path) -> None:
    """With busy_timeout_ms=0 (any wait for SQLite's lock fails at once), 100 threads
    appending 10 times each get no error: the threads of a process queue for its one writer,
    never for the file lock (with a connection per thread, they raised "database is locked")."""
    with sqlite_checkpointer(db, busy_timeout_ms=0) as cp:
        errors: list[BaseException] = []
        barrier = threading.Barrier(100)

        def work(n: int) -> None:
            try:
                barrier.wait(60)
                for i in range(10):
                    cp.append(f"t{n}", prompts(f"{n}:{i}"))
            except BaseException as e:  # noqa: BLE001 -- reported to the test
                errors.append(e)

        pool = [threading.Thread(target=work, args=(n,)) for n in range(100)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(120)
        assert [] == errors
        assert all(10 == cp.head(f"t{n}") for n in range(100))


# -- SIGKILL mid-batch -----------------------------------------------------------------------------


def _append_and_log_acks(file: str, ack_path: str, threads: int) -> None:
    """Child: ``threads`` threads append to their own sessions forever; after each append is
    acknowledged, one line "<session> <head>" is written to the ack file (O_APPEND)."""
    cp = sqlite_checkpointer(file, synchronous="full")
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def work(n: int) -> None:
        sid = f"k{n}"
        i = 0
        while True:
            batch = prompts(*[f"{sid}:{i + j}" for j in range(1 + i % 3)])
            head = cp.append(sid, batch)
            i += len(batch)
            os.write(fd, f"{sid} {head}\n".encode())

    for n in range(threads):
        threading.Thread(target=work, args=(n,), daemon=True).start()
    signal.pause()


@pytest.mark.processes
def test_sigkill_mid_batch_loses_nothing_acknowledged(db: Path, tmp_path: Path) -> None:
    """A process whose 16 threads append (group-committed, synchronous="full") is killed with
    SIGKILL at random moments, 5 times in a row on the same store: every acknowledged head is
    in the log, every session's log is a contiguous prefix of what its thread appended."""
    ctx = mp_context()
    rng = random.Random(20261201)
    acks = tmp_path / "acks"
    with sqlite_checkpointer(db):
        pass
    for _ in range(5):
        proc = ctx.Process(target=_append_and_log_acks, args=(str(db), str(acks), 16))
        proc.start()
        wait_for(lambda: acks.exists() and acks.stat().st_size > 0, "the first acks")
        time.sleep(rng.uniform(0.05, 0.3))
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        acked: dict[str, int] = {}
        for line in acks.read_text().splitlines():
            sid, head = line.split()
            acked[sid] = max(acked.get(sid, 0), int(head))
        with sqlite_checkpointer(db) as cp:
            assert True is cp.check_integrity().ok
            for sid, head in acked.items():
                got = texts(cp.read(sid))
                assert head <= len(got), sid
                assert [f"{sid}:{i}" for i in range(len(got))] == got
        acks.unlink()
        # The next round's process starts the sessions again from seq 1: clear them.
        with sqlite_checkpointer(db) as cp:
            for sid in acked:
                cp.delete(sid)
