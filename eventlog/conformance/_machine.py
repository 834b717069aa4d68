"""A hypothesis state machine that drives a checkpointer and a plain model side by side."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from .._contract import Checkpointer
from .._errors import CheckpointConflictError, TruncateRangeError
from ._util import prompts, texts

__all__ = ["MACHINE_SETTINGS", "make_machine"]

SESSIONS = st.sampled_from(["a", "b", "c.d"])
MACHINE_SETTINGS = settings(max_examples=25, stateful_step_count=30, deadline=None)


@dataclass
class _ModelSession:
    """The model of one session: its texts and an epoch that changes when its generation must."""

    texts: list[str] = field(default_factory=list)
    epoch: int = 0


def make_machine(open_store: Callable[[Path], Checkpointer]) -> type[RuleBasedStateMachine]:
    """Return a state machine class testing checkpointers opened by ``open_store(folder)``."""

    class CheckpointerMachine(RuleBasedStateMachine):
        """Each rule does the same thing to the checkpointer and to the model and compares."""

        def __init__(self) -> None:
            super().__init__()
            self.folder = Path(tempfile.mkdtemp(prefix="la-machine-"))
            self.cp = open_store(self.folder / "store")
            self.model: dict[str, _ModelSession] = {}
            self.epochs = 0
            self.generation_of_epoch: dict[int, int] = {}
            self.counter = 0

        def teardown(self) -> None:
            self.cp.close()
            shutil.rmtree(self.folder, ignore_errors=True)

        def _texts(self, n: int) -> list[str]:
            out = [f"e{self.counter + i}" for i in range(n)]
            self.counter += n
            return out

        def _new_epoch(self) -> int:
            self.epochs += 1
            return self.epochs

        @rule(sid=SESSIONS, n=st.integers(0, 4), mode=st.sampled_from(["none", "ok", "stale"]))
        def append(self, sid: str, n: int, mode: str) -> None:
            m = self.model.get(sid)
            head = 0 if m is None else len(m.texts)
            new = self._texts(n)
            if mode == "stale":
                try:
                    self.cp.append(sid, prompts(*new), expected_head=head + 1)
                except CheckpointConflictError:
                    return
                raise AssertionError("a stale expected_head was not refused")
            expected = head if mode == "ok" else None
            result = self.cp.append(sid, prompts(*new), expected_head=expected)
            if n:
                if m is None:
                    m = self.model[sid] = _ModelSession(epoch=self._new_epoch())
                m.texts.extend(new)
            assert head + n == result

        @rule(sid=SESSIONS, data=st.data())
        def truncate(self, sid: str, data: st.DataObject) -> None:
            m = self.model.get(sid)
            head = 0 if m is None else len(m.texts)
            to = data.draw(st.integers(0, head + 2))
            if to > head:
                try:
                    self.cp.truncate(sid, to)
                except TruncateRangeError:
                    return
                raise AssertionError("truncate beyond the head was not refused")
            assert to == self.cp.truncate(sid, to)
            if m is not None:
                del m.texts[to:]
                m.epoch = self._new_epoch()

        @rule(sid=SESSIONS)
        def delete(self, sid: str) -> None:
            self.cp.delete(sid)
            self.model.pop(sid, None)

        @rule(sid=SESSIONS, data=st.data())
        def read(self, sid: str, data: st.DataObject) -> None:
            m = self.model.get(sid)
            all_texts = [] if m is None else m.texts
            since = data.draw(st.integers(0, len(all_texts) + 1))
            events = list(self.cp.read(sid, since))
            assert all_texts[since:] == texts(events)
            assert list(range(since + 1, len(all_texts) + 1)) == [e.seq for e in events]

        @precondition(lambda self: bool(self.model))
        @rule()
        def stale_generation_refused(self) -> None:
            sid = sorted(self.model)[0]
            head, gen = self.cp.position(sid)
            try:
                self.cp.append(
                    sid, prompts("never"), expected_head=head, expected_generation=gen + 1
                )
            except CheckpointConflictError:
                return
            raise AssertionError("a stale expected_generation was not refused")

        @invariant()
        def positions_match_the_model(self) -> None:
            for sid in ("a", "b", "c.d"):
                head, gen = self.cp.position(sid)
                m = self.model.get(sid)
                if m is None:
                    assert (0, 0) == (head, gen)
                    continue
                assert len(m.texts) == head
                known = self.generation_of_epoch.setdefault(m.epoch, gen)
                assert known == gen, "the generation changed without a truncate"
            gens = list(self.generation_of_epoch.values())
            assert len(gens) == len(set(gens)), "a generation was reused"

        @invariant()
        def list_matches_the_model(self) -> None:
            assert sorted(self.model) == sorted(i.id for i in self.cp.list())

    CheckpointerMachine.TestCase.settings = MACHINE_SETTINGS
    return CheckpointerMachine
