"""Contract tests of the live tail, :meth:`Checkpointer.follow`: in one process
(:class:`FollowTests`, part of ``CheckpointerConformance``) and across instances and real OS
processes (:class:`DurableFollowTests`, part of ``DurableConformance``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .._contract import Checkpointer, Position
from .._errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    InvalidArgumentError,
    InvalidSessionIdError,
)
from .._events import StoredEvent
from .._follow import Follower
from ._processes import run_separate_writers
from ._util import Factory, prompts, texts

__all__ = ["DurableFollowTests", "FollowTests"]

_WAIT = 30.0  # generous: a loaded machine may be slow; no test measures time


def _later(fn: Callable[[], object], delay: float = 0.05) -> threading.Thread:
    """Run ``fn`` in a thread after ``delay`` seconds (while the test blocks in a follower)."""

    def run() -> None:
        time.sleep(delay)
        fn()

    t = threading.Thread(target=run)
    t.start()
    return t


def _take(follower: Follower, n: int) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    for _ in range(n):
        event = follower.get(timeout=_WAIT)
        assert event is not None, f"the follower delivered {len(out)} of {n} events"
        out.append(event)
    return out


class FollowTests:
    """The live tail in one process. Needs the ``cp`` and ``factory`` fixtures of
    ContractTests."""

    def test_follow_yields_the_log_then_new_events(self, cp: Checkpointer) -> None:
        """A follower delivers the stored events after ``since``, then each new one."""
        cp.append("s", prompts("a", "b", "c"))
        with cp.follow("s", since=1) as f:
            assert ["b", "c"] == texts(_take(f, 2))
            t = _later(lambda: cp.append("s", prompts("d", "e")))
            assert ["d", "e"] == texts(_take(f, 2))
            t.join()
            assert 5 == f.cursor

    def test_follow_waits_for_a_session_to_be_created(self, cp: Checkpointer) -> None:
        """Following an unknown session waits for its first events."""
        with cp.follow("new") as f:
            assert f.get(timeout=0.01) is None
            t = _later(lambda: cp.append("new", prompts("first")))
            (event,) = _take(f, 1)
            t.join()
        assert (1, ["first"]) == (event.seq, texts([event]))
        assert cp.position("new").generation == f.generation

    def test_follow_delivers_every_event_once_in_order(self, cp: Checkpointer) -> None:
        """Events appended by a thread while the follower reads come exactly once, in order."""
        names = [f"e{i}" for i in range(120)]

        def writer() -> None:
            for i in range(0, len(names), 3):
                cp.append("s", prompts(*names[i : i + 3]))

        with cp.follow("s") as f:
            t = _later(writer, 0.0)
            events = _take(f, len(names))
            t.join()
            assert f.get(timeout=0.01) is None
        assert list(range(1, 121)) == [e.seq for e in events]
        assert names == texts(events)

    def test_truncate_ends_the_follower_with_a_conflict(self, cp: Checkpointer) -> None:
        """A truncate under a follower raises CheckpointConflictError naming both positions;
        nothing of the new history is yielded."""
        cp.append("s", prompts("a", "b", "c"))
        f = cp.follow("s")
        old = cp.position("s")
        assert ["a", "b", "c"] == texts(_take(f, 3))
        cp.truncate("s", 1)
        cp.append("s", prompts("x", "y"))
        with pytest.raises(CheckpointConflictError) as info:
            f.get(timeout=_WAIT)
        assert Position(3, old.generation) == info.value.expected
        assert cp.position("s") == info.value.actual

    def test_delete_ends_the_follower_with_a_conflict(self, cp: Checkpointer) -> None:
        """A delete (and recreate) under a follower raises CheckpointConflictError."""
        cp.append("s", prompts("a"))
        f = cp.follow("s")
        _take(f, 1)
        cp.delete("s")
        cp.append("s", prompts("new"))
        with pytest.raises(CheckpointConflictError):
            f.get(timeout=_WAIT)

    def test_truncate_before_the_first_read_is_caught_by_expected_generation(
        self, cp: Checkpointer
    ) -> None:
        """``expected_generation`` makes a follower refuse a history that is not the one its
        ``since`` refers to."""
        cp.append("s", prompts("a", "b"))
        seen = cp.position("s")
        cp.truncate("s", 1)
        cp.append("s", prompts("b'"))
        f = cp.follow("s", since=2, expected_generation=seen.generation)
        with pytest.raises(CheckpointConflictError):
            f.get(timeout=_WAIT)
        g = cp.follow("s", since=1, expected_generation=cp.position("s").generation)
        assert ["b'"] == texts(_take(g, 1))

    def test_get_times_out_with_none(self, cp: Checkpointer) -> None:
        """``get(timeout)`` returns None when nothing new is committed."""
        cp.append("s", prompts("a"))
        f = cp.follow("s", since=1)
        assert f.get(timeout=0.05) is None
        assert 1 == f.cursor

    def test_close_ends_a_blocked_iteration(self, cp: Checkpointer) -> None:
        """``close()`` from another thread ends a ``for`` loop blocked in the follower."""
        got: list[StoredEvent] = []
        f = cp.follow("s")
        t = threading.Thread(target=lambda: got.extend(f))
        t.start()
        cp.append("s", prompts("a", "b"))
        deadline = time.monotonic() + _WAIT
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        f.close()
        t.join(_WAIT)
        assert not t.is_alive()
        assert ["a", "b"] == texts(got)
        assert f.closed
        assert f.get(timeout=0) is None

    def test_async_iteration(self, cp: Checkpointer) -> None:
        """``async for`` delivers the same events, new ones included."""
        cp.append("s", prompts("a"))

        async def main() -> list[StoredEvent]:
            out: list[StoredEvent] = []
            with cp.follow("s") as f:
                t = _later(lambda: cp.append("s", prompts("b", "c")))
                async for event in f:
                    out.append(event)
                    if len(out) == 3:
                        break
                t.join()
            return out

        assert ["a", "b", "c"] == texts(asyncio.run(asyncio.wait_for(main(), _WAIT)))

    def test_cancelled_async_wait_loses_nothing(self, cp: Checkpointer) -> None:
        """A task cancelled while it awaits the follower leaves the follower usable: the next
        events still come exactly once."""

        async def main() -> list[StoredEvent]:
            f = cp.follow("s")
            task = asyncio.ensure_future(f.__anext__())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            cp.append("s", prompts("a", "b"))
            out = [await f.__anext__(), await f.__anext__()]
            await f.aclose()
            with pytest.raises(StopAsyncIteration):
                await f.__anext__()
            return out

        events = asyncio.run(asyncio.wait_for(main(), _WAIT))
        assert [(1, "a"), (2, "b")] == list(
            zip([e.seq for e in events], texts(events), strict=True)
        )

    def test_closing_the_checkpointer_stops_its_followers(self, factory: Factory) -> None:
        """A follower of a closed checkpointer raises CheckpointerClosedError; follow() on a
        closed checkpointer too."""
        cp = factory()
        cp.append("s", prompts("a"))
        f = cp.follow("s", since=1)
        raised: list[BaseException] = []

        def wait() -> None:
            try:
                f.get(timeout=_WAIT)
            except BaseException as e:  # noqa: BLE001 -- checked below
                raised.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
        cp.close()
        t.join(_WAIT)
        assert [CheckpointerClosedError] == [type(e) for e in raised]
        with pytest.raises(CheckpointerClosedError):
            cp.follow("s")

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"since": -1},
            {"since": "1"},
            {"since": True},
            {"expected_generation": -2},
            {"max_staleness": 0},
            {"max_staleness": float("nan")},
            {"max_staleness": "1"},
        ],
        ids=repr,
    )
    def test_bad_follow_arguments_are_refused(
        self, cp: Checkpointer, kwargs: dict[str, Any]
    ) -> None:
        """follow() validates its arguments before anything is read."""
        with pytest.raises(InvalidArgumentError):
            cp.follow("s", **kwargs)

    def test_bad_session_id_is_refused_by_follow(self, cp: Checkpointer) -> None:
        """follow() validates the session id."""
        with pytest.raises(InvalidSessionIdError):
            cp.follow("../x")


class DurableFollowTests:
    """The live tail across checkpointer instances and real OS processes."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    def test_follow_sees_another_instance_write(self, tmp_path: Path) -> None:
        """A follower on one instance delivers what another instance appends, and ends on
        another instance's truncate."""
        factory = self.checkpointer_factory(tmp_path / "store")
        with factory() as a, factory() as b:
            a.append("s", prompts("a"))
            with b.follow("s") as f:
                assert ["a"] == texts(_take(f, 1))
                t = _later(lambda: a.append("s", prompts("b", "c")))
                assert ["b", "c"] == texts(_take(f, 2))
                t.join()
                a.truncate("s", 0)
                with pytest.raises(CheckpointConflictError):
                    f.get(timeout=_WAIT)

    @pytest.mark.processes
    def test_follow_delivers_other_processes_writes(self, tmp_path: Path) -> None:
        """Followers in this process deliver every event 4 writer processes append, exactly
        once and in order."""
        factory = self.checkpointer_factory(tmp_path / "store")
        got: dict[str, list[str]] = {}
        errors: list[BaseException] = []
        with factory() as cp:

            def follow(sid: str) -> None:
                try:
                    with cp.follow(sid) as f:
                        got[sid] = texts(_take(f, 50))
                except BaseException as e:  # noqa: BLE001 -- reported by the assertion below
                    errors.append(e)

            threads = [threading.Thread(target=follow, args=(f"own{n}",)) for n in range(4)]
            for t in threads:
                t.start()
            ids = run_separate_writers(factory, processes=4, count=50)
            for t in threads:
                t.join(_WAIT * 2)
        assert [] == errors
        assert {sid: [f"{sid}:{i}" for i in range(50)] for sid in ids} == got
