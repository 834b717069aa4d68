"""Property: restores, undos and forks of sessions sharing one workspace match a simple model.

Two sessions (and the forks made of them) work on one workspace and one checkpointer through
the real file tools, over a random sequence of prompts (random writes, edits and deletes), the
user's own edits, restores, undos and forks. The model keeps the files (path -> bytes), each
session's log as a list of ``(kind, body)`` (a prompt appends what the turn recorded; time
travel only cuts, brings back and copies), each session's prompts with the file changes their
tool calls made, and the branches. After every step the workspace and every log equal the
model; a restore or an undo that the model says must refuse (a file not as the operation
expects it: the other session or the user changed it) refuses naming exactly those files and
changes nothing.
"""

from __future__ import annotations

import collections
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _restore_model import CONTENT, NAMES, apply, call, draw_call, reply
from _restore_tools import TOOLS, workspace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import Checkpointer, memory_checkpointer
from liteagent.eventlog.types import Forked, ModelRequest, UserPrompt
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, NoBranchError, RestoreRefusedError, create_lite_agent

Content = bytes | None


@dataclass
class Prompt:
    """One prompt of a session: its checkpoint seq and the (path, before, after) of each call."""

    seq: int
    touches: list[tuple[str, Content, Content]]


@dataclass
class Branch:
    """A branch by the model: what bringing it back checks and does."""

    id: str
    made_by: str
    at_seq: int
    events: list[tuple[str, Any]]  # brought back after the log (a restore's branch)
    prompts: list[Prompt]
    files: dict[str, tuple[Content, Content]]  # path -> (must hold now, put back)
    log_after: list[tuple[str, Any]]


@dataclass
class Session:
    """A session by the model."""

    log: list[tuple[str, Any]] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)


@dataclass
class World:
    """The model, and the real agent, checkpointer and workspace it is checked against."""

    work: Path
    cp: Checkpointer
    agent: LiteAgent
    queue: collections.deque[Any]
    files: dict[str, bytes]
    sessions: dict[str, Session]
    prompts_sent: int = 0

    def check(self) -> None:
        assert self.files == workspace(self.work)
        for sid, s in self.sessions.items():
            assert s.log == [(e.kind, e.body) for e in self.cp.read(sid)], sid


def _refused(files: dict[str, bytes], expect: dict[str, Content]) -> dict[str, str]:
    return {
        path: "deleted" if files.get(path) is None else "changed"
        for path, want in expect.items()
        if files.get(path) != want
    }


def _put(files: dict[str, bytes], targets: dict[str, Content]) -> None:
    for path, data in targets.items():
        if data is None:
            files.pop(path, None)
        else:
            files[path] = data


def do_prompt(w: World, data: st.DataObject, sid: str) -> None:
    s = w.sessions[sid]
    touches = []
    for _ in range(data.draw(st.integers(0, 3), label="calls")):
        name, input = draw_call(data, list(NAMES[:5]), w.files)
        pre = w.files.get(input["path"])
        apply(w.files, name, input)
        if w.files.get(input["path"]) != pre:  # a call that changed nothing records nothing
            touches.append((input["path"], pre, w.files.get(input["path"])))
        w.queue.append(call(name, input))
    w.queue.append(reply("done"))
    w.prompts_sent += 1
    w.agent.send(f"prompt {w.prompts_sent}", session_id=sid)
    assert not w.queue
    new = list(w.cp.read(sid, len(s.log)))
    (seq,) = [e.seq for e in new if isinstance(e.body, UserPrompt) and e.body.origin == "user"]
    s.log += [(e.kind, e.body) for e in new]
    s.prompts.append(Prompt(seq, touches))


def do_restore(w: World, data: st.DataObject, sid: str) -> None:
    s = w.sessions[sid]
    k = data.draw(st.integers(0, len(s.prompts) - 1), label="checkpoint")
    seq, removed = s.prompts[k].seq, s.prompts[k:]
    first: dict[str, Content] = {}
    last: dict[str, Content] = {}
    for p in removed:
        for path, pre, post in p.touches:
            first.setdefault(path, pre)
            last[path] = post
    refused = _refused(w.files, last)
    if refused:
        event("restore refused")
        log = list(w.cp.read(sid))
        with pytest.raises(RestoreRefusedError) as info:
            w.agent.restore(sid, seq)
        assert sorted(refused) == [path for path, _ in info.value.problems]
        for path, reason in info.value.problems:
            assert reason.startswith(f"it was {refused[path]} since the agent")
        assert log == list(w.cp.read(sid))
        return
    event("restore")
    before = dict(w.files)
    result = w.agent.restore(sid, seq)
    assert tuple(sorted(first)) == result.restored_files
    assert result.branch is not None
    _put(w.files, first)
    events = s.log[seq - 1 :]
    s.log, s.prompts = s.log[: seq - 1], s.prompts[:k]
    s.branches.append(
        Branch(
            id=result.branch,
            made_by="restore",
            at_seq=seq,
            events=events,
            prompts=removed,
            files={path: (first[path], before.get(path)) for path in sorted(first)},
            log_after=list(s.log),
        )
    )


def do_undo(w: World, sid: str) -> None:
    s = w.sessions[sid]
    log = list(w.cp.read(sid))
    ready = [b for b in s.branches if b.log_after == s.log]
    if not s.branches:
        event("undo without a branch")
        with pytest.raises(NoBranchError):
            w.agent.undo_restore(sid)
        assert log == list(w.cp.read(sid))
        return
    if not ready:
        event("undo of a session that moved on")
        with pytest.raises(RestoreRefusedError) as info:
            w.agent.undo_restore(sid)
        assert [""] == [path for path, _ in info.value.problems]
        assert log == list(w.cp.read(sid))
        return
    chosen = ([b for b in ready if b.made_by == "restore"] or ready)[-1]
    refused = _refused(w.files, {path: now for path, (now, _) in chosen.files.items()})
    if refused:
        event("undo refused")
        with pytest.raises(RestoreRefusedError) as info:
            w.agent.undo_restore(sid)
        assert sorted(refused) == sorted(path for path, _ in info.value.problems)
        for path, reason in info.value.problems:
            assert reason.startswith(f"it was {refused[path]} since the restore put it back")
        assert log == list(w.cp.read(sid))
        return
    event("undo of a restore" if chosen.made_by == "restore" else "undo of an undo")
    result = w.agent.undo_restore(sid)
    assert tuple(chosen.files) == result.restored_files
    assert result.branch is not None
    before = {path: w.files.get(path) for path in chosen.files}
    _put(w.files, {path: back for path, (_, back) in chosen.files.items()})
    s.branches.remove(chosen)
    if chosen.events:  # brought back after the log
        s.log += chosen.events
        s.prompts += chosen.prompts
        made = Branch(result.branch, "undo", chosen.at_seq, [], chosen.prompts, {}, [])
    else:  # an undo's branch: the prompts it brought back go again
        k = next(i for i, p in enumerate(s.prompts) if p.seq == chosen.at_seq)
        events = s.log[chosen.at_seq - 1 :]
        made = Branch(result.branch, "undo", chosen.at_seq, events, s.prompts[k:], {}, [])
        s.log, s.prompts = s.log[: chosen.at_seq - 1], s.prompts[:k]
    made.files = {path: (back, before[path]) for path, (_, back) in chosen.files.items()}
    made.log_after = list(s.log)
    s.branches.append(made)


def do_fork(w: World, data: st.DataObject, sid: str) -> None:
    s = w.sessions[sid]
    k = data.draw(st.integers(0, len(s.prompts) - 1), label="checkpoint")
    seq = s.prompts[k].seq
    new = w.agent.fork(sid, seq)
    event("fork")
    w.sessions[new] = Session(
        log=[*s.log[: seq - 1], ("forked", Forked(origin=sid, at_seq=seq))],
        prompts=[Prompt(p.seq, list(p.touches)) for p in s.prompts[:k]],
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restores_undos_and_forks_match_the_model(data: st.DataObject) -> None:
    """Random prompts, user edits, restores, undos and forks of two sessions on one workspace:
    after each step the workspace and every log are the model's; refusals name exactly the
    files the model says and change nothing."""
    with tempfile.TemporaryDirectory() as tmp, memory_checkpointer() as cp:
        work = Path(tmp)
        queue: collections.deque[Any] = collections.deque()

        def answer(_request: ModelRequest) -> Any:
            return queue.popleft()

        agent = create_lite_agent(
            model=scripted([answer] * 400),
            model_name="m",
            workdir=work,
            checkpointer=cp,
            tools=TOOLS,
        )
        with agent:
            w = World(work, cp, agent, queue, {}, {"a": Session(), "b": Session()})
            for _ in range(data.draw(st.integers(1, 16), label="steps")):
                sid = data.draw(st.sampled_from(list(w.sessions)), label="session")
                has = bool(w.sessions[sid].prompts)
                ops = ["prompt", "prompt", "user", "undo"]
                ops += ["restore", "restore"] if has else []
                ops += ["fork"] if has and len(w.sessions) < 4 else []
                ops += ["undo"] * 4 if w.sessions[sid].branches else []
                op = data.draw(st.sampled_from(ops), label="op")
                if op == "prompt":
                    do_prompt(w, data, sid)
                elif op == "user":
                    path = data.draw(st.sampled_from(NAMES[:5]), label="user's file")
                    content = data.draw(st.none() | CONTENT, label="user's content")
                    target = work / path
                    if content is None:
                        target.unlink(missing_ok=True)
                        w.files.pop(path, None)
                    else:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(content)
                        w.files[path] = content
                elif op == "restore":
                    do_restore(w, data, sid)
                elif op == "undo":
                    do_undo(w, sid)
                else:
                    do_fork(w, data, sid)
                w.check()
                for name, s in w.sessions.items():
                    listed = {b.id: b.available for b in agent.list_branches(name)}
                    assert {b.id: b.log_after == s.log for b in s.branches} == listed
