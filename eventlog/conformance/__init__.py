"""liteagent.eventlog.conformance — the Checkpointer conformance suite, as importable test code.

A backend's test file subclasses these classes in a few lines (pytest collects the inherited
tests)::

    import functools
    from liteagent.eventlog import file_checkpointer
    from liteagent.eventlog.conformance import (
        CheckpointerConformance, CrashConformance, DurableConformance)

    class TestFileCheckpointer(CheckpointerConformance, DurableConformance, CrashConformance):
        def checkpointer_factory(self, path):
            return functools.partial(file_checkpointer, path)

- :class:`CheckpointerConformance` — every row of the contract in one process (session leases
  and the blob store's garbage-collection hooks and the live tail, ``follow``, included), and a
  hypothesis state machine against a plain model.
- :class:`DurableConformance` — for stores that outlive the checkpointer object: reopening,
  two instances, and real OS processes racing on one session and on separate sessions; a
  lease held in one process refuses another, and a holder killed with SIGKILL frees it; a
  garbage collection racing another process's appends, and one killed with SIGKILL, never
  remove a referenced blob; a follower delivers what other instances and processes append.
- :class:`CrashConformance` — writers SIGKILLed at random moments during append and truncate
  (``crash_rounds`` per test in the default run; ``soak_crash_rounds`` under ``-m soak``).
- :class:`CorruptionConformance` — random damage to a closed store (``corruption_trials`` per
  test, ``soak_corruption_trials`` under ``-m soak``), through a ``damage(path, session_id,
  rng)`` hook; :func:`damage_file_log`, :func:`damage_sqlite` and :func:`damage_postgres`
  damage the built-in backends' stores.

Needs the ``test`` extra (pytest, hypothesis). The factory must be picklable for the process
tests (a ``functools.partial`` of a backend constructor is), and its module importable by name
in their child processes: installed, or on ``sys.path`` before the first of them starts (the
children come from a forkserver started then). Writing a backend: :mod:`liteagent.eventlog.backend`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import threading
from pathlib import Path

import pytest
from hypothesis.stateful import run_state_machine_as_test

from .._contract import Checkpointer, Position
from .._errors import CheckpointConflictError, CheckpointerError
from ._contract_tests import BAD_SESSION_IDS, ContractTests
from ._corruption import CorruptionConformance, CorruptionTrialError
from ._damage_file import TAIL_LOSS, damage_file_log
from ._damage_postgres import damage_postgres
from ._damage_sqlite import damage_sqlite
from ._follow_tests import DurableFollowTests, FollowTests
from ._gc_tests import BlobCollectionTests, DurableBlobCollectionTests
from ._lease_tests import DurableLeaseTests, LeaseTests
from ._machine import MACHINE_SETTINGS, make_machine
from ._processes import (
    run_checks_beside_churn,
    run_crash_round,
    run_racing_writers,
    run_repairs_beside_creation,
    run_separate_writers,
)
from ._util import Factory, KillSettling, prompt, prompts, texts

__all__ = [
    "BAD_SESSION_IDS",
    "TAIL_LOSS",
    "CheckpointerConformance",
    "CorruptionConformance",
    "CorruptionTrialError",
    "CrashConformance",
    "DurableConformance",
    "Factory",
    "damage_file_log",
    "damage_postgres",
    "damage_sqlite",
    "prompt",
    "prompts",
    "texts",
]


def _open_fresh(factory_for: object, path: Path) -> Checkpointer:
    make = factory_for(path)  # type: ignore[operator]
    result: Checkpointer = make()
    return result


class CheckpointerConformance(ContractTests, LeaseTests, BlobCollectionTests, FollowTests):
    """The Checkpointer contract for one process (docs/architecture.md §4). Implement
    :meth:`checkpointer_factory`."""

    def test_state_machine_against_model(self) -> None:
        """Random sequences of appends, truncates, deletes and reads match a plain model."""
        machine = make_machine(functools.partial(_open_fresh, self.checkpointer_factory))
        run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)


class DurableConformance(DurableLeaseTests, DurableBlobCollectionTests, DurableFollowTests):
    """Stores that outlive the checkpointer object, shared by instances and processes
    (leases included)."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    def test_reopen_keeps_events_and_position(self, tmp_path: Path) -> None:
        """Events and the (head, generation) position survive close and reopen."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            cp.append("s", prompts("a", "b", "c"))
            cp.truncate("s", 2)
            pos = cp.position("s")
        with factory() as cp:
            assert pos == cp.position("s")
            assert ["a", "b"] == texts(cp.read("s"))
            assert ["s"] == [i.id for i in cp.list()]
            assert 3 == cp.append(
                "s", prompts("d"), expected_head=2, expected_generation=pos.generation
            )

    def test_blobs_survive_reopen(self, tmp_path: Path) -> None:
        """A blob put before close is there after reopen."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            ref = cp.blobs.put(b"snapshot bytes")
        with factory() as cp:
            assert b"snapshot bytes" == cp.blobs.get(ref)

    def test_a_relative_path_keeps_its_store_after_a_change_of_folder(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store opened by a path relative to the current folder stays that store when the
        process changes folder (a daemon's ``chdir``): appends, reads from a thread started
        afterwards (its own connections), blobs, and a reopen from the first folder; nothing
        appears in the new folder."""
        monkeypatch.chdir(tmp_path.parent)
        factory = self.checkpointer_factory(Path(tmp_path.name) / "store")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        with factory() as cp:
            cp.append("s", prompts("a"))
            ref = cp.blobs.put(b"kept")
            monkeypatch.chdir(elsewhere)
            cp.append("s", prompts("b"))
            seen: list[list[str]] = []
            reader = threading.Thread(target=lambda: seen.append(texts(cp.read("s"))))
            reader.start()
            reader.join(60)
            assert [["a", "b"]] == seen
            assert b"kept" == cp.blobs.get(ref)
            assert ["s"] == [i.id for i in cp.list()]
        assert [] == os.listdir(elsewhere)
        monkeypatch.chdir(tmp_path.parent)
        with factory() as cp:
            assert ["a", "b"] == texts(cp.read("s"))

    def test_stale_instance_gets_conflict(self, tmp_path: Path) -> None:
        """Two instances on one store: the one with an old head conflicts, never overwrites."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            a.append("s", prompts("a1"))
            seen = b.position("s")
            a.append("s", prompts("a2"))
            with pytest.raises(CheckpointConflictError):
                b.append("s", prompts("b1"), expected_head=seen.head)
            assert ["a1", "a2"] == texts(b.read("s"))

    def test_truncate_by_one_instance_is_seen_by_another(self, tmp_path: Path) -> None:
        """Another instance sees a truncate at once: new position, new history, ABA refused."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            a.append("s", prompts("1", "2", "3"))
            stale = b.position("s")
            a.truncate("s", 1)
            a.append("s", prompts("2'", "3'"))
            assert Position(3, a.position("s").generation) == b.position("s")
            assert stale.generation != b.position("s").generation
            with pytest.raises(CheckpointConflictError):
                b.append("s", prompts("4"), expected_head=3, expected_generation=stale.generation)
            assert ["1", "2'", "3'"] == texts(b.read("s"))
            assert 4 == b.append("s", prompts("4"))

    def test_delete_by_one_instance_is_seen_by_another(self, tmp_path: Path) -> None:
        """A session deleted through one instance is gone for another, which can recreate it."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            a.append("s", prompts("1", "2"))
            assert 2 == b.head("s")
            a.delete("s")
            assert Position(0, 0) == b.position("s")
            assert 1 == b.append("s", prompts("new"))
            assert ["new"] == texts(a.read("s"))

    @pytest.mark.processes
    def test_processes_racing_on_one_session(self, tmp_path: Path) -> None:
        """4 processes append to one session with expected_head and retry: every conflict is
        raised, the log is contiguous 1..N and holds each event exactly once, at the seq its
        writer was told."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory():
            pass  # create the store once, before the race
        conflicts, acks = run_racing_writers(factory, processes=4, count=25)
        assert conflicts >= 3
        with factory() as cp:
            events = list(cp.read("race"))
        assert list(range(1, 101)) == [e.seq for e in events]
        by_seq = {e.seq: t for e, t in zip(events, texts(events), strict=True)}
        assert 100 == len(set(by_seq.values()))
        for name, seqs in acks.items():
            assert [f"{name}:{i}" for i in range(25)] == [by_seq[s] for s in seqs]

    @pytest.mark.processes
    def test_processes_writing_separate_sessions(self, tmp_path: Path) -> None:
        """4 processes appending to their own sessions each leave a contiguous, complete log."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory():
            pass
        ids = run_separate_writers(factory, processes=4, count=50)
        with factory() as cp:
            for sid in ids:
                assert [f"{sid}:{i}" for i in range(50)] == texts(cp.read(sid))
            assert sorted(ids) == sorted(i.id for i in cp.list())

    @pytest.mark.processes
    def test_integrity_checks_beside_other_writers_find_nothing(self, tmp_path: Path) -> None:
        """check_integrity() run over and over while another process appends, truncates,
        deletes and creates sessions reports no problem and refuses no write: a session that
        grew, shrank or went away while it was checked is not damaged."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory():
            pass
        checks, writes, problems = run_checks_beside_churn(factory, seconds=2.0)
        assert checks >= 5
        assert writes >= 200
        assert [] == problems, f"{checks} checks beside {writes} writes found: {problems[:5]}"
        with factory() as cp:
            for n in range(4):
                cp.append(f"churn{n}", prompts("after"))
            assert cp.check_integrity().ok

    @pytest.mark.processes
    def test_repairs_beside_a_writer_creating_sessions_find_them_healthy(
        self, tmp_path: Path
    ) -> None:
        """repair() of the session another process is creating and appending to (a
        ``doctor --repair`` sweep beside live agents) finds nothing to repair and loses no
        acknowledged event."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as cp:
            try:
                cp.repair("probe")
            except CheckpointerError:
                pytest.skip("this backend has no repair")
        repairs, repaired, acked, heads = run_repairs_beside_creation(factory, sessions=150)
        assert repairs >= 50
        assert [] == repaired, f"{len(repaired)} of {repairs} repairs changed a healthy session"
        assert acked == heads


class CrashConformance(KillSettling):
    """Writers killed with SIGKILL at random moments during append and truncate (a backend
    with a server overrides :meth:`settle_after_kill`)."""

    crash_rounds = 60
    soak_crash_rounds = 600

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    def _crash(self, tmp_path: Path, rounds: int, seed: int) -> None:
        factory = self.checkpointer_factory(tmp_path / "store")
        rng = random.Random(seed)
        model: list[str] = []
        outcomes = []
        for _ in range(rounds):
            outcome = run_crash_round(
                factory,
                model,
                rng.randrange(1, 1 << 30),
                max_delay=0.04,
                settle=self.settle_after_kill,
            )
            model = outcome.log
            # without its log: keeping every round's whole log made memory grow with the
            # square of the rounds (a soak run of 600 was killed for lack of memory)
            outcomes.append(dataclasses.replace(outcome, log=[]))
        with factory() as cp:
            assert cp.check_integrity().ok
        mid_op = [o for o in outcomes if o.in_flight is not None]
        print(
            f"{rounds} kills: {len(mid_op)} during an operation "
            f"({sum(o.in_flight == 'truncate' for o in mid_op)} truncates), "
            f"{sum(o.applied for o in mid_op)} of those applied, "
            f"{sum(o.torn_tail for o in outcomes)} torn tails"
        )
        assert len(mid_op) >= rounds // 2, "too few kills landed during an operation"

    @pytest.mark.processes
    def test_sigkill_during_append_and_truncate(self, tmp_path: Path) -> None:
        """After each of many SIGKILLs the log opens, keeps every acknowledged append, shows no
        partial batch, and its head is its last seq."""
        self._crash(tmp_path, self.crash_rounds, seed=20261129)

    @pytest.mark.soak
    @pytest.mark.processes
    @pytest.mark.timeout(3600)
    def test_sigkill_soak(self, tmp_path: Path) -> None:
        """The SIGKILL test with many more rounds."""
        self._crash(tmp_path, self.soak_crash_rounds, seed=random.randrange(1 << 30))
