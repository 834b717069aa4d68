"""Contract tests of the session lease, one behaviour per test: in one process
(:class:`LeaseTests`, part of ``CheckpointerConformance``) and across instances and real OS
processes (:class:`DurableLeaseTests`, part of ``DurableConformance``)."""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .._contract import Checkpointer
from .._errors import (
    CheckpointerClosedError,
    InvalidArgumentError,
    InvalidSessionIdError,
    LeaseLostError,
    SessionLeasedError,
)
from .._gc import collect_garbage
from .._lease import Lease, LeaseInfo
from ._lease_processes import run_holder_killed, run_racers, run_second_process
from ._util import Factory, prompts, texts

__all__ = ["DurableLeaseTests", "LeaseTests"]

BAD_OWNERS: list[Any] = [5, "", "a" * 257, "line\nbreak", b"owner", ["x"]]
BAD_TTLS: list[Any] = [0, -1, 0.0, math.nan, math.inf, "30", True, None, 86_401]


class LeaseTests:
    """The lease contract in one process. Needs the ``cp`` fixture of ContractTests."""

    def test_acquire_then_release(self, cp: Checkpointer) -> None:
        """A lease is held until released; then nobody holds it."""
        assert cp.lease_holder("s") is None
        lease = cp.acquire_lease("s")
        assert isinstance(lease, Lease)
        assert lease.info == cp.lease_holder("s")
        assert ("s", False, False) == (lease.session_id, lease.released, lease.lost)
        lease.release()
        assert lease.released
        assert cp.lease_holder("s") is None

    def test_lease_is_not_reentrant(self, cp: Checkpointer) -> None:
        """A second acquire of a held lease fails, in the same process too, naming the holder."""
        lease = cp.acquire_lease("s", owner="first")
        with pytest.raises(SessionLeasedError) as info:
            cp.acquire_lease("s", owner="second")
        assert ("s", lease.info) == (info.value.session_id, info.value.holder)
        assert lease.info == cp.lease_holder("s")

    def test_released_lease_can_be_taken_again_with_a_new_token(self, cp: Checkpointer) -> None:
        """Every acquisition of a session's lease gets a larger fencing token."""
        tokens = []
        for _ in range(3):
            with cp.acquire_lease("s") as lease:
                tokens.append(lease.token)
        assert tokens == sorted(set(tokens))

    def test_release_is_idempotent(self, cp: Checkpointer) -> None:
        """Releasing twice is fine and does not release a later holder's lease."""
        first = cp.acquire_lease("s")
        first.release()
        second = cp.acquire_lease("s")
        first.release()
        assert second.info == cp.lease_holder("s")

    def test_with_block_releases(self, cp: Checkpointer) -> None:
        """A lease used as a context manager is released at the end of the block, also on
        an exception."""
        with pytest.raises(RuntimeError), cp.acquire_lease("s"):
            raise RuntimeError("the turn failed")
        assert cp.lease_holder("s") is None

    def test_leases_are_per_session(self, cp: Checkpointer) -> None:
        """Holding one session's lease does not stop another session's."""
        a = cp.acquire_lease("a")
        b = cp.acquire_lease("b")
        assert ("a", "b") == (a.session_id, b.session_id)
        assert cp.lease_holder("a") != cp.lease_holder("b")

    def test_default_owner_names_host_and_process(self, cp: Checkpointer) -> None:
        """The default owner is "<hostname>:<pid>:<hex>"; the info names this process."""
        lease = cp.acquire_lease("s")
        host, pid, tag = lease.owner.rsplit(":", 2)
        assert (socket.gethostname(), str(os.getpid())) == (host, pid)
        assert "" == tag.strip("0123456789abcdef")
        assert tag
        assert (os.getpid(), socket.gethostname()) == (lease.info.pid, lease.info.host)

    def test_given_owner_is_recorded(self, cp: Checkpointer) -> None:
        """An explicit owner is what lease_holder reports."""
        cp.acquire_lease("s", owner="worker-7", ttl=5)
        holder = cp.lease_holder("s")
        assert isinstance(holder, LeaseInfo)
        assert "worker-7" == holder.owner

    def test_close_releases_every_lease(self, factory: Factory) -> None:
        """close() releases the leases this checkpointer holds."""
        cp = factory()
        leases = [cp.acquire_lease("a"), cp.acquire_lease("b")]
        cp.close()
        assert [True, True] == [lease.released for lease in leases]
        leases[0].release()  # still idempotent after close

    def test_delete_keeps_the_lease(self, cp: Checkpointer) -> None:
        """Deleting a leased session's history leaves its lease held."""
        lease = cp.acquire_lease("s")
        cp.append("s", prompts("a"))
        cp.delete("s")
        assert lease.info == cp.lease_holder("s")
        with pytest.raises(SessionLeasedError):
            cp.acquire_lease("s")

    def test_a_lease_held_across_a_delete_is_free_once_released(self, cp: Checkpointer) -> None:
        """A lease held while its session is deleted (the backend may remove the record at the
        release): once released nobody holds it, and it can be taken again and fences writes
        again."""
        lease = cp.acquire_lease("s")
        cp.append("s", prompts("a"))
        cp.delete("s")
        lease.release()
        assert cp.lease_holder("s") is None
        with cp.acquire_lease("s") as again:
            assert again.info == cp.lease_holder("s")
            assert 1 == cp.append("s", prompts("b"), lease=again)
        with pytest.raises(LeaseLostError):
            cp.append("s", prompts("c"), lease=again)
        assert ["b"] == texts(cp.read("s"))

    def test_deleting_a_session_without_a_lease_leaves_its_lease_free(
        self, cp: Checkpointer
    ) -> None:
        """A session leased before and deleted without a lease: its lease is free and works."""
        cp.acquire_lease("s").release()
        cp.append("s", prompts("a"))
        cp.delete("s")
        assert cp.lease_holder("s") is None
        with cp.acquire_lease("s", owner="next") as lease:
            assert "next" == cp.lease_holder("s").owner  # type: ignore[union-attr]
            with pytest.raises(SessionLeasedError):
                cp.acquire_lease("s")
            cp.delete("s")  # under the lease: it stays held
            assert lease.info == cp.lease_holder("s")

    def test_a_garbage_collection_keeps_a_held_lease_of_a_session_not_written_yet(
        self, cp: Checkpointer
    ) -> None:
        """A lease taken on a session that has no event yet is held through a garbage
        collection: nobody else can take it, and the first write under it is accepted."""
        with cp.acquire_lease("new", owner="first-turn") as lease:
            report = collect_garbage(cp, grace=0)
            assert 0 == report.leases_dropped
            assert lease.info == cp.lease_holder("new")
            with pytest.raises(SessionLeasedError):
                cp.acquire_lease("new")
            assert 1 == cp.append("new", prompts("a"), lease=lease)
        assert ["a"] == texts(cp.read("new"))

    def test_writes_under_a_held_lease_are_written(self, cp: Checkpointer) -> None:
        """append, truncate and delete with ``lease=`` (held) behave as without it."""
        with cp.acquire_lease("s") as lease:
            assert 2 == cp.append("s", prompts("a", "b"), lease=lease)
            assert 1 == cp.truncate("s", 1, lease=lease)
        assert ["a"] == texts(cp.read("s"))
        with cp.acquire_lease("s") as lease:
            cp.delete("s", lease=lease)
        assert (0, []) == (cp.head("s"), [i.id for i in cp.list()])

    def test_writes_under_a_released_lease_are_refused(self, cp: Checkpointer) -> None:
        """append and truncate under a lease released meanwhile raise LeaseLostError (a
        SessionLeasedError) and write nothing."""
        lease = cp.acquire_lease("s")
        cp.append("s", prompts("a", "b"), lease=lease)
        lease.release()
        before = list(cp.read("s"))
        with pytest.raises(LeaseLostError, match="released"):
            cp.append("s", prompts("c"), lease=lease)
        with pytest.raises(SessionLeasedError):
            cp.truncate("s", 0, lease=lease)
        with pytest.raises(LeaseLostError):
            cp.delete("s", lease=lease)
        assert before == list(cp.read("s"))

    def test_writes_under_a_lease_now_held_by_another_are_refused(self, cp: Checkpointer) -> None:
        """A released lease stays refused after another acquire took the session."""
        old = cp.acquire_lease("s")
        old.release()
        cp.append("s", prompts("first"))
        with cp.acquire_lease("s"):
            with pytest.raises(LeaseLostError):
                cp.append("s", prompts("late"), lease=old)
            with pytest.raises(LeaseLostError):
                cp.delete("s", lease=old)
            assert ["first"] == texts(cp.read("s"))

    def test_a_lease_of_another_session_is_refused(self, cp: Checkpointer) -> None:
        """``lease=`` must be a lease of the session written: InvalidArgumentError otherwise,
        nothing written."""
        with cp.acquire_lease("a") as lease:
            with pytest.raises(InvalidArgumentError, match="'a'"):
                cp.append("b", prompts("x"), lease=lease)
            with pytest.raises(InvalidArgumentError):
                cp.truncate("b", 0, lease=lease)
        assert 0 == cp.head("b")

    @pytest.mark.parametrize("lease", ["lease", 5, object()], ids=repr)
    def test_a_lease_argument_that_is_no_lease_is_refused(
        self, cp: Checkpointer, lease: Any
    ) -> None:
        """``lease=`` that is not a Lease is InvalidArgumentError before anything is written."""
        with pytest.raises(InvalidArgumentError):
            cp.append("s", prompts("x"), lease=lease)
        assert 0 == cp.head("s")

    def test_a_lease_of_another_checkpointer_is_refused(self, factory: Factory) -> None:
        """A lease taken from another checkpointer object is InvalidArgumentError."""
        with factory() as a, factory() as b:
            if a is b:
                pytest.skip("this backend's factory returns one shared checkpointer")
            with a.acquire_lease("s") as lease, pytest.raises(InvalidArgumentError):
                b.append("s", prompts("x"), lease=lease)

    @pytest.mark.parametrize("owner", BAD_OWNERS, ids=repr)
    def test_bad_owner_is_refused(self, cp: Checkpointer, owner: Any) -> None:
        """An owner that is not a printable str of 1-256 characters is InvalidArgumentError."""
        with pytest.raises(InvalidArgumentError):
            cp.acquire_lease("s", owner=owner)
        assert cp.lease_holder("s") is None

    @pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
    def test_bad_ttl_is_refused(self, cp: Checkpointer, ttl: Any) -> None:
        """A ttl that is not a finite number of seconds in (0, 86400] is InvalidArgumentError."""
        with pytest.raises(InvalidArgumentError):
            cp.acquire_lease("s", ttl=ttl)
        assert cp.lease_holder("s") is None

    def test_bad_session_id_is_refused(self, cp: Checkpointer) -> None:
        """Lease calls validate the session id first."""
        with pytest.raises(InvalidSessionIdError):
            cp.acquire_lease("../x")
        with pytest.raises(InvalidSessionIdError):
            cp.lease_holder(None)  # type: ignore[arg-type]

    def test_closed_checkpointer_refuses_lease_calls(self, factory: Factory) -> None:
        """After close, acquire_lease and lease_holder raise CheckpointerClosedError."""
        cp = factory()
        cp.close()
        with pytest.raises(CheckpointerClosedError):
            cp.acquire_lease("s")
        with pytest.raises(CheckpointerClosedError):
            cp.lease_holder("s")


class DurableLeaseTests:
    """The lease across checkpointer instances and real OS processes."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    def test_another_instance_sees_and_respects_the_lease(self, tmp_path: Path) -> None:
        """A second checkpointer on the store sees the holder and cannot acquire until the
        lease is released."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            lease = a.acquire_lease("s", owner="a")
            assert lease.info == b.lease_holder("s")
            with pytest.raises(SessionLeasedError) as info:
                b.acquire_lease("s")
            assert lease.info == info.value.holder
            lease.release()
            assert b.lease_holder("s") is None
            assert lease.token < b.acquire_lease("s").token

    def test_a_forked_child_keeps_no_lock_its_parent_released(self, tmp_path: Path) -> None:
        """A process forked while a lease is held and a read is in progress (a daemon's
        ``multiprocessing`` worker holds copies of every descriptor, for as long as it lives):
        once the parent releases the lease and ends the read, another instance takes the
        lease and writes, without waiting for the child."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            a.append("s", prompts("a", "b"))
            lease = a.acquire_lease("s", owner="parent")
            reading = a.read("s")
            next(reading)
            child = os.fork()
            if child == 0:  # pragma: no cover -- the child only sleeps, holding the copies
                time.sleep(60)
                os._exit(0)
            try:
                lease.release()
                assert ["b"] == texts(reading)
                b.acquire_lease("s", owner="other").release()
                writer = threading.Thread(target=b.append, args=("s", prompts("c")))
                writer.start()
                writer.join(30)
                assert not writer.is_alive(), "the write waited for the forked child"
                assert ["a", "b", "c"] == texts(b.read("s"))
            finally:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)

    @pytest.mark.processes
    @pytest.mark.parametrize("how", ["release", "close", "with"])
    def test_a_forked_child_gives_up_none_of_its_parents_leases(
        self, tmp_path: Path, how: str
    ) -> None:
        """A child forked while its parent holds a lease releases its copy of the lease,
        closes its copy of the checkpointer, or leaves a ``with`` block around it: the parent
        still holds the lease (another process is refused it) and writes under it, and a
        write under the child's copy is refused (or the child's copy of the checkpointer is
        closed, for a backend whose connections cannot cross a fork)."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            lease = cp.acquire_lease("s", owner="parent")
            child = os.fork()
            if child == 0:  # pragma: no cover -- in the child
                code = 0
                try:
                    if how == "release":
                        lease.release()
                    elif how == "with":
                        with lease:
                            pass
                    try:
                        cp.append("s", prompts("from the child"), lease=lease)
                        code = 3
                    except (LeaseLostError, CheckpointerClosedError):  # closed: no connection
                        pass  # of the parent's may be used in a child (PostgreSQL's)
                    cp.close()
                except BaseException:  # noqa: BLE001 -- reported by the exit code
                    code = 4
                os._exit(code)
            _, status = os.waitpid(child, 0)
            assert 0 == os.waitstatus_to_exitcode(status)
            assert ("refused", "parent", os.getpid()) == run_second_process(factory, "s")
            assert 1 == cp.append("s", prompts("from the parent"), lease=lease)
            lease.release()
            assert ["from the parent"] == texts(cp.read("s"))

    def test_one_holder_at_a_time_while_sessions_are_deleted(self, tmp_path: Path) -> None:
        """Threads on three instances take, hold and release one session's lease while others
        delete the session, with and without its lease (a delete may remove the lease record
        while another acquire is under way): never two holders at once, and every acquire
        either gets the lease or is refused naming no one or a holder."""
        factory = self.checkpointer_factory(tmp_path / "store")
        instances = [factory() for _ in range(3)]
        holders: list[str] = []
        state = threading.Lock()
        stop = time.monotonic() + 1.5
        errors: list[BaseException] = []
        taken = [0]

        def work(n: int) -> None:
            cp = instances[n % len(instances)]
            try:
                while time.monotonic() < stop:
                    try:
                        lease = cp.acquire_lease("s", owner=f"w{n}")
                    except SessionLeasedError:
                        if n % 3 == 0:
                            cp.delete("s")  # without the lease
                        continue
                    with state:
                        holders.append(lease.owner)
                        assert len(holders) == 1, f"two holders at once: {holders}"
                        taken[0] += 1
                    if n % 2 == 0:
                        cp.delete("s")  # under the lease
                    time.sleep(0.0005)
                    with state:
                        holders.remove(lease.owner)
                    lease.release()
            except BaseException as e:  # noqa: BLE001 -- reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for cp in instances:
            cp.close()
        assert not errors, errors[0]
        assert taken[0] > 10

    def test_closing_an_instance_frees_its_leases_for_others(self, tmp_path: Path) -> None:
        """Leases of a closed checkpointer can be taken through another one."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as b:
            a = factory()
            a.acquire_lease("s")
            a.close()
            assert b.lease_holder("s") is None
            b.acquire_lease("s").release()

    @pytest.mark.processes
    def test_a_second_process_cannot_acquire_a_held_lease(self, tmp_path: Path) -> None:
        """While this process holds the lease, another process gets SessionLeasedError naming
        this process; after the release it gets the lease."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            lease = cp.acquire_lease("s", owner="parent")
            refused = run_second_process(factory, "s")
            lease.release()
            granted = run_second_process(factory, "s")
        assert ("refused", "parent", os.getpid()) == refused
        assert "granted" == granted[0]

    @pytest.mark.processes
    def test_processes_racing_for_a_lease_while_deleting_never_share_it(
        self, tmp_path: Path
    ) -> None:
        """Three processes take, hold and release one session's lease for a second and a half,
        deleting the session now and then (under the lease and without it; a delete may remove
        the lease record while another process is acquiring): a holder never finds another
        holding it too, and each process gets the lease."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory():
            pass
        results = run_racers(factory, "s", str(tmp_path / "holding"))
        assert [0, 0, 0] == [overlaps for _, overlaps in results]
        assert all(taken > 0 for taken, _ in results), results

    @pytest.mark.processes
    def test_a_garbage_collection_drops_the_lease_record_a_killed_holder_left(
        self, tmp_path: Path
    ) -> None:
        """A holder killed before its session's first write leaves a free lease record of a
        session that does not exist: a dry run counts it, a collection removes it (and no
        record of a session that exists), and the session's next lease has a larger token.
        (A backend without ``_lease_records`` lists no record, and drops none.)"""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            cp.append("kept", prompts("a"))
            cp.acquire_lease("kept").release()
        holder = run_holder_killed(factory, "orphan")
        with factory() as cp:
            left = sorted(cp._lease_records())
            orphans = len(set(left) - {"kept"})
            assert orphans == collect_garbage(cp, grace=0, dry_run=True).leases_dropped
            assert left == sorted(cp._lease_records())
            assert orphans == collect_garbage(cp, grace=0).leases_dropped
            assert "orphan" not in cp._lease_records()
            assert set(cp._lease_records()) <= {"kept"}
            assert 0 == collect_garbage(cp, grace=0).leases_dropped
            with cp.acquire_lease("orphan") as lease:
                assert holder.token < lease.token
            assert ["a"] == texts(cp.read("kept"))

    @pytest.mark.processes
    def test_a_holder_that_keeps_taking_other_leases_keeps_the_one_it_holds(
        self, tmp_path: Path
    ) -> None:
        """A lease held with a 1.5 s ttl while its holder takes and releases another lease
        every 0.1 s for twice that ttl (each acquisition wakes a backend's renewer): it is
        still held, another process is refused it, and a write under it is accepted."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            lease = cp.acquire_lease("victim", owner="holder", ttl=1.5)
            deadline = time.monotonic() + 3.0
            n = 0
            while time.monotonic() < deadline:
                cp.acquire_lease(f"other{n % 3}", ttl=1.5).release()
                n += 1
                time.sleep(0.1)
            refused = run_second_process(factory, "victim")
            assert ("refused", "holder", os.getpid()) == refused
            assert 1 == cp.append("victim", prompts("still mine"), lease=lease)
            lease.release()

    @pytest.mark.processes
    def test_sigkill_of_the_holder_frees_the_lease(self, tmp_path: Path) -> None:
        """A process holding the lease is killed with SIGKILL: the lease is free at once (no
        waiting for a ttl: the holder's process is gone) and the next acquire gets a larger
        token."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory():
            pass
        holder = run_holder_killed(factory, "s")
        with factory() as cp:
            lease = cp.acquire_lease("s")
        assert holder.pid != os.getpid()
        assert holder.token < lease.token
