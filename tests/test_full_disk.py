"""An agent whose store and workspace fill a real, small disk mid-session.

A tmpfs of a few hundred KiB (the file backend) or one to two MiB (SQLite, whose WAL needs
room) holds the store and the workspace; a seeded random mix of turns (tool calls writing and
deleting files of up to 60 KB, shell output), restores and their undos, compactions, forks and
their deletion, and garbage collection runs on one session while the disk fills, with files
deleted now and then to make some room. Then the disk is given room again. What must hold:

- every failure is a library error (:class:`LiteAgentError`), never a raw ``OSError``;
- every acknowledged prompt is still in the log, in order (a restore that succeeded, or an
  interrupted one finished, takes away the prompts from its checkpoint on, and nothing else; an
  undo brings them back);
- a failed restore that left no interrupted restore behind changed neither the conversation
  nor a file (unless its error names the files it could not return);
- an interrupted restore can be finished or rolled back, as the user chooses;
- once there is room, the same agent sends again on the session (a lease whose release could
  not be written does not keep it busy), and the store's integrity check passes.

The same with many sessions of one async agent filling the disk together (100 by default, 1,000
in the soak run): every send completes or raises StorageIOError, and all take a turn once there
is room.

Needs root and mount(8) for the tmpfs; skipped with the reason elsewhere.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _restore_model import call, reply
from _tmpfs import grow, small_tmpfs

from liteagent.eventlog import Checkpointer, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.errors import LiteAgentError, StorageIOError
from liteagent.eventlog.types import AssistantMessage
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_async_lite_agent, create_lite_agent
from liteagent.tools import bash, delete_file, write_file

OPS = 60
GUARD = 120.0  # seconds: a hang guard, never a performance bound


def _script(rng: random.Random) -> Iterator[AssistantMessage]:
    """Turns of zero or one tool call and a reply of up to ~6 KB."""
    while True:
        k = rng.random()
        name = f"f{rng.randint(0, 5)}.txt"
        if k < 0.5:
            size = rng.choice([10, 1000, 20_000, 60_000])
            yield call("write_file", {"path": name, "content": "x" * size})
        elif k < 0.6:
            yield call("delete_file", {"path": name})
        elif k < 0.7:
            size = rng.choice([100, 30_000])
            yield call("bash", {"command": f"head -c {size} /dev/zero | tr '\\0' y"})
        yield reply("ok " * rng.randint(1, 2000))


def _files(work: Path) -> dict[str, bytes]:
    return {str(p.relative_to(work)): p.read_bytes() for p in work.rglob("*") if p.is_file()}


class _Run:
    """The session ``s`` of one agent, and what the test knows must be in its log."""

    def __init__(self, agent: LiteAgent, cp: Checkpointer, rng: random.Random) -> None:
        self.agent, self.cp, self.rng = agent, cp, rng
        self.expected: list[str] = []  # acknowledged prompts not taken away by a restore
        self.acknowledged: set[str] = set()  # every prompt whose send returned
        self.forks: list[str] = []  # sessions forked from "s", not deleted
        self.outcomes: dict[str, int] = {}

    def prompts(self) -> list[str]:
        return [text for _, text in self.seq_prompts()]

    def seq_prompts(self) -> list[tuple[int, str]]:
        return [
            (e.seq, e.body.text)
            for e in self.cp.read("s")
            if e.kind == "user_prompt" and e.body.origin == "user"
        ]

    def _forget_from(self, seq: int, before: list[tuple[int, str]]) -> None:
        """A restore to the checkpoint at ``seq`` took away every prompt from there on (of the
        log as it was, ``before``)."""
        gone = {text for at, text in before if at >= seq}
        self.expected = [p for p in self.expected if p not in gone]

    def resolve(self) -> None:
        """Finish or roll back the interrupted restore (as the user chooses)."""
        pending = self.agent.pending_restore("s")
        if pending is None:
            return
        before = self.seq_prompts()
        if self.rng.random() < 0.5:
            self.agent.rollback_restore("s")
        else:
            self.agent.finish_restore("s")
            self._forget_from(pending.to_seq, before)

    def restore(self, work: Path) -> None:
        checkpoints = self.agent.list_checkpoints("s")
        if not checkpoints:
            return
        checkpoint = self.rng.choice(checkpoints)
        prompts, files = self.seq_prompts(), _files(work)
        failure: LiteAgentError | None = None
        try:
            self.agent.restore("s", checkpoint.seq)
        except LiteAgentError as e:
            failure = e
        if failure is None:
            self._forget_from(checkpoint.seq, prompts)
            return
        if self.agent.pending_restore("s") is None:
            assert prompts == self.seq_prompts(), f"a failed restore changed the log: {failure!r}"
            if "could not be returned" not in str(failure):
                assert files == _files(work), f"a failed restore changed files: {failure!r}"
        raise failure

    def undo(self) -> None:
        """Undo the last restore: the prompts it took away come back (the test then trusts
        the log for which acknowledged prompts are in the session)."""
        self.agent.undo_restore("s")
        self.expected = [p for p in self.prompts() if p in self.acknowledged]

    def op(self, i: int, work: Path) -> None:
        """One random operation; a library error is counted, anything else fails the test."""
        kind = self.rng.choices(
            ["send", "restore", "undo", "compact", "fork", "delete fork", "gc"],
            [60, 10, 5, 8, 8, 5, 4],
        )[0]
        kind = "send" if not self.expected else kind
        try:
            if kind == "send":
                text = f"p{i} " + "z" * self.rng.choice([10, 5000])
                self.agent.send(text, session_id="s")
                self.expected.append(text)
                self.acknowledged.add(text)
            elif kind == "restore":
                self.restore(work)
            elif kind == "undo":
                self.undo()
            elif kind == "compact":
                self.agent.compact(session_id="s")
            elif kind == "fork":
                checkpoints = self.agent.list_checkpoints("s")
                if checkpoints:
                    self.forks.append(self.agent.fork("s", self.rng.choice(checkpoints).seq))
            elif kind == "delete fork":
                if self.forks:
                    self.agent.delete_session(self.forks.pop(self.rng.randrange(len(self.forks))))
            else:
                self.agent.collect_garbage(grace=0.0, branch_retention=self.rng.choice([None, 0.0]))
            outcome = "ok"
        except LiteAgentError as e:
            outcome = type(e).__name__
            if self.agent.pending_restore("s") is not None:  # left by this op or an earlier one
                try:
                    self.resolve()
                except LiteAgentError as again:  # the disk may still be full
                    outcome += f" then {type(again).__name__}"
        self.outcomes[f"{kind}: {outcome}"] = self.outcomes.get(f"{kind}: {outcome}", 0) + 1


def _store(backend: str, root: Path) -> Checkpointer:
    if backend == "file":
        return file_checkpointer(root / "store")
    return sqlite_checkpointer(root / "sessions.db")


def _run(tmp_path: Path, backend: str, seed: int) -> dict[str, int]:
    rng = random.Random(f"{backend}-{seed}")
    size = rng.choice([128, 256, 512] if backend == "file" else [1024, 1536, 2048])
    with small_tmpfs(tmp_path / "disk", size) as disk:
        work = disk / "work"
        work.mkdir()
        cp = _store(backend, disk)
        script: list[Any] = list(itertools.islice(_script(rng), 400))
        agent = create_lite_agent(
            model=scripted(script),
            model_name="m",
            workdir=work,
            checkpointer=cp,
            tools=[write_file, delete_file, bash],
        )
        run = _Run(agent, cp, rng)
        with cp, agent:
            for i in range(OPS):
                run.op(i, work)
                if rng.random() < 0.15:  # make some room
                    for f in sorted(work.glob("*.txt")):
                        if rng.random() < 0.5:
                            f.unlink()
            grow(disk, 64 * 1024)
            run.resolve()
            agent.send("after", session_id="s")
            run.expected.append("after")
            got = iter(run.prompts())
            if not all(any(p == q for q in got) for p in run.expected):
                pytest.fail(
                    f"acknowledged prompts lost: expected {[p[:6] for p in run.expected]}, the "
                    f"log has {[p[:6] for p in run.prompts()]}; outcomes {run.outcomes}",
                    pytrace=False,
                )
            report = cp.check_integrity()
            assert report.ok, report.detail
        return run.outcomes


@pytest.mark.parametrize("backend", ["file", "sqlite"])
@pytest.mark.parametrize("seed", range(10))
def test_a_full_disk_mid_session(tmp_path: Path, backend: str, seed: int) -> None:
    """Ten seeded runs per backend keep the module's guarantees; in each, a send succeeded and an
    operation raised StorageIOError as the disk filled."""
    outcomes = _run(tmp_path, backend, seed)
    assert any(k.startswith("send: ok") for k in outcomes), outcomes  # the run did work
    assert any("StorageIOError" in k for k in outcomes), outcomes  # and the disk did fill


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["file", "sqlite"])
@pytest.mark.parametrize("seed", range(10, 250))
def test_a_full_disk_mid_session_soak(tmp_path: Path, backend: str, seed: int) -> None:
    """The soak run: 240 more seeds per backend keep the module's guarantees."""
    _run(tmp_path, backend, seed)


async def _many(disk: Path, backend: str, sessions: int) -> None:
    """``sessions`` sessions of one async agent, three turns each at once, on the full disk;
    then room again and one more turn each."""
    rng = random.Random(f"many-{backend}-{sessions}")
    work = disk / "work"
    work.mkdir()
    cp = _store(backend, disk)
    turns: list[Any] = []
    for _ in range(sessions * 4):
        name = f"f{rng.randint(0, 50)}.txt"
        turns += [call("write_file", {"path": name, "content": "x" * 3000}), reply("ok " * 300)]
    agent = create_async_lite_agent(
        model=scripted(turns),
        model_name="m",
        workdir=work,
        checkpointer=cp,
        tools=[write_file],
        max_live_sessions=16,
    )
    acknowledged: dict[str, list[str]] = {}
    failures: list[BaseException] = []

    async def three(sid: str) -> None:
        for t in range(3):
            try:
                await asyncio.wait_for(agent.send(f"{sid} {t}", session_id=sid), GUARD)
            except LiteAgentError as e:
                failures.append(e)
                continue
            acknowledged.setdefault(sid, []).append(f"{sid} {t}")

    with cp:
        async with agent:
            ids = [f"s{i}" for i in range(sessions)]
            await asyncio.gather(*(three(sid) for sid in ids))
            assert failures, "the disk never filled"
            assert {type(e) for e in failures} == {StorageIOError}, failures[:3]
            grow(disk, 256 * 1024)
            for f in work.glob("*.txt"):
                f.unlink()
            await asyncio.wait_for(
                asyncio.gather(*(agent.send("after", session_id=sid) for sid in ids)), GUARD
            )
            for sid, prompts in acknowledged.items():
                log = [e.body.text for e in cp.read(sid) if e.kind == "user_prompt"]
                assert [p for p in log if p in prompts] == prompts, sid
                assert log[-1] == "after"
        report = cp.check_integrity()
        assert report.ok, report.detail


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_many_sessions_fill_the_disk_together(tmp_path: Path, backend: str) -> None:
    """Every send on a full disk raises StorageIOError (none hangs, none raises anything else),
    no acknowledged prompt is lost, and with room again every session takes another turn."""
    with small_tmpfs(tmp_path / "disk", 1024 if backend == "file" else 3072) as disk:
        asyncio.run(_many(disk, backend, 100))


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_thousand_sessions_fill_the_disk_together(tmp_path: Path, backend: str) -> None:
    """The soak run of the many-sessions test with 1,000 sessions: on a full disk sends fail only
    with StorageIOError, no acknowledged prompt is lost, and with room each takes a turn."""
    with small_tmpfs(tmp_path / "disk", 4096 if backend == "file" else 8192) as disk:
        asyncio.run(_many(disk, backend, 1000))
