"""The SQLite backend's session leases beyond the conformance suite: expiry, renewal, the
dead-holder and pid-reuse checks, a holder that was stopped past its ttl (its lease is lost),
and one renewer thread per checkpointer."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.eventlog._lease import check_lease_fresh, check_lease_held
from liteagent.eventlog._sqlite_lease import _started_self
from liteagent.eventlog.conformance._processes import mp_context
from liteagent.eventlog.errors import LeaseLostError, SessionLeasedError
from liteagent.eventlog.types import TextBlock, UserPrompt

RENEWER = "liteagent-sqlite-lease-renewer"


def put_row(db: Path, **fields: Any) -> None:
    """Write a leases row for session "s" directly (another holder, as the store would have)."""
    row = {
        "session_id": "s",
        "owner": "them",
        "pid": 1,
        "host": "elsewhere",
        "started": "",
        "token": 41,
        "expires_at": time.time() + 60,
        **fields,
    }
    conn = apsw.Connection(str(db))
    try:
        conn.execute(
            "INSERT OR REPLACE INTO leases(session_id, owner, pid, host, started, token, "
            "expires_at) VALUES (:session_id, :owner, :pid, :host, :started, :token, "
            ":expires_at)",
            row,
        )
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    with sqlite_checkpointer(path):
        pass
    return path


def renewers() -> int:
    return sum(t.name == RENEWER for t in threading.enumerate())


def test_unexpired_lease_of_another_host_is_respected(db: Path) -> None:
    """A live row of a holder on another host (whose pid cannot be checked) refuses the
    acquire and is reported by lease_holder."""
    put_row(db)
    with sqlite_checkpointer(db) as cp:
        with pytest.raises(SessionLeasedError) as info:
            cp.acquire_lease("s")
        holder = cp.lease_holder("s")
    assert holder is not None
    assert ("them", "elsewhere", 41) == (holder.owner, holder.host, holder.token)
    assert holder == info.value.holder


def test_expired_lease_is_free_and_the_token_goes_on(db: Path) -> None:
    """A row past its expiry is free: lease_holder says nobody, an acquire gets token 42."""
    put_row(db, expires_at=time.time() - 1)
    with sqlite_checkpointer(db) as cp:
        assert cp.lease_holder("s") is None
        assert 42 == cp.acquire_lease("s").token


@pytest.mark.parametrize("expires_at", [1e300, time.time() + 3 * 86_400])
def test_an_expiry_no_holder_can_set_is_damage_and_the_lease_free(
    db: Path, expires_at: float
) -> None:
    """A row whose expiry lies further ahead than any ttl (plus clock skew) could set would
    hold the session forever: it is read as free, and an acquire takes it."""
    put_row(db, expires_at=expires_at)
    with sqlite_checkpointer(db) as cp:
        assert cp.lease_holder("s") is None
        assert 42 == cp.acquire_lease("s").token


def test_lease_of_a_dead_process_on_this_host_is_free(db: Path) -> None:
    """A row of a process of this host that no longer exists is free before its expiry."""
    ctx = mp_context()
    proc = ctx.Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join(30)
    assert proc.pid is not None
    put_row(db, pid=proc.pid, host=socket.gethostname(), started=_started_self())
    with sqlite_checkpointer(db) as cp:
        assert cp.lease_holder("s") is None
        assert 42 == cp.acquire_lease("s").token


def test_reused_pid_does_not_keep_a_lease(db: Path) -> None:
    """A row naming this process's pid with another start time (a pid reused since) is free."""
    machine = _started_self().rpartition("|")[0]
    put_row(db, pid=os.getpid(), host=socket.gethostname(), started=f"{machine}|1")
    with sqlite_checkpointer(db) as cp:
        assert cp.lease_holder("s") is None


def test_held_lease_is_renewed_past_its_ttl(db: Path) -> None:
    """A lease with a 0.3 s ttl is still held (and its row not expired) after 1 s."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=0.3)
        time.sleep(1.0)
        holder = cp.lease_holder("s")
        assert holder is not None
        assert (lease.token, False) == (holder.token, lease.lost)
        assert holder.expires_at is not None
        assert holder.expires_at > time.time()


def test_lease_taken_over_is_marked_lost(db: Path) -> None:
    """When another holder has taken the row (it expired first), the next renewal marks the
    lease lost, and the other holder keeps it."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=0.3)
        put_row(db, token=lease.token + 1)
        deadline = time.monotonic() + 10
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert True is lease.lost
        lease.release()
        holder = cp.lease_holder("s")
        assert holder is not None
        assert "them" == holder.owner


def _prompt(text: str) -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),))


def test_writes_under_a_lease_taken_over_are_refused_before_the_renewer_notices(
    db: Path,
) -> None:
    """A lease whose row another holder took (after it expired) fences every write at once,
    inside the write's transaction, even before a renewal marked it lost: append and truncate
    raise LeaseLostError naming the new holder, nothing is written, the lease is then lost."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=3600)  # no renewal during the test
        cp.append("s", [_prompt("a"), _prompt("b")], lease=lease)
        put_row(db, token=lease.token + 1)  # taken by "them" once it had expired
        assert False is lease.lost
        with pytest.raises(LeaseLostError, match="another holder") as info:
            cp.append("s", [_prompt("late")], lease=lease)
        assert info.value.holder is not None
        assert "them" == info.value.holder.owner
        with pytest.raises(LeaseLostError):
            cp.truncate("s", 0, lease=lease)
        assert (2, True) == (cp.head("s"), lease.lost)


def test_a_delete_under_a_lease_taken_over_deletes_nothing(db: Path) -> None:
    """A delete fenced by a lease whose row another holder took raises LeaseLostError from
    inside its transaction (the lease was not known lost) and deletes nothing."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=3600)
        cp.append("s", [_prompt("a"), _prompt("b")], lease=lease)
        put_row(db, token=lease.token + 1)
        assert False is lease.lost
        with pytest.raises(LeaseLostError, match="another holder"):
            cp.delete("s", lease=lease)
        assert (2, True) == (cp.head("s"), lease.lost)


def test_a_fenced_append_fails_alone_in_a_group_commit(db: Path) -> None:
    """Appends committed together with one whose lease was taken over succeed; only the
    fenced one fails."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=3600)
        put_row(db, token=lease.token + 1)
        errors: list[BaseException] = []
        start = threading.Barrier(9)

        def fenced() -> None:
            start.wait()
            try:
                cp.append("s", [_prompt("late")], lease=lease)
            except LeaseLostError as e:
                errors.append(e)

        def other(i: int) -> None:
            start.wait()
            cp.append(f"o{i}", [_prompt(str(i))])

        threads = [threading.Thread(target=fenced)] + [
            threading.Thread(target=other, args=(i,)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert (1, 0) == (len(errors), cp.head("s"))
        assert [1] * 8 == [cp.head(f"o{i}") for i in range(8)]


def test_one_renewer_thread_per_checkpointer_and_only_while_held(db: Path) -> None:
    """Holding ten leases runs one renewer thread; it ends once none is held."""
    before = renewers()
    with sqlite_checkpointer(db) as cp:
        leases = [cp.acquire_lease(f"s{i}", ttl=0.3) for i in range(10)]
        assert before + 1 == renewers()
        for lease in leases:
            lease.release()
        deadline = time.monotonic() + 10
        while renewers() > before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert before == renewers()


def _hold_then_report(file: str, ready: Any, out: Any) -> None:
    """Child: take the lease with a short ttl, report, then (after being stopped and resumed)
    report whether it was found lost."""
    cp: Checkpointer = sqlite_checkpointer(file)
    lease = cp.acquire_lease("s", ttl=0.3)
    ready.put(lease.token)
    deadline = time.monotonic() + 20
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.02)
    out.put(lease.lost)
    lease.release()
    cp.close()


@pytest.mark.processes
def test_stopped_holder_loses_its_lease_to_another_process(db: Path) -> None:
    """A holder stopped (SIGSTOP) past its ttl: another process takes the lease with a larger
    token; once resumed, the stopped holder finds its lease lost."""
    ctx = mp_context()
    ready, out = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_hold_then_report, args=(str(db), ready, out))
    proc.start()
    try:
        token = ready.get(timeout=60)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.8)
        with sqlite_checkpointer(db) as cp:
            lease = cp.acquire_lease("s", ttl=30)
            os.kill(proc.pid, signal.SIGCONT)
            lost = out.get(timeout=60)
            assert (True, token + 1) == (lost, lease.token)
            assert lease.info == cp.lease_holder("s")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # type: ignore[arg-type]
        proc.join(30)


def test_a_lease_its_holder_could_not_renew_for_its_ttl_is_not_fresh(db: Path) -> None:
    """While another connection holds the database's write lock the holder's renewals wait;
    once its ttl has passed since the last renewal began, ``check_lease_fresh`` (the check
    before a tool call, or a file a restore writes) refuses it, though no one took it. When
    the lock goes, the renewal goes through and the lease is fresh again, and all along
    ``check_lease_held`` (and the fenced writes) accept it."""
    with sqlite_checkpointer(db) as cp:
        lease = cp.acquire_lease("s", ttl=0.5)
        check_lease_fresh(lease)
        blocker = apsw.Connection(str(db))
        blocker.execute("BEGIN IMMEDIATE")
        try:
            wait_for(lambda: _stale(lease), "the lease to go stale")
            check_lease_held(lease)
            with pytest.raises(LeaseLostError, match=r"last renewed .* beyond its ttl"):
                check_lease_fresh(lease)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        wait_for(lambda: not _stale(lease), "the lease to be renewed")
        holder = cp.lease_holder("s")
        assert holder is not None
        assert (lease.owner, lease.token) == (holder.owner, holder.token)
        assert 1 == cp.append("s", [_prompt("still mine")], lease=lease)


def _stale(lease: Any) -> bool:
    try:
        check_lease_fresh(lease)
    except LeaseLostError:
        return True
    return False


def wait_for(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
