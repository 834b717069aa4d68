"""The randomized corruption suite: damage a closed store, then hold the backend to the contract.

Each trial writes a random history (several sessions, batches of one to four events, truncates,
deletes) with the trial's own ``random.Random``, closes the store, damages it once through the
:meth:`CorruptionConformance.damage` hook, and then, with fresh checkpointers on the store:

- every read returns the exact acknowledged history, or raises :class:`CorruptLogError` after
  yielding an exact prefix of it; it may end early without an error only when the damage was a
  tail loss (its description starts with :data:`TAIL_LOSS`: a cut or zeroed end of the stored
  history, which no store can tell from an unfinished last write);
- every append either raises :class:`CorruptLogError` or succeeds, and then a full read returns
  the history it was appended to followed by the new events (nothing is ever acknowledged that
  cannot be read back); a stale ``expected_head`` never succeeds except on a tail loss that put
  the head exactly there;
- ``position()`` raises :class:`CorruptLogError` or reports the head a complete read reaches;
- ``check_integrity()`` returns a report (or raises :class:`CorruptLogError` for a store it
  cannot open at all), and a report that says ``ok`` is never followed by a read that raises;
- ``repair()`` leaves every session reading back an exact prefix of its history (the
  ``kept_head`` it reports, with the lost seqs named when it lost any) and accepting appends,
  also through a checkpointer opened afterwards.

:class:`CodecError` is never accepted: every damage the suite makes changes stored bytes, which a
backend's checksums must catch as :class:`CorruptLogError`; ``CodecError`` is for intact bytes
that the codec or the event decoder refuses (a wrong storage codec).

A backend may refuse to open a store whose own structure is destroyed (``open_refusals``, e.g.
a SQLite file whose first page was zeroed), and a backend may declare errors its ``repair()``
raises for damage it cannot salvage (``repair_refusals``, none by default); the trial then ends
there. Any other exception, a
wrong history fails the test with the trial's seed and damage in the message; every trial
prints its seed and damage first, so a hang (stopped by pytest's timeout) names its trial too.
Rerun one trial with :meth:`CorruptionConformance.run_corruption_trial`.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .._contract import INFORMATIONAL_PROBLEMS, Checkpointer
from .._errors import CheckpointConflictError, CorruptLogError, NotADatabaseError
from .._events import StoredEvent
from ._damage_file import TAIL_LOSS
from ._util import Factory, prompt

__all__ = ["CorruptionConformance", "CorruptionTrialError"]

_SESSIONS = ("s0", "s1", "s2")
_Entry = tuple[str, float]  # (prompt text, ts)


class CorruptionTrialError(AssertionError):
    """Raised when a trial of the corruption suite finds the contract broken."""


@dataclass
class _Trial:
    seed: int
    rng: random.Random
    model: dict[str, list[_Entry]] = field(default_factory=dict)
    damage: str = ""
    tail_loss: bool = False
    counter: int = 0

    def fail(self, what: str) -> CorruptionTrialError:
        return CorruptionTrialError(
            f"corruption trial seed={self.seed} damage=[{self.damage}]: {what}"
        )

    def batch(self, n: int) -> tuple[list[_Entry], float]:
        ts = 1_700_000_000.0 + self.counter + self.rng.random()
        entries = []
        for _ in range(n):
            self.counter += 1
            entries.append((f"t{self.seed}-e{self.counter}", ts))
        return entries, ts


def _expected(entries: list[_Entry]) -> list[tuple[int, float, str, object]]:
    return [(i + 1, ts, "user_prompt", prompt(t)) for i, (t, ts) in enumerate(entries)]


def _actual(events: list[StoredEvent]) -> list[tuple[int, float, str, object]]:
    return [(e.seq, e.ts, e.kind, e.body) for e in events]


class CorruptionConformance:
    """Random damage to a closed store, then the contract. Implement
    :meth:`checkpointer_factory` and :meth:`damage`."""

    corruption_trials = 200
    soak_corruption_trials = 2000
    corruption_seed = 20261201
    open_refusals: tuple[type[Exception], ...] = (CorruptLogError, NotADatabaseError)
    """Errors a backend may raise when it cannot open a damaged store at all."""
    repair_refusals: tuple[type[Exception], ...] = ()
    """Errors a backend's ``repair()`` may raise for damage it cannot salvage (the trial then
    ends); none by default: repair always salvages."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        """Damage the closed store under ``path`` in one random way, aimed at ``session_id``;
        return a description (starting with :data:`TAIL_LOSS` when it only cut or zeroed the
        end of the stored history)."""
        raise NotImplementedError

    # -- the tests ------------------------------------------------------------------------------

    def test_random_corruption(self, tmp_path: Path) -> None:
        """After each of many random damages, reads, appends, integrity checks and repair keep
        the contract: nothing acknowledged is unreadable, nothing foreign is raised."""
        self._run(tmp_path, self.corruption_trials, self.corruption_seed)

    @pytest.mark.soak
    @pytest.mark.timeout(3600)
    def test_random_corruption_soak(self, tmp_path: Path) -> None:
        """The corruption test with many more trials and a random seed."""
        self._run(tmp_path, self.soak_corruption_trials, random.randrange(1 << 30))

    def _run(self, tmp_path: Path, trials: int, seed: int) -> None:
        print(f"corruption suite: {trials} trials from seed {seed}")
        kinds: dict[str, int] = {}
        for i in range(trials):
            root = tmp_path / f"trial{i}"
            outcome = self.run_corruption_trial(root, seed + i)
            kinds[outcome] = kinds.get(outcome, 0) + 1
            shutil.rmtree(root, ignore_errors=True)
        print(f"outcomes: {dict(sorted(kinds.items()))}")

    # -- one trial ------------------------------------------------------------------------------

    def run_corruption_trial(self, root: Path, seed: int) -> str:
        """Run the trial of ``seed`` in the empty folder ``root``; return how the backend
        responded (for the summary); raise :class:`CorruptionTrialError` on a broken rule."""
        trial = _Trial(seed, random.Random(seed))
        factory = self.checkpointer_factory(root)
        with factory() as cp:
            self._write_history(cp, trial)
        target = trial.rng.choice([s for s, m in sorted(trial.model.items()) if m])
        trial.damage = self.damage(root, target, trial.rng)
        trial.tail_loss = trial.damage.startswith(TAIL_LOSS)
        print(f"  seed {seed}: {trial.damage}")
        try:
            cp = factory()
        except self.open_refusals:
            return "open refused"
        except Exception as e:
            raise trial.fail(f"opening raised {type(e).__name__}: {e}") from e
        with cp:
            outcome = self._probe(cp, trial)
            try:
                self._repair_all(cp, trial)
            except self.repair_refusals:
                return "repair refused"
        self._verify_reopened(factory, trial)
        return outcome

    def _write_history(self, cp: Checkpointer, trial: _Trial) -> None:
        rng = trial.rng
        sessions = list(_SESSIONS[: rng.randint(1, len(_SESSIONS))])
        for sid in sessions:
            trial.model[sid] = []
        for _ in range(rng.randint(2, 14)):
            sid = rng.choice(sessions)
            entries = trial.model[sid]
            r = rng.random()
            if r < 0.12 and entries:
                to = rng.randrange(len(entries) + 1)
                cp.truncate(sid, to)
                del entries[to:]
            elif r < 0.15:
                cp.delete(sid)
                entries.clear()
            else:
                new, ts = trial.batch(rng.randint(1, 4))
                cp.append(sid, [prompt(t) for t, _ in new], ts=ts)
                entries.extend(new)
        if not any(trial.model.values()):
            new, ts = trial.batch(2)
            cp.append(sessions[0], [prompt(t) for t, _ in new], ts=ts)
            trial.model[sessions[0]].extend(new)

    # -- checks ---------------------------------------------------------------------------------

    def _read(self, cp: Checkpointer, sid: str, trial: _Trial, *, exact: bool = False) -> bool:
        """Check one full read of ``sid``; return True when it raised CorruptLogError."""
        expected = _expected(trial.model[sid])
        got: list[StoredEvent] = []
        try:
            for ev in cp.read(sid):
                got.append(ev)
                if len(got) > len(expected):
                    break
        except CorruptLogError:
            if exact:
                raise trial.fail(
                    f"read of {sid} raised CorruptLogError where it must not"
                ) from None
            if _actual(got) != expected[: len(got)]:
                raise trial.fail(f"read of {sid} yielded events not in the history") from None
            return True
        except Exception as e:
            raise trial.fail(f"read of {sid} raised {type(e).__name__}: {e}") from e
        actual = _actual(got)
        if actual == expected:
            return False
        if trial.tail_loss and not exact and actual == expected[: len(actual)]:
            trial.model[sid] = trial.model[sid][: len(actual)]  # the history is now this prefix
            return False
        differ = [i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b]
        raise trial.fail(
            f"read of {sid} returned {len(actual)} events that are not the history of "
            f"{len(expected)} (first difference at index {differ[0] if differ else None})"
        )

    def _append(self, cp: Checkpointer, sid: str, trial: _Trial, expect: str) -> None:
        known = len(trial.model[sid])
        expected_head = {"none": None, "head": known, "stale": max(0, known - 1)}[expect]
        stale = expect == "stale" and known > 0
        new, ts = trial.batch(trial.rng.randint(1, 3))
        try:
            head = cp.append(sid, [prompt(t) for t, _ in new], expected_head, ts=ts)
        except CorruptLogError:
            return
        except CheckpointConflictError as e:
            if not (stale or trial.tail_loss):
                raise trial.fail(f"append to {sid} at its head raised a conflict: {e}") from e
            return
        except Exception as e:
            raise trial.fail(f"append to {sid} raised {type(e).__name__}: {e}") from e
        kept = head - len(new)
        if not 0 <= kept <= known or (kept < known and not trial.tail_loss):
            raise trial.fail(f"append to {sid} was acknowledged at head {head}; history {known}")
        if stale and not (trial.tail_loss and kept == expected_head):
            raise trial.fail(f"append to {sid} with a stale expected_head was acknowledged")
        trial.model[sid] = trial.model[sid][:kept] + new
        self._read(cp, sid, trial, exact=True)

    def _position(self, cp: Checkpointer, sid: str, trial: _Trial) -> None:
        try:
            head = cp.position(sid).head
        except CorruptLogError:
            return
        except Exception as e:
            raise trial.fail(f"position of {sid} raised {type(e).__name__}: {e}") from e
        known = len(trial.model[sid])
        if head > known or (head < known and not trial.tail_loss):
            raise trial.fail(f"position of {sid} reports head {head}; history {known}")
        if not self._read(cp, sid, trial) and len(trial.model[sid]) != head:
            raise trial.fail(
                f"position of {sid} reports head {head}; a read reaches {len(trial.model[sid])}"
            )

    def _integrity(self, cp: Checkpointer, trial: _Trial) -> None:
        try:
            report = cp.check_integrity()
        except CorruptLogError:
            return
        except Exception as e:
            raise trial.fail(f"check_integrity raised {type(e).__name__}: {e}") from e
        if report.ok:
            for sid in sorted(trial.model):
                if self._read(cp, sid, trial):
                    raise trial.fail(f"check_integrity said ok but reading {sid} raised")

    def _probe(self, cp: Checkpointer, trial: _Trial) -> str:
        rng = trial.rng
        corrupt = 0
        sessions = sorted(trial.model)
        rng.shuffle(sessions)
        for sid in sessions:
            order = rng.choice(["read", "append", "position", "integrity"])
            if order == "read":
                corrupt += self._read(cp, sid, trial)
            elif order == "position":
                self._position(cp, sid, trial)
            elif order == "integrity":
                self._integrity(cp, trial)
            self._append(cp, sid, trial, rng.choice(["none", "head", "stale"]))
            corrupt += self._read(cp, sid, trial)
        return "corruption reported" if corrupt else "read back"

    def _repair_all(self, cp: Checkpointer, trial: _Trial) -> None:
        for sid in sorted(trial.model):
            known = len(trial.model[sid])
            try:
                report = cp.repair(sid)
            except self.repair_refusals:
                raise
            except Exception as e:
                raise trial.fail(f"repair of {sid} raised {type(e).__name__}: {e}") from e
            kept = report.kept_head
            if not 0 <= kept <= known:
                raise trial.fail(f"repair of {sid} kept head {kept}; history {known}")
            if kept < known and report.lost:
                first, last = report.lost[0]
                if first != kept + 1 or (last is not None and last < known):
                    raise trial.fail(
                        f"repair of {sid} kept {kept} of {known} but reports lost {report.lost}"
                    )
            elif kept < known and not trial.tail_loss:
                raise trial.fail(f"repair of {sid} kept {kept} of {known} and reports no loss")
            trial.model[sid] = trial.model[sid][:kept]
            self._read(cp, sid, trial, exact=True)
            if cp.position(sid).head != kept:
                raise trial.fail(f"after repair {sid} is at {cp.position(sid)}, kept {kept}")
            if report.repaired and cp.position(sid).generation != report.generation:
                raise trial.fail(
                    f"repair of {sid} reports generation {report.generation}, "
                    f"the session is at {cp.position(sid)}"
                )
            self._append(cp, sid, trial, "head")
            if len(trial.model[sid]) == kept:
                raise trial.fail(f"after repair an append to {sid} was refused")

    def _verify_reopened(self, factory: Factory, trial: _Trial) -> None:
        try:
            cp = factory()
        except Exception as e:
            raise trial.fail(f"reopening after repair raised {type(e).__name__}: {e}") from e
        with cp:
            for sid in sorted(trial.model):
                self._read(cp, sid, trial, exact=True)
            report = cp.check_integrity()
            left = [
                p
                for p in report.problems
                if p.session_id in trial.model and p.kind not in INFORMATIONAL_PROBLEMS
            ]
            if left:
                raise trial.fail(f"after repair check_integrity still finds {left}")
            for sid in sorted(trial.model):
                self._append(cp, sid, trial, "head")
